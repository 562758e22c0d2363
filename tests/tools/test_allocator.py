"""fpsim's commands keep freed memory for reuse (glibc's mmap and trim thresholds): in the process,
and through the environment for the processes it starts; a user's own setting is kept, and where
the C library is not glibc nothing changes."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import pytest

from fpsim.tools import allocator, cli

GLIBC = sys.platform.startswith("linux") and hasattr(ctypes.CDLL(None), "gnu_get_libc_version")


@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_the_settings_reach_this_process_and_its_children(monkeypatch):
    for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"):
        monkeypatch.delenv(name, raising=False)
    calls = []
    real = allocator._glibc()

    class Spy:
        def mallopt(self, option, value):
            calls.append((option, value))
            return real.mallopt(option, value)

    monkeypatch.setattr(allocator, "_glibc", Spy)
    assert allocator.keep_freed_memory() is True
    assert calls == [(-3, 32 << 20), (-1, 256 << 20)]  # M_MMAP_THRESHOLD, M_TRIM_THRESHOLD (malloc.h)
    assert os.environ["MALLOC_MMAP_THRESHOLD_"] == str(32 << 20)
    assert os.environ["MALLOC_TRIM_THRESHOLD_"] == str(256 << 20)
    child = subprocess.run([sys.executable, "-c", "import os; print(os.environ['MALLOC_TRIM_THRESHOLD_'])"],
                           capture_output=True, text=True, check=True)
    assert child.stdout.strip() == str(256 << 20)


@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_a_users_own_setting_is_kept(monkeypatch):
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "1048576")
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    calls = []
    monkeypatch.setattr(allocator, "_glibc", lambda: type("L", (), {"mallopt": lambda self, o, v: calls.append(o) or 1})())
    assert allocator.keep_freed_memory() is True
    assert calls == [-3] and os.environ["MALLOC_TRIM_THRESHOLD_"] == "1048576"


def test_without_glibc_nothing_changes(monkeypatch):
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.setattr(allocator.sys, "platform", "darwin")
    assert allocator._glibc() is None
    assert allocator.keep_freed_memory() is False
    assert "MALLOC_MMAP_THRESHOLD_" not in os.environ


def test_every_command_sets_them_before_it_runs(monkeypatch, capsys):
    seen = []
    monkeypatch.setattr(cli, "keep_freed_memory", lambda: seen.append(True) or True)
    assert cli.main(["formats"]) == 0
    assert seen == [True]
