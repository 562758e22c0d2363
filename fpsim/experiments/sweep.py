"""Sweeps: several recipes (and seeds) trained on one task from the same initial weights.

:func:`compare` runs recipes at one seed, :func:`compare_seeds` at several; each run is
:func:`~fpsim.experiments.train`, so a run is the same number for number whether it runs alone,
in a sweep, or in a worker process.
"""

from __future__ import annotations

import sys

from .. import state
from ..checks import check_at_least, is_integer
from .loop import run_recipe
from .recipes import DEFAULT_RECIPES, Recipe, get_recipe
from .result import RunResult
from .tasks import ReferenceTask

__all__ = ["compare", "compare_seeds"]


def compare(recipes=DEFAULT_RECIPES, task: ReferenceTask | None = None, *, steps: int | None = None, seed: int = 0,
            lr: float | None = None, progress: bool = True, backend=None, measure_at="all") -> dict[str, RunResult]:
    """Run every recipe on the same task, seed and initial weights; results by recipe name.
    ``measure_at``: the steps at which flushed gradients and stalled updates are counted, or "all"
    (:func:`run_recipe`)."""
    return compare_seeds(recipes, [seed], task, steps=steps, lr=lr, progress=progress, backend=backend,
                         measure_at=measure_at)[seed]


def _check_recipes_and_seeds(recipes, seeds) -> tuple[list[Recipe], list]:
    recs = [get_recipe(r) for r in recipes]  # names or Recipe objects (your own recipes too)
    if not recs:
        raise ValueError("recipes: give at least one recipe")
    names = [r.name for r in recs]
    if len(set(names)) != len(names):
        raise ValueError(f"recipes: each name once, got {', '.join(names)}")
    seeds = list(seeds)
    if not seeds:
        raise ValueError("seeds: give at least one seed")
    if not all(is_integer(s) for s in seeds) or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct integers, got {seeds!r}")
    return recs, seeds


def _progress_bar(total: int):
    from tqdm.auto import tqdm

    # disable=None: a bar on a terminal; elsewhere (CI, pipes) one line per finished recipe
    return tqdm(total=total, desc="fpsim compare", unit="step", leave=False, disable=None)


def compare_seeds(recipes=DEFAULT_RECIPES, seeds=(0, 1, 2, 3), task: ReferenceTask | None = None, *,
                  steps: int | None = None, lr: float | None = None, progress: bool = True,
                  backend=None, measure_at="all", jobs: int = 1) -> dict[int, dict[str, RunResult]]:
    """:func:`compare` once per seed of the initial weights (the data stay the same): results
    by seed, then by recipe.  One seed's ratio to fp32 can mislead - fp8-delayed is 1.097x at
    seed 0 and 1.116x at seed 5 - so :func:`~fpsim.experiments.format_seed_table` shows every
    seed and the mean.

    ``jobs`` > 1 runs the (seed, recipe) runs in that many worker processes; every run starts
    from its own seed and computes its products on fpsim's fixed BLAS thread count
    (:func:`fpsim.state.blas_threads`), so the results are the ones the serial sweep gives, bit
    for bit (only ``seconds`` differs).  The workers are
    spawned, so the recipes and the task must pickle (a ``Recipe`` defined in a notebook cell
    may not: run those with ``jobs=1``)."""
    recs, seeds = _check_recipes_and_seeds(recipes, seeds)
    check_at_least(jobs, 1, "jobs")
    task = task or ReferenceTask()
    n_steps = task.steps if steps is None else steps
    bar = _progress_bar(n_steps * len(recs) * len(seeds)) if progress else None
    runs = [(seed, rec) for seed in seeds for rec in recs]
    results: dict[int, dict[str, RunResult]] = {seed: {} for seed in seeds}

    def label(seed, rec):
        return rec.name if len(seeds) == 1 else f"{rec.name}, seed {seed}"

    def done(seed, rec, r):
        results[seed][rec.name] = r
        if bar is not None and bar.disable:
            print(f"fpsim compare: {label(seed, rec)} done in {r.seconds:.1f}s", file=sys.stderr, flush=True)

    try:
        if jobs > 1 and len(runs) > 1:
            _run_parallel(runs, jobs, task, steps, lr, backend, measure_at, bar, done, n_steps)
        else:
            for seed, rec in runs:
                if bar is not None:
                    bar.set_postfix_str(label(seed, rec))
                done(seed, rec, run_recipe(rec, task, steps=steps, seed=int(seed), lr=lr,
                                           progress=bar.update if bar is not None else None,
                                           backend=backend, measure_at=measure_at))
    finally:
        if bar is not None:
            bar.close()
    return {seed: {rec.name: results[seed][rec.name] for rec in recs} for seed in seeds}


def _run_parallel(runs, jobs, task, steps, lr, backend, measure_at, bar, done, n_steps) -> None:
    """The runs in ``jobs`` spawned worker processes; the bar advances a run at a time."""
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor, as_completed

    be = getattr(backend, "name", backend)  # a backend by name: its object does not cross processes
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = str(max(1, cores // jobs))
    names = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
    # fpsim's own products run on the pinned count in every process (the bits depend on it); the
    # BLAS pools are sized so that the workers do not oversubscribe the cores between them
    env = {"FPSIM_BLAS_THREADS": str(state.blas_threads()), **dict.fromkeys(names, threads)}
    with state.environment(env):  # the workers inherit it when they start
        with ProcessPoolExecutor(max_workers=min(jobs, len(runs)),
                                 mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(run_recipe, rec, task, steps=steps, seed=int(seed), lr=lr, backend=be,
                                   measure_at=measure_at): (seed, rec) for seed, rec in runs}
            if bar is not None:
                bar.set_postfix_str(f"{len(runs)} runs in {min(jobs, len(runs))} processes")
            for fut in as_completed(futures):
                seed, rec = futures[fut]
                done(seed, rec, fut.result())
                if bar is not None:
                    bar.update(n_steps)
