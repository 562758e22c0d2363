"""Sweeps on executors: ``compare_seeds(..., jobs=N)`` / ``fpsim compare --jobs N`` in local
worker processes and ``--scheduler ADDRESS`` on a Dask cluster give the serial sweep's results,
bit for bit; SIGTERM, SIGINT or a dying worker stop a sweep cleanly (the finished runs
reported, one line, no process left)."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import small_task

from fpsim.experiments import ReferenceTask, compare_seeds
from fpsim.experiments.executors import SweepStopped, local_processes, usable_cores


def _numbers(by_seed):
    out = {}
    for seed, runs in by_seed.items():
        for name, r in runs.items():
            d = dataclasses.asdict(r)
            d.pop("seconds")
            out[seed, name] = repr(d)  # repr: NaN == NaN, and every float to the last bit
    return out


def test_parallel_sweep_equals_serial():
    task = small_task(512)
    recipes = ["fp32", "fp16-dynamic", "bf16-stochastic", "fp8-delayed"]
    serial = compare_seeds(recipes, [0, 3], task, steps=4, progress=False)
    parallel = compare_seeds(recipes, [0, 3], task, steps=4, progress=False, jobs=2)
    assert list(parallel) == [0, 3] and all(list(parallel[s]) == recipes for s in parallel)
    assert _numbers(parallel) == _numbers(serial)


def test_jobs_must_be_positive():
    with pytest.raises(ValueError):
        compare_seeds(["fp32"], [0], small_task(64), steps=1, progress=False, jobs=0)


def test_jobs_are_capped_at_the_usable_cores():
    pool, env = local_processes(1000, 5000)
    try:
        assert pool._max_workers == usable_cores()
        assert env["OPENBLAS_NUM_THREADS"] == "1" and env["FPSIM_BLAS_THREADS"].isdigit()
    finally:
        pool.shutdown()
    pool, _ = local_processes(1000, 1)
    pool.shutdown()
    assert pool._max_workers == 1  # never more workers than runs


def test_the_same_bits_on_a_dask_cluster():
    distributed = pytest.importorskip("dask.distributed")
    task = small_task()
    recipes = ["fp32", "fp16-dynamic", "bf16-stochastic"]
    serial = compare_seeds(recipes, [0, 2], task, steps=3, progress=False)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1", processes=True,
                                  dashboard_address=None) as cluster:
        remote = compare_seeds(recipes, [0, 2], task, steps=3, progress=False, scheduler=cluster.scheduler_address)
    assert _numbers(remote) == _numbers(serial)


@dataclass(frozen=True)
class DiesAtSeed(ReferenceTask):
    """The reference task, but the worker process building seed ``die_seed``'s model dies."""

    die_seed: int = 99

    def model(self, seed: int = 0):
        if seed == self.die_seed:
            os._exit(3)
        return super().model(seed)


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(d.name))
            except (OSError, IndexError, ValueError):
                pass
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds worker processes through /proc")
def test_a_worker_that_dies_is_named_and_the_finished_runs_kept():
    with pytest.raises(SweepStopped) as info:
        compare_seeds(["fp32"], [0, 99], DiesAtSeed(n=256), steps=2, progress=False, jobs=2)
    e = info.value
    assert "a worker process died" in e.reason and "fp32 (seed 99)" in e.reason
    assert [s.seed for s in e.lost] == [99] or [s.seed for s in e.lost] == [0, 99]
    assert set(e.results) == {0, 99} and not e.results[99]
    time.sleep(0.5)
    assert not [p for p in _children(os.getpid()) if _alive(p) and "spawn" in _cmdline(p)]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds worker processes through /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_sweep_prints_the_finished_runs_and_leaves_no_process(sig, tmp_path):
    """``fpsim compare --jobs 2`` in a subprocess; after the first run finishes, the signal: the
    table of the finished runs on stdout, one line on stderr, no traceback, no worker left."""
    recipes = ["fp32", "fp16-pure", "bf16-pure", "bf16-master", "fp16-master", "fp16-static"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, "-m", "fpsim", "compare", "--recipes", *recipes, "--steps", "60",
                             "--jobs", "2", "--figure", "none"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=tmp_path)
    err = []
    workers: set = set()
    deadline = time.monotonic() + 240
    for line in proc.stderr:  # no terminal: one line per finished run
        err.append(line)
        workers |= set(_children(proc.pid))
        if "done in" in line or time.monotonic() > deadline:
            break
    workers |= set(_children(proc.pid))
    proc.send_signal(sig)
    out, rest = proc.communicate(timeout=120)
    err.append(rest)
    err = "".join(err)
    assert proc.returncode == 128 + sig, err
    assert "Traceback" not in err and "Traceback" not in out
    last = [ln for ln in err.splitlines() if ln.strip()][-1]
    assert last.startswith(f"fpsim compare: stopped by {signal.Signals(sig).name} after 1 of 6 runs") or \
        last.startswith(f"fpsim compare: stopped by {signal.Signals(sig).name} after 2 of 6 runs"), err
    assert "not finished:" in last and "recipe" in out and "fp32" in out
    time.sleep(1.0)
    assert workers and not [p for p in workers if _alive(p)]
