"""Running the whole findings catalogue (``fpsim reproduce --all / --table ... --jobs N``) and
drawing a finding's figure.

One after the other in this process, or on a pool: the training runs of every finding (the
:class:`~fpsim.experiments.executors.RunSpec`\\ s of their sweeps, each run once even where two
findings share it) and the measurements of the sampling findings go to worker processes (or a
Dask cluster) together, so ``--jobs`` spreads the runs of all findings, not just the findings.  A
finding is finished in this process as soon as its last run is back: its ``extract`` and verdict,
then its figure, drawn here from its record and the plain data of its result.  Every worker runs
on the BLAS thread count fpsim pins in this process (``fpsim.state``), so a finding gives the bits
a serial run gives.  Ctrl-C (or SIGTERM) stops the workers; the findings already finished have
been printed (:class:`CatalogueStopped` holds them and the signal).  :func:`stop_on_signals` and
:func:`pool` are the same stop and the same workers for one finding's runs (``fpsim reproduce NAME
--jobs N``).
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, wait
from contextlib import contextmanager
from functools import partial
from pathlib import Path

__all__ = ["CatalogueStopped", "Signalled", "check_stop", "describe_pool", "pool", "save_figure", "run_every",
           "stop_on_signals", "stoppable", "stopped_by"]


class Signalled(KeyboardInterrupt):
    """SIGINT or SIGTERM, raised in the main thread as Ctrl-C's KeyboardInterrupt is (so every
    ``except KeyboardInterrupt`` that cleans up after Ctrl-C cleans up after SIGTERM too), with the
    signal's number: the exit status is 128 + ``signum`` (130, 143)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


_RECEIVED: list = []  # the signals stop_on_signals' handler has heard, while its block runs
_AGAIN: list = []  # the timer that delivers a deferred signal again (one at a time)


def _in_a_finaliser_or_the_jit(frame) -> bool:
    """Whether Python is inside a ``__del__`` or inside numba / llvmlite (compiling, or in one of
    llvmlite's ctypes callbacks): an exception raised there is dropped, or corrupts LLVM's state
    (a double free, then SIGSEGV, was seen when Ctrl-C met numba compiling a kernel)."""
    while frame is not None:
        parts = frame.f_code.co_filename.replace("\\", "/").split("/")
        if frame.f_code.co_name == "__del__" or "numba" in parts or "llvmlite" in parts:
            return True
        frame = frame.f_back
    return False


def _raise_signalled(signum, frame):
    _RECEIVED.append(signum)
    if _in_a_finaliser_or_the_jit(frame):  # not here: the same signal again in 50 ms
        import os

        if not any(t.is_alive() for t in _AGAIN):
            timer = threading.Timer(0.05, lambda: _RECEIVED and os.kill(os.getpid(), signum))
            timer.daemon = True
            _AGAIN[:] = [timer]
            timer.start()
        return
    raise Signalled(signum)


def stopped_by(e: BaseException) -> int:
    """The signal a KeyboardInterrupt (or a :class:`Signalled`) stands for: SIGINT unless it says."""
    return int(getattr(e, "signum", None) or signal.SIGINT)


def check_stop() -> None:
    """Raise :class:`Signalled` again if a signal was heard inside :func:`stop_on_signals` and the
    work goes on (its exception was dropped by a finaliser, or deferred): each progress line checks."""
    if _RECEIVED:
        raise Signalled(_RECEIVED[0])


@contextmanager
def stop_on_signals():
    """SIGINT and SIGTERM raise :class:`Signalled` inside the block, in the main thread (elsewhere
    nothing changes), so a command stopped by either reports what finished instead of dying
    silently (SIGTERM's default) or with a traceback.  A signal that comes inside a finaliser or
    inside numba / llvmlite is raised once Python is out of them (it is delivered again every 50 ms,
    and each progress line checks: :func:`check_stop`).  The handlers before are restored after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, _raise_signalled) for s in (signal.SIGINT, signal.SIGTERM)}
    _RECEIVED.clear()
    try:
        yield
    finally:
        _RECEIVED.clear()  # first: a timer that fires now sends nothing
        for timer in _AGAIN:
            timer.cancel()
        for s, handler in old.items():
            signal.signal(s, handler)


def stoppable(command: str, func, args, stage=None) -> int:
    """``func(args)`` (``fpsim COMMAND``) inside :func:`stop_on_signals`: SIGINT or SIGTERM that the
    command does not report itself (audit, bench, bits, gpu-check, labs; compare outside its runs)
    ends it with one line and exit 128 + the signal - not a traceback, nor SIGTERM's silent death.
    ``stage``: a one-item list the command keeps saying what a stop now would leave, added to the line."""
    with stop_on_signals():
        try:
            return func(args)
        except KeyboardInterrupt as e:
            signum = stopped_by(e)
            said = f" {stage[0]}" if stage else ""
            print(f"fpsim {command}: stopped by {signal.Signals(signum).name}{said}", file=sys.stderr, flush=True)
            return 128 + signum


class CatalogueStopped(Exception):
    """SIGINT or SIGTERM (``signum``), or a worker process that died (``signum`` None), stopped the
    catalogue: ``results`` holds the findings that finished (None for the others)."""

    def __init__(self, reason: str, results: dict, signum: int | None = None):
        super().__init__(reason)
        self.results, self.signum = results, signum


def save_figure(finding, result, path: Path) -> bool:
    """Draw ``result``'s figure (``finding``'s record says which) into the PNG file ``path`` (its
    folder made if needed); False, and no file, for a finding without a figure."""
    if finding.figure is None:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..experiments.findings import figures

    fig, ax = plt.subplots(figsize=(8, 4.5))
    try:
        figures.draw_finding(finding, result, ax)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
    return True


def draw(result, path: Path) -> bool:
    """Deprecated (removed 2027-06-01): :func:`save_figure`, which takes the finding's record too."""
    import warnings

    from ..experiments.findings import get_finding

    warnings.warn("fpsim.tools.catalogue.draw(result, path) is deprecated (removed 2027-06-01): use "
                  "save_figure(finding, result, path)", DeprecationWarning, stacklevel=2)
    return save_figure(get_finding(result.name), result, Path(path))


def _say(name: str, line: str) -> None:
    check_stop()
    print(f"fpsim reproduce: [{name}] {line}", file=sys.stderr, flush=True)


def _tell(progress, line: str) -> None:
    check_stop()
    if progress is not None:
        progress(line)


def _finished(finding, result, folder, results, progress, on_done) -> None:
    results[finding.name] = result
    if folder is not None:
        save_figure(finding, result, Path(folder) / f"{finding.name}.png")
    _tell(progress, f"{result.name}: {result.verdict} ({result.seconds:.0f} s)")
    if on_done is not None:
        on_done(result)


def run_every(quick: bool, seeds=None, jobs: int = 1, folder=None, progress=None, on_done=None,
              scheduler: str | None = None) -> dict:
    """{name: FindingResult, or None where the finding cannot run here} for every finding, in the
    catalogue's order.  ``seeds``: None for each finding's own (``Finding.seeds_for``); ``jobs``:
    worker processes (the runs of all findings share them) when > 1; ``scheduler``: the address of
    a Dask scheduler to run them on instead; ``folder``: where each figure is drawn (None: none);
    ``progress(line)`` hears each start and finish; ``on_done(result)`` is called in this process as
    each finding finishes."""
    from ..experiments.executors import SweepStopped
    from ..experiments.findings import catalogue

    seeds = None if seeds is None else tuple(seeds)
    every = catalogue()
    runnable = [f for f in every if f.available()]
    results: dict = {f.name: None for f in every}
    try:
        with stop_on_signals():
            if jobs <= 1 and scheduler is None:
                _serial(runnable, quick, seeds, folder, results, progress, on_done)
            else:
                _parallel(runnable, quick, seeds, jobs, scheduler, folder, results, progress, on_done)
    except (KeyboardInterrupt, SweepStopped) as e:  # a finding's own sweep says SweepStopped
        got = f"after {sum(r is not None for r in results.values())} of {len(runnable)} findings"
        if isinstance(e, SweepStopped) and e.signum is None:  # a worker process died
            raise CatalogueStopped(f"{e.reason}; stopped {got}", results) from None
        signum = e.signum if isinstance(e, SweepStopped) else stopped_by(e)
        raise CatalogueStopped(f"stopped by {signal.Signals(signum).name} {got}", results, signum) from None
    return results


def _serial(findings, quick, seeds, folder, results, progress, on_done) -> None:
    from ..experiments.findings.runner import reproduce

    for f in findings:
        _tell(progress, f"{f.name}: starting")
        result = reproduce(f, quick, seeds, partial(_say, f.name) if progress is not None else None)
        _finished(f, result, folder, results, progress, on_done)


def _measure_job(name: str, quick: bool, seeds: tuple, blas: int | None):
    """A sampling finding's measurement, in whichever process runs it: (its answer, seconds)."""
    from .. import state
    from ..experiments.findings import get_finding
    from ..experiments.findings.runner import measure

    if blas is not None:
        state.set_blas_threads(blas)
    return measure(get_finding(name), quick, seeds)


class _Work:
    """What each finding waits for: its measurement and its runs, and what has come back."""

    def __init__(self, findings, quick, seeds):
        from ..experiments.findings.runner import plan

        self.seeds = {f.name: f.seeds_for(quick, seeds) for f in findings}
        self.plans = {f.name: plan(f, quick, self.seeds[f.name]) for f in findings}
        self.specs = list(dict.fromkeys(spec for p in self.plans.values() for _, _, spec in p))
        self.measures = [f.name for f in findings if f.measure is not None]
        self.runs, self.measured = {}, {}

    def ready(self, f) -> bool:
        return (f.measure is None or f.name in self.measured) and all(s in self.runs for _, _, s in self.plans[f.name])

    def result(self, f, quick):
        from ..experiments.findings.runner import collect, conclude

        outs, seconds = [], 0.0
        if f.measure is not None:
            out, seconds = self.measured[f.name]
            outs.append(out)
        if not f.sweeps:
            return conclude(f, quick, self.seeds[f.name], outs, seconds)
        plan = self.plans[f.name]
        results = collect(f, quick, self.seeds[f.name], plan, self.runs)
        seconds += sum(r.seconds for r in {id(self.runs[s]): self.runs[s] for _, _, s in plan}.values())
        t0 = time.perf_counter()
        outs.append(f.extract(results))
        return conclude(f, quick, self.seeds[f.name], outs, seconds + time.perf_counter() - t0, results)


def _pool(jobs: int, scheduler, n: int):
    """(executor, environment for its workers, what to close afterwards)."""
    from ..experiments.executors import dask_cluster, local_processes

    if scheduler is not None:
        executor, client = dask_cluster(scheduler)
        return executor, {}, client
    executor, env = local_processes(jobs, n)
    return executor, env, None


@contextmanager
def pool(jobs: int, scheduler: str | None, n: int):
    """``(executor, env)`` for ``n`` tasks: ``jobs`` local worker processes (at most the usable cores
    and ``n``), or the Dask cluster at ``scheduler``; ``env`` the environment to submit under (the
    workers' BLAS settings).  A block that raises (Ctrl-C, SIGTERM) ends the local workers at once;
    the pool is closed after the block either way."""
    from ..experiments.executors import stop_workers

    executor, env, client = _pool(jobs, scheduler, n)
    try:
        yield executor, env
    except BaseException:
        if client is None:
            stop_workers(executor)
        raise
    finally:
        if client is not None:
            client.close()
        else:
            executor.shutdown(wait=True)


def describe_pool(executor, scheduler: str | None, jobs: int) -> str:
    """Where a pool runs, in words: "the Dask cluster at ADDRESS" or "N worker processes"."""
    return f"the Dask cluster at {scheduler}" if scheduler else f"{getattr(executor, '_max_workers', jobs)} worker processes"


def _parallel(findings, quick, seeds, jobs, scheduler, folder, results, progress, on_done) -> None:
    from .. import state
    from ..experiments.executors import run_spec

    work = _Work(findings, quick, seeds)
    blas = state.blas_threads()
    left = list(findings)
    with pool(jobs, scheduler, len(work.specs) + len(work.measures)) as (executor, env):
        with state.environment(env):
            futures = {executor.submit(_measure_job, name, quick, work.seeds[name], blas): ("measure", name)
                       for name in work.measures}
            futures.update({executor.submit(run_spec, spec, blas): ("run", spec) for spec in work.specs})
        _tell(progress, f"{len(findings)} findings ({len(work.specs)} runs, {len(work.measures)} measurements) on "
                        f"{describe_pool(executor, scheduler, jobs)}")
        pending = set(futures)
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in finished:
                kind, key = futures[fut]
                (work.measured if kind == "measure" else work.runs)[key] = fut.result()
            for f in [f for f in left if work.ready(f)]:
                left.remove(f)
                _finished(f, work.result(f, quick), folder, results, progress, on_done)
