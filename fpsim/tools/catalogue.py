"""Running the whole findings catalogue: in this process, or several findings at once in worker
processes (``fpsim reproduce --all / --table ... --jobs N``), and drawing a finding's figure.

A finding's result carries a ``draw`` closure, which does not cross processes: a worker draws the
figure itself and sends back the result without it.  Every worker runs on the BLAS thread count
fpsim pins in this process (``fpsim.state``), so a finding gives the bits a serial run gives.
Ctrl-C (or SIGTERM) stops the workers; the findings already finished have been printed.
"""

from __future__ import annotations

import dataclasses
import signal
import sys
import threading
from concurrent.futures import FIRST_COMPLETED, wait
from pathlib import Path

__all__ = ["CatalogueStopped", "draw", "run_every"]


class CatalogueStopped(Exception):
    """Ctrl-C or SIGTERM stopped the catalogue: ``results`` holds the findings that finished."""

    def __init__(self, reason: str, results: dict):
        super().__init__(reason)
        self.results = results


def draw(result, path: Path) -> None:
    """Draw ``result``'s figure into the PNG file ``path`` (its folder made if needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    try:
        result.draw(ax)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)


def _say(name: str, line: str) -> None:
    print(f"fpsim reproduce: [{name}] {line}", file=sys.stderr, flush=True)


def _one(name: str, quick: bool, seeds: tuple, folder, blas: int | None = None, quiet_progress: bool = False):
    """Run the finding ``name`` (in whichever process calls this), draw its figure into ``folder``
    (None: no figure) and return its result without the ``draw`` closure."""
    from functools import partial

    from .. import state
    from ..experiments.findings import get_finding

    if blas is not None:
        state.set_blas_threads(blas)
    result = get_finding(name).reproduce(quick, seeds, None if quiet_progress else partial(_say, name))
    if folder is not None and result.draw is not None:
        draw(result, Path(folder) / f"{name}.png")
    return dataclasses.replace(result, draw=None)


def run_every(quick: bool, seeds=None, jobs: int = 1, folder=None, progress=None, on_done=None) -> dict:
    """{name: FindingResult, or None where the finding cannot run here} for every finding, in the
    catalogue's order.  ``seeds``: None for each finding's own (see ``Finding.reproduce``); ``jobs``: findings run at once (worker processes when > 1); ``folder``: where
    each figure is drawn (None: none); ``progress(line)`` hears each start and finish;
    ``on_done(result)`` is called in this process as each finding finishes."""
    from ..experiments.findings import FINDINGS

    seeds = None if seeds is None else tuple(seeds)
    names = [n for n, f in FINDINGS.items() if f.available()]
    results: dict = {n: None for n in FINDINGS}
    main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGTERM, signal.default_int_handler) if main else None
    try:
        if jobs <= 1:
            for name in names:
                _tell(progress, f"{name}: starting")
                results[name] = _one(name, quick, seeds, folder)
                _finished(results[name], progress, on_done)
        else:
            _parallel(names, quick, seeds, jobs, folder, results, progress, on_done)
    except KeyboardInterrupt:
        got = sum(r is not None for r in results.values())
        raise CatalogueStopped(f"stopped after {got} of {len(names)} findings", results) from None
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)
    return results


def _tell(progress, line: str) -> None:
    if progress is not None:
        progress(line)


def _finished(result, progress, on_done) -> None:
    _tell(progress, f"{result.name}: {result.verdict} ({result.seconds:.0f} s)")
    if on_done is not None:
        on_done(result)


def _parallel(names, quick, seeds, jobs, folder, results, progress, on_done) -> None:
    from .. import state
    from ..experiments.executors import local_processes, stop_workers, usable_cores

    pool, env = local_processes(jobs, len(names))
    blas = state.blas_threads()
    try:
        with state.environment(env):
            futures = {pool.submit(_one, n, quick, seeds, folder, blas, progress is None): n for n in names}
        _tell(progress, f"{len(names)} findings on {min(jobs, usable_cores(), len(names))} worker processes")
        pending = set(futures)
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in finished:
                results[futures[fut]] = fut.result()
                _finished(results[futures[fut]], progress, on_done)
    except BaseException:
        stop_workers(pool)
        raise
    finally:
        pool.shutdown(wait=True)
