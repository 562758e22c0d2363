"""Sweeps: several recipes (and seeds) trained on one task from the same initial weights.

:func:`compare` runs recipes at one seed, :func:`compare_seeds` at several: a list of
:class:`~fpsim.experiments.executors.RunSpec` (task, recipe, seed, settings) run by
:func:`~fpsim.experiments.executors.run_all` on an executor - this process, local worker
processes or a Dask cluster.  Each run is :func:`~fpsim.experiments.train`, so a run is the same
number for number wherever it runs.
"""

from __future__ import annotations

import sys

from ..checks import check_at_least, is_integer
from .executors import RunSpec, SweepStopped, dask_cluster, local_processes, run_all
from .recipes import DEFAULT_RECIPES, Recipe, get_recipe
from .result import RunResult
from .tasks import ReferenceTask

__all__ = ["compare", "compare_seeds"]


def compare(recipes=DEFAULT_RECIPES, task: ReferenceTask | None = None, *, steps: int | None = None, seed: int = 0,
            lr: float | None = None, progress: bool | str = True, backend=None,
            measure_at=None) -> dict[str, RunResult]:
    """Run every recipe on the same task, seed and initial weights; results by recipe name.
    ``measure_at``: the steps at which flushed gradients and stalled updates are counted, or "all";
    the task's own unless given (``task.measure_at``, as :func:`~fpsim.experiments.train`).
    ``progress``: as in :func:`compare_seeds` (its lines say ``compare:``)."""
    return compare_seeds(recipes, [seed], task, steps=steps, lr=lr, progress="compare" if progress is True else progress,
                         backend=backend, measure_at=measure_at)[seed]


def _check_recipes_and_seeds(recipes, seeds) -> tuple[list[Recipe], list]:
    """The recipes (names or Recipe objects, your own recipes too; one alone as itself, not a name's
    letters) and the seeds (one integer alone as itself), each checked."""
    if isinstance(recipes, (str, Recipe)):
        recipes = [recipes]
    if is_integer(seeds):
        seeds = [seeds]
    elif isinstance(seeds, str) or not hasattr(seeds, "__iter__"):
        raise ValueError(f"seeds must be distinct integers, got {seeds!r}")
    recs = [get_recipe(r) for r in recipes]
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


def _progress_bar(total: int, name: str):
    from tqdm.auto import tqdm

    # disable=None: a bar on a terminal; elsewhere (CI, pipes) one line per finished recipe
    return tqdm(total=total, desc=name, unit="step", leave=False, disable=None)


def _check_where(jobs, scheduler, executor) -> None:
    """``jobs`` counts local processes: with a cluster or an executor of the caller's it does not
    apply, and saying so beats ignoring it."""
    check_at_least(jobs, 1, "jobs")
    if scheduler is not None and executor is not None:
        raise ValueError("scheduler= and executor=: give one of them (both say where the runs go)")
    if jobs != 1 and (scheduler is not None or executor is not None):
        raise ValueError(f"jobs={jobs} does not apply with {'scheduler' if scheduler is not None else 'executor'}=: "
                         "its workers run the runs (leave jobs at 1)")


def compare_seeds(recipes=DEFAULT_RECIPES, seeds=(0, 1, 2, 3), task: ReferenceTask | None = None, *,
                  steps: int | None = None, lr: float | None = None, progress: bool | str = True,
                  backend=None, measure_at=None, jobs: int = 1, scheduler: str | None = None,
                  executor=None) -> dict[int, dict[str, RunResult]]:
    """:func:`compare` once per seed of the initial weights (the data stay the same): results
    by seed, then by recipe.  One seed's ratio to fp32 can mislead - fp8-delayed is 1.097x at
    seed 0 and 1.116x at seed 5 - so :func:`~fpsim.experiments.format_seed_table` shows every
    seed and the mean.  ``measure_at``: as in :func:`compare` (the task's own unless given).
    ``progress``: a bar on a terminal, elsewhere one line on stderr per finished run (``compare_seeds:
    fp32, seed 1 done in 2.0s``); a string names the bar and the lines instead; False: neither.

    Where the runs execute (:mod:`~fpsim.experiments.executors`): one after the other in this
    process (``jobs=1``, the default); in ``jobs`` spawned worker processes (at most the usable
    cores); on the Dask cluster whose scheduler is at ``scheduler`` (``"tcp://host:8786"``;
    ``pip install fpsim[cluster]``; one that is not there fails in a second or two); or on any
    ``concurrent.futures`` ``executor`` you pass (``jobs`` applies to local processes only).
    Every run starts from its own seed and computes its products on fpsim's fixed BLAS thread
    count (:func:`fpsim.state.blas_threads`, set in each worker), so the results are the ones
    the serial sweep gives, bit for bit (only ``seconds`` differs).  Runs in other processes
    must pickle (a ``Recipe`` defined in a notebook cell may not: run those with ``jobs=1``).
    SIGINT / SIGTERM or a worker that dies raise
    :class:`~fpsim.experiments.executors.SweepStopped`, whose ``results`` hold the finished
    runs by seed; no worker process is left."""
    recs, seeds = _check_recipes_and_seeds(recipes, seeds)
    _check_where(jobs, scheduler, executor)
    name = progress if isinstance(progress, str) else "compare_seeds"
    task = task or ReferenceTask()
    n_steps = task.steps if steps is None else steps
    be = getattr(backend, "name", backend)
    specs = [RunSpec(task, rec, int(seed), steps, lr, measure_at, be if jobs > 1 or scheduler or executor else backend)
             for seed in seeds for rec in recs]
    executor, own, env, client = _executor(executor, jobs, scheduler, len(specs))  # before the bar: it may fail
    bar = _progress_bar(n_steps * len(specs), name) if progress else None
    start, done = _reporters(bar, name, len(seeds) > 1, n_steps if executor is not None else 0)
    try:
        if executor is not None and bar is not None:
            bar.set_postfix_str(f"{len(specs)} runs on {_where(own, scheduler)}")
        ran = run_all(specs, executor, env=env, on_start=start, on_done=done,
                      progress=bar.update if bar is not None else None)
    except SweepStopped as e:
        e.results = _by_seed(e.done, seeds, recs)
        raise
    finally:
        if bar is not None:
            bar.close()
        if own is not None:
            own.shutdown()
        if client is not None:
            client.close()
    return _by_seed(ran, seeds, recs)


def _reporters(bar, name: str, seeded: bool, steps_at_done: int):
    """``on_start`` / ``on_done`` of a sweep: the bar's label, then at each finished run its
    steps (``steps_at_done``: runs elsewhere report no step of theirs) and, with no bar on a
    terminal, one line ``NAME: recipe[, seed S] done in 1.2s``."""

    def label(spec):
        return f"{spec.recipe.name}, seed {spec.seed}" if seeded else spec.recipe.name

    def start(spec):
        if bar is not None:
            bar.set_postfix_str(label(spec))

    def done(spec, r):
        if bar is not None and steps_at_done:
            bar.update(steps_at_done)
        if bar is not None and bar.disable:
            print(f"{name}: {label(spec)} done in {r.seconds:.1f}s", file=sys.stderr, flush=True)

    return start, done


def _executor(executor, jobs: int, scheduler, n_runs: int):
    """(executor, the process pool made here, the environment its workers start in, the Dask
    client): the caller's executor, a Dask cluster's, local processes, or None (this process)."""
    if scheduler is not None:
        executor, client = dask_cluster(scheduler)
        return executor, None, None, client
    if executor is None and jobs > 1 and n_runs > 1:
        own, env = local_processes(jobs, n_runs)
        return own, own, env, None
    return executor, None, None, None


def _where(own, scheduler) -> str:
    if scheduler is not None:
        return f"the Dask cluster at {scheduler}"
    return f"{own._max_workers} processes" if own is not None else "the executor"


def _by_seed(done: dict, seeds, recs) -> dict[int, dict[str, RunResult]]:
    """RunSpec -> RunResult as {seed: {recipe: RunResult}}, in the order asked for."""
    by = {(s.seed, s.recipe.name): r for s, r in done.items()}
    return {seed: {rec.name: by[seed, rec.name] for rec in recs if (seed, rec.name) in by} for seed in seeds}
