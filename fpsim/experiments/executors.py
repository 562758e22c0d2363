"""Where a sweep's runs execute: one function, :func:`run_all`, over any ``concurrent.futures``
executor - this process, local worker processes, or a Dask cluster - and the same bits from each.

Every run is :func:`run_spec` on a :class:`RunSpec`: the task function sets fpsim's BLAS thread
count in whatever process runs it (``FPSIM_BLAS_THREADS`` of the process that started the sweep),
so a run gives the serial run's numbers on any executor.  A sweep stopped by SIGINT or SIGTERM,
or by a worker process that died, raises :class:`SweepStopped` with the runs that finished; no
worker process is left behind.
"""

from __future__ import annotations

import os
import signal
import threading
from concurrent.futures import FIRST_COMPLETED, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

from .. import state
from .loop import train

__all__ = ["RunSpec", "SweepStopped", "run_spec", "run_all", "usable_cores", "local_processes", "stop_workers"]


@dataclass(frozen=True)
class RunSpec:
    """One run of a sweep: a task, a recipe, the seed of the initial weights, and the settings
    :func:`~fpsim.experiments.train` takes, None its defaults (the task's steps, rate and
    ``measure_at``; the backend by name: its object does not cross processes)."""

    task: object
    recipe: object
    seed: int
    steps: int | None = None
    lr: float | None = None
    measure_at: object = None
    backend: str | None = None

    @property
    def label(self) -> str:
        return f"{self.recipe.name} (seed {self.seed})"


class SweepStopped(Exception):
    """A sweep that stopped before every run finished: ``reason`` (one line), ``done``
    (RunSpec -> RunResult, the runs that finished) and ``lost`` (the RunSpecs that did not)."""

    def __init__(self, reason: str, done: dict, lost: list, signum: int | None = None):
        super().__init__(reason)
        self.reason, self.done, self.lost, self.signum = reason, done, lost, signum
        self.results = None  # set by compare_seeds: {seed: {recipe: RunResult}} of the finished runs


def run_spec(spec: RunSpec, blas_threads: int | None = None, progress=None):
    """Train one :class:`RunSpec` - the task function every executor runs.  ``blas_threads``:
    the BLAS thread count fpsim's products run on in this process (the bits depend on it);
    ``progress``: called after every step (in this process only)."""
    if blas_threads is not None:
        state.set_blas_threads(blas_threads)
    return train(spec.task, spec.recipe, spec.seed, steps=spec.steps, lr=spec.lr, measure_at=spec.measure_at,
                 backend=spec.backend, progress=progress)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _ignore_sigint() -> None:
    """Worker processes leave Ctrl-C to the sweep, which stops them: no traceback from each."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class _Signalled(BaseException):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_signal(signum, frame):
    raise _Signalled(signum)


def local_processes(jobs: int, n_runs: int):
    """A spawned ProcessPoolExecutor of ``min(jobs, usable cores, n_runs)`` workers (each
    ignoring SIGINT), and the environment its workers must start in: fpsim's pinned BLAS count,
    and BLAS pools sized so that the workers do not oversubscribe the cores between them."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    workers = max(1, min(jobs, usable_cores(), n_runs))
    threads = str(max(1, usable_cores() // workers))
    env = {"FPSIM_BLAS_THREADS": str(state.blas_threads()),
           **dict.fromkeys(("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"), threads)}
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_ignore_sigint)
    return pool, env


def dask_cluster(address: str, connect_timeout: float = 2.0):
    """A ``concurrent.futures`` executor on the Dask scheduler at ``address`` (``tcp://HOST:PORT``)
    and the client to close afterwards (``pip install fpsim[cluster]``).

    A scheduler that is not there fails within ``connect_timeout`` seconds, in one line, before any
    client is made (a Dask client whose constructor fails is left to its ``__del__``, which waits
    and prints a traceback at exit): an address that is no ``tcp://HOST:PORT`` raises ValueError; a
    port that refuses, a host that does not answer, or a server that does not answer Dask's
    handshake (:func:`_check_scheduler`) raises OSError."""
    try:
        from dask.distributed import Client
        from distributed.comm import parse_address
        from distributed.comm.addressing import get_address_host_port
    except ImportError:
        raise ImportError("a Dask scheduler needs dask.distributed: pip install 'fpsim[cluster]'") from None
    try:
        if parse_address(address)[0] != "tcp":
            raise ValueError("fpsim's sweeps reach a scheduler over plain TCP")
        host, port = get_address_host_port(address)
    except (ValueError, TypeError) as e:
        raise ValueError(f"scheduler {address!r} is no Dask scheduler address ({e}); give tcp://HOST:PORT") from None
    _check_scheduler(address, host, port, connect_timeout)
    try:
        client = Client(address, set_as_default=False, timeout=max(connect_timeout, 10.0))
    except Exception as e:  # noqa: BLE001 - the handshake answered: whatever fails now, one line
        raise OSError(f"no Dask scheduler at {address!r}: {type(e).__name__}: {e}") from None
    return client.get_executor(), client


def _check_scheduler(address: str, host: str, port: int, timeout: float) -> None:
    """OSError unless ``host:port`` accepts a TCP connection and answers Dask's handshake, each
    within ``timeout`` seconds: a refused port fails at once, a silent one after ``timeout``, a
    server of another kind (whose reply Dask reads as a frame length) in one line too.  The
    handshake runs on an event loop of its own in a thread of its own (a notebook's loop is running)."""
    import asyncio
    import socket
    from concurrent.futures import ThreadPoolExecutor

    from distributed.comm import connect

    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as e:
        why = f"no answer in {timeout:g} s" if isinstance(e, TimeoutError) else e.strerror or e
        raise OSError(f"no Dask scheduler at {address!r}: {why}") from None

    async def hello():
        comm = await connect(address, timeout=timeout)
        await comm.close()

    with ThreadPoolExecutor(1) as one:
        try:
            one.submit(asyncio.run, asyncio.wait_for(hello(), timeout)).result()
        except asyncio.TimeoutError:
            raise OSError(f"no Dask scheduler at {address!r}: no Dask handshake in {timeout:g} s") from None
        except OSError as e:
            raise OSError(f"no Dask scheduler at {address!r}: {e}") from None
        except Exception as e:  # noqa: BLE001 - a server of another kind: its reply is not Dask's
            raise OSError(f"no Dask scheduler at {address!r}: the server there does not answer as one "
                          f"({type(e).__name__})") from None


def stop_workers(pool) -> None:
    """Cancel what has not started and end the worker processes (a ProcessPoolExecutor's)."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
            p.join()
    # Let the pool's manager thread finish closing its wake-up pipe now: at interpreter exit,
    # concurrent.futures (Python < 3.12) writes to that pipe unless it is closed already, and a
    # close racing that write printed an OSError traceback after a stopped sweep.
    manager = getattr(pool, "_executor_manager_thread", None)
    if manager is not None:
        manager.join(timeout=10)


def run_all(specs: list[RunSpec], executor=None, *, env=None, on_start=None, on_done=None, progress=None) -> dict:
    """Run every spec on ``executor`` (None: one after the other in this process) and return
    RunSpec -> RunResult.  ``env``: environment variables set while the runs are submitted
    (spawned workers inherit them).  ``on_start(spec)`` (in this process only) and
    ``on_done(spec, result)`` are called as each run starts and finishes; ``progress`` after every
    step of a run in this process.
    SIGINT / SIGTERM (in the main thread), or a worker process that dies, stop the sweep:
    :class:`SweepStopped`, after the workers are ended."""
    done: dict = {}
    old = None
    # unless the caller handles SIGTERM already (fpsim reproduce: its KeyboardInterrupt carries .signum)
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        old = signal.signal(signal.SIGTERM, _raise_signal)
    futures: dict = {}
    try:
        if executor is None:
            for spec in specs:
                if on_start is not None:
                    on_start(spec)
                done[spec] = run_spec(spec, progress=progress)
                if on_done is not None:
                    on_done(spec, done[spec])
            return done
        blas = state.blas_threads()
        with state.environment(env or {}):
            futures = {executor.submit(run_spec, spec, blas): spec for spec in specs}
        pending = set(futures)
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in finished:
                spec = futures[fut]
                done[spec] = fut.result()
                if on_done is not None:
                    on_done(spec, done[spec])
        return done
    except (KeyboardInterrupt, _Signalled) as e:
        signum = getattr(e, "signum", signal.SIGINT)
        name = signal.Signals(signum).name
        _shutdown(executor)
        raise SweepStopped(f"stopped by {name} after {len(done)} of {len(specs)} runs", done,
                           [s for s in specs if s not in done], signum) from None
    except BrokenProcessPool:
        _shutdown(executor)
        lost = [s for s in specs if s not in done]
        raise SweepStopped(f"a worker process died; {len(done)} of {len(specs)} runs finished, lost: "
                           f"{', '.join(s.label for s in lost)}", done, lost) from None
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)


def _shutdown(executor) -> None:
    if executor is None:
        return
    if hasattr(executor, "_processes"):
        stop_workers(executor)
    else:
        executor.shutdown(wait=False, cancel_futures=True)
