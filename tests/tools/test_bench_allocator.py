"""``fpsim bench``'s allocator section (``fpsim.tools.bench.allocrows``): the tiny GPT's fp32 step with
freed memory kept against glibc's default thresholds, each side in fresh processes."""

from __future__ import annotations

import statistics
import sys

import pytest

from fpsim.tools.bench import BenchSettings, allocrows


def test_the_two_environments_differ_in_the_two_thresholds_alone(monkeypatch):
    monkeypatch.setenv("MALLOC_ARENA_MAX", "2")  # any MALLOC_ variable is glibc's: gone from the default side
    monkeypatch.setenv("FPSIM_TEST_KEPT", "1")
    default, kept = allocrows._environments()
    assert not [k for k in default if k.startswith("MALLOC_")] and default["FPSIM_TEST_KEPT"] == "1"
    assert {k: v for k, v in kept.items() if k not in default} == \
        {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "268435456"}  # 32 MiB, 256 MiB
    assert {k: v for k, v in kept.items() if k in default} == default


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's thresholds: Linux only")
def test_quick_row_times_both_sides_in_fresh_processes(monkeypatch):
    calls = []
    real = allocrows._median_step

    def recorded(env, task_kwargs, warmup, steps):
        calls.append(("kept" if "MALLOC_MMAP_THRESHOLD_" in env else "default", task_kwargs, steps))
        return real(env, task_kwargs, warmup, steps)

    monkeypatch.setattr(allocrows, "_median_step", recorded)
    ticks = []
    (row,) = allocrows.allocator_rows(BenchSettings.quick_settings(), ticks.append)
    assert ticks == ["allocator"]
    assert [c[0] for c in calls] == ["kept", "default"] and calls[0][1]["n_layers"] == 1 and calls[0][2] == 2
    assert row.section == "allocator" and not row.skipped and row.limit is None
    assert row.seconds > 0 and row.peer_seconds > 0
    assert row.ratio == pytest.approx(row.seconds / row.peer_seconds, rel=1e-12)  # one pair: its own ratio
    assert "32 MiB" in row.note and "256 MiB" in row.note and "1 pair(s)" in row.note


def test_the_row_is_the_median_over_the_pairs(monkeypatch):
    times = iter([2.0, 4.0, 3.0, 3.0, 1.0, 4.0])  # (kept, default) per pair: ratios 0.5, 1.0, 0.25
    monkeypatch.setattr(allocrows, "_median_step", lambda *a: next(times))
    monkeypatch.setattr(sys, "platform", "linux")
    (row,) = allocrows.allocator_rows(BenchSettings(), lambda what: None)
    assert (row.seconds, row.peer_seconds, row.ratio) == (2.0, 4.0, statistics.median([0.5, 1.0, 0.25]))


def test_elsewhere_the_row_says_why_it_was_skipped(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    (row,) = allocrows.allocator_rows(BenchSettings.quick_settings(), lambda what: None)
    assert row.skipped == "glibc's thresholds: Linux only" and row.seconds is None


def test_a_timing_process_that_fails_is_one_line_naming_its_last_words(monkeypatch):
    monkeypatch.setattr(allocrows, "_CHILD", "raise SystemExit('no step here')")
    with pytest.raises(RuntimeError, match=r"^the allocator section's timing process failed: no step here$"):
        allocrows._median_step({}, {}, 0, 1)
