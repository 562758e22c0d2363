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


# -- where the runs go: said once, refused at once -----------------------------------------------

def test_jobs_do_not_apply_with_a_scheduler_or_an_executor():
    from concurrent.futures import ThreadPoolExecutor

    task = small_task(64)
    with pytest.raises(ValueError, match=r"jobs=2 does not apply with scheduler=: its workers run the runs"):
        compare_seeds(["fp32"], [0], task, steps=1, progress=False, jobs=2, scheduler="tcp://127.0.0.1:8786")
    with ThreadPoolExecutor(1) as pool:
        with pytest.raises(ValueError, match=r"jobs=3 does not apply with executor="):
            compare_seeds(["fp32"], [0], task, steps=1, progress=False, jobs=3, executor=pool)
        with pytest.raises(ValueError, match="give one of them"):
            compare_seeds(["fp32"], [0], task, steps=1, progress=False, scheduler="tcp://127.0.0.1:8786", executor=pool)


def _fpsim(*argv, code=None, timeout=60):
    """``fpsim ARGV`` in a fresh interpreter (``code`` run before it); (completed process, seconds)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "OPENBLAS_NUM_THREADS": "1"}
    script = f"{code or ''}\nimport sys\nfrom fpsim.tools.cli import main\nsys.exit(main({list(argv)!r}))"
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout, env=env)
    return out, time.monotonic() - t0


def _refused_port() -> int:
    import socket

    with socket.socket() as s:  # a port just free again: nothing listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("address, says", [
    ("nonsense", "error: scheduler 'nonsense' is no Dask scheduler address (missing port number"),
    ("inproc://x", "is no Dask scheduler address (fpsim's sweeps reach a scheduler over plain TCP)"),
    ("refused", "': Connection refused"),
])
def test_a_scheduler_that_is_not_there_fails_at_once_in_one_line(address, says):
    """No 31 s of silence (Dask's connect timeout), no 60 s hang at exit and no Client.__del__
    traceback (a client whose constructor failed): one line, exit 2, in about a second."""
    pytest.importorskip("dask.distributed")
    if address == "refused":
        address = f"tcp://127.0.0.1:{_refused_port()}"
    out, seconds = _fpsim("compare", "--recipes", "fp32", "--steps", "1", "--quiet", "--figure", "none",
                          "--scheduler", address)
    assert out.returncode == 2 and "Traceback" not in out.stderr and "__del__" not in out.stderr, out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("fpsim compare: error: ") and says in last, last
    assert out.stdout == "" and seconds < 15  # the interpreter's start and imports included


def test_a_port_that_answers_nothing_or_not_as_dask_fails_within_the_connect_timeout():
    pytest.importorskip("dask.distributed")
    import socket
    import threading

    from fpsim.experiments.executors import dask_cluster

    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(4)
        address = f"tcp://127.0.0.1:{srv.getsockname()[1]}"
        t0 = time.monotonic()
        with pytest.raises(OSError, match=rf"no Dask scheduler at '{address}': no Dask handshake in 0.5 s"):
            dask_cluster(address, connect_timeout=0.5)  # it accepts, and says nothing
        assert time.monotonic() - t0 < 5

    http = socket.socket()
    http.bind(("127.0.0.1", 0))
    http.listen(4)

    def serve():  # every connection gets an HTTP error, which Dask would read as a frame's length
        while True:
            conn, _ = http.accept()
            with conn:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n" * 8)

    threading.Thread(target=serve, daemon=True).start()
    with pytest.raises(OSError, match="the server there does not answer as one"):
        dask_cluster(f"tcp://127.0.0.1:{http.getsockname()[1]}", connect_timeout=2.0)


def test_without_dask_a_scheduler_is_one_line_naming_the_extra():
    block = "import sys\nfor m in ('dask', 'dask.distributed', 'distributed'):\n    sys.modules[m] = None"
    out, _ = _fpsim("compare", "--recipes", "fp32", "--steps", "1", "--quiet", "--figure", "none",
                    "--scheduler", "tcp://127.0.0.1:8786", code=block)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip().splitlines()[-1] == ("fpsim compare: error: --scheduler tcp://127.0.0.1:8786: a Dask "
                                                   "scheduler needs dask.distributed: pip install 'fpsim[cluster]'")


def test_fpsim_compare_says_jobs_does_not_apply_with_a_scheduler():
    out, _ = _fpsim("compare", "--recipes", "fp32", "--steps", "400", "--figure", "none", "--scheduler",
                    "tcp://127.0.0.1:8786", "--jobs", "2")
    assert out.returncode == 2 and out.stdout == "" and "Traceback" not in out.stderr
    assert out.stderr.strip() == ("fpsim compare: error: --jobs does not apply with --scheduler: the Dask cluster's "
                                  "workers run the runs (leave --jobs 2 out)")


def test_python_sweeps_progress_lines_name_the_function_not_the_command(capsys):
    """With no terminal a sweep prints one line per finished run: ``compare:`` / ``compare_seeds:``
    from Python (``fpsim compare:`` is the command's, which names itself)."""
    task = small_task(64)
    from fpsim.experiments import compare

    compare(["fp32"], task, steps=1)
    compare_seeds(["fp32"], [0, 1], task, steps=1)
    compare_seeds(["fp32"], [2], task, steps=1, progress="my sweep")
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if "done in" in ln]
    assert [ln.split(" done in")[0] for ln in lines] == ["compare: fp32", "compare_seeds: fp32, seed 0",
                                                          "compare_seeds: fp32, seed 1", "my sweep: fp32"]
    assert "fpsim compare" not in err


def test_the_commands_progress_lines_name_the_command(capsys):
    """``fpsim compare`` (here in this process, stderr no terminal) says ``fpsim compare:`` on each
    finished run's line, as the Python sweeps name their function."""
    from fpsim.tools import cli

    assert cli.main(["compare", "--recipes", "fp32", "bf16-pure", "--steps", "1", "--figure", "none"]) == 0
    err = capsys.readouterr().err
    assert [ln.split(" done in")[0] for ln in err.splitlines() if " done in " in ln] == [
        "fpsim compare: fp32", "fpsim compare: bf16-pure"]
    assert "compare_seeds" not in err
