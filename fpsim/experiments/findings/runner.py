"""Running a finding: its sweeps become :class:`~fpsim.experiments.executors.RunSpec`\\ s, run by
:func:`~fpsim.experiments.executors.run_all` (the executors ``compare_seeds`` uses: this process,
local worker processes, a Dask cluster) through the one trainer, :func:`fpsim.experiments.train`;
the results, ``{recipe: [RunResult per seed]}`` per sweep, go to the finding's ``extract``, then
its ``verdict`` and ``measured``, into a plain-data :class:`FindingResult`.  A measuring finding's
``measure`` runs where it is called.

:func:`plan` and :func:`conclude` are the two halves ``tools/catalogue.py`` uses to put the runs of
every finding on one pool at once; :func:`reproduce` is both halves for one finding.
"""

from __future__ import annotations

import time

from ..executors import RunSpec, run_all
from ..recipes import get_recipe
from .figures import STANDARD
from .result import FindingResult, say

__all__ = ["SweepResults", "plan", "collect", "conclude", "measure", "reproduce"]


def _checked(finding, quick: bool, seeds) -> tuple:
    seeds = finding.seeds_for(quick, seeds)
    if not finding.available():
        raise RuntimeError(f"{finding.name} needs {finding.needs}, which this installation does not have")
    return seeds


def plan(finding, quick: bool, seeds: tuple) -> list[tuple[str, str, RunSpec]]:
    """(sweep name, recipe name, RunSpec) of every run of ``finding``'s sweeps in this mode, seed by
    seed in ``seeds`` (the seeds :meth:`Finding.seeds_for` gives)."""
    out = []
    for sw in finding.sweeps:
        if not sw.runs_in(quick):
            continue
        task = sw.task_for(quick)
        for rec in (get_recipe(r) for r in sw.recipes_for(quick)):
            out += [(sw.name, rec.name, RunSpec(task, rec, seed, sw.steps_for(quick), sw.lr, sw.measure_at))
                    for seed in seeds]
    return out


class SweepResults(dict):
    """What ``extract`` reads: ``{recipe: [RunResult per seed]}`` for a finding with one sweep,
    ``{sweep name: {recipe: [...]}}`` for several (sweeps this mode leaves out are absent); and how
    they were run: ``quick``, ``seeds``, ``tasks`` (sweep name -> the task object)."""

    def __init__(self, runs: dict, quick: bool, seeds: tuple, tasks: dict):
        super().__init__(runs)
        self.quick, self.seeds, self.tasks = quick, seeds, tasks


def collect(finding, quick: bool, seeds: tuple, planned: list, done: dict) -> SweepResults:
    """The :class:`SweepResults` of the planned runs, from ``done`` (RunSpec -> RunResult)."""
    by: dict = {}
    tasks: dict = {}
    for sweep, recipe, spec in planned:
        by.setdefault(sweep, {}).setdefault(recipe, []).append(done[spec])
        tasks[sweep] = spec.task
    runs = by if isinstance(finding.sweep, tuple) else next(iter(by.values()), {})
    return SweepResults(runs, quick, seeds, tasks)


def _split(out) -> tuple[dict, dict]:
    """``extract``'s / ``measure``'s answer as (numbers, series)."""
    if isinstance(out, tuple):
        numbers, series = out
        return dict(numbers), dict(series)
    return dict(out), {}


def conclude(finding, quick: bool, seeds: tuple, outs: list, seconds: float, results: dict | None = None) -> FindingResult:
    """The finding's result from ``outs`` (what ``measure`` and ``extract`` returned, in that order):
    the verdict of the numbers, the one-line measurement, the series (with the standard figure's,
    from ``results``)."""
    numbers, series = {}, {}
    for out in outs:
        n, s = _split(out)
        numbers.update(n)
        series.update(s)
    numbers = {k: float(v) for k, v in numbers.items()}
    if isinstance(finding.figure, str) and results is not None:
        series = {**STANDARD[finding.figure].series(results, **finding.figure_options), **series}
    verdict, reason = finding.verdict(numbers)
    return FindingResult(finding.name, numbers, finding.measured(numbers, series), verdict, reason, bool(quick),
                         tuple(seeds), seconds, series=series)


def measure(finding, quick: bool, seeds: tuple, progress=None):
    """(what ``measure`` returned, seconds) for a measuring finding, in this process."""
    t0 = time.perf_counter()
    out = finding.measure(bool(quick), tuple(seeds), progress)
    return out, time.perf_counter() - t0


class _StepTeller:
    """Progress of a finding's runs: one line as each run starts here, and every 50 steps; one as
    each run on a pool comes back (``k of n``)."""

    def __init__(self, progress, n: int):
        self.progress, self.label, self.steps, self.done = progress, "", 0, 0
        self.n, self.back = n, 0

    def start(self, spec: RunSpec) -> None:
        self.steps = spec.task.steps if spec.steps is None else spec.steps
        self.label, self.done = f"{spec.recipe.name}, seed {spec.seed}", 0
        say(self.progress, f"{self.label}: {self.steps} steps")

    def step(self) -> None:
        self.done += 1
        if self.done % 50 == 0 and self.done < self.steps:
            say(self.progress, f"{self.label}: step {self.done}/{self.steps}")

    def finish(self, spec: RunSpec, result) -> None:
        self.back += 1
        say(self.progress, f"{spec.recipe.name}, seed {spec.seed}: done ({self.back} of {self.n} runs)")


def reproduce(finding, quick: bool = True, seeds=None, progress=None, executor=None, env=None) -> FindingResult:
    """Run ``finding`` (its sweep's runs on ``executor``, None: one after the other here; ``env``
    the environment its workers start in, as :func:`~fpsim.experiments.executors.run_all` takes
    it) and return its :class:`FindingResult`; ``seeds`` as :meth:`Finding.seeds_for` takes them.
    A measurement runs here.  A stop during the runs raises
    :class:`~fpsim.experiments.executors.SweepStopped` with the runs that finished."""
    seeds = _checked(finding, quick, seeds)
    t0 = time.perf_counter()
    outs = [measure(finding, quick, seeds, progress)[0]] if finding.measure is not None else []
    if not finding.sweeps:
        return conclude(finding, quick, seeds, outs, time.perf_counter() - t0)
    planned = plan(finding, quick, seeds)
    specs = list(dict.fromkeys(spec for _, _, spec in planned))  # a run two sweeps share runs once
    teller = _StepTeller(progress, len(specs)) if progress is not None else None
    hooks = {} if teller is None else {"on_start": teller.start, "progress": teller.step,
                                       "on_done": teller.finish if executor is not None else None}
    done = run_all(specs, executor, env=env, **hooks)
    results = collect(finding, quick, seeds, planned, done)
    outs.append(finding.extract(results))
    return conclude(finding, quick, seeds, outs, time.perf_counter() - t0, results)
