"""What a finding is, and what running one gives.

A :class:`Finding` is a record: a published claim about numbers in low precision, its source and
the number the source reports, and how fpsim measures it in miniature - EITHER a :class:`Sweep`
(or several: plain data naming the task, the recipes, the steps of a quick and of a full run),
whose runs go through the pipeline (:func:`fpsim.experiments.train` on the executors of
:mod:`fpsim.experiments.executors`) and whose results ``extract`` turns into numbers, OR a
``measure(quick, seeds, progress)`` function for the sampling findings that train nothing.
``verdict(numbers)`` decides, from the numbers alone, whether the miniature ``reproduced`` the
claim, did so ``partly``, or shows it ``not at this scale`` - each with a one-sentence reason, so it
is tested on fixed inputs; ``measured(numbers, series)`` says fpsim's number in one line; the
figure is data too: the name of a standard figure (``figures.py``) or a module-level
``draw(ax, series)``.  A :class:`FindingResult` holds plain data only (JSON-ready), so it crosses
processes and the parent draws its figure.

Every finding module registers its record in :data:`FINDINGS` (``FINDINGS.register(Finding(...))``);
``findings/__init__.py`` imports every module of the package, so a new finding is one new file.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass, field

from ...registry import Registry
from .result import VERDICTS, FindingResult, pct, plain, say

__all__ = ["FINDINGS", "Finding", "FindingResult", "Sweep", "VERDICTS", "pct", "plain", "say"]

SEED_USES = ("all", "first", "first-when-quick")


def _check_finding(f) -> None:
    if not isinstance(f, Finding):
        raise TypeError(f"FINDINGS.register: a finding is a Finding record, got {type(f).__name__}")


FINDINGS = Registry("finding", check=_check_finding, entry_points="fpsim.findings")


@dataclass(frozen=True)
class Sweep:
    """The training runs of a finding, as plain data: ``task`` (a task class, or a name in
    ``fpsim.experiments.TASKS`` where that registry exists) built with ``settings`` (its fields;
    ``quick_settings`` override them in a quick run), each of ``recipes`` (names or Recipe objects;
    ``quick_recipes``, when given, in a quick run instead) trained from each seed of the finding for
    ``quick_steps`` / ``full_steps`` steps (None: the task's own).  ``modes``: the runs this sweep
    belongs to (``"quick"``, ``"full"`` or both); ``lr`` the learning rate (None: the task's);
    ``measure_at`` the steps whose gradients are counted (``train``'s argument); ``name`` keys the
    sweep's results when a finding has several."""

    task: object
    recipes: tuple
    quick_steps: int | None = None
    full_steps: int | None = None
    settings: dict = field(default_factory=dict)
    quick_settings: dict = field(default_factory=dict)
    quick_recipes: tuple | None = None
    modes: tuple = ("quick", "full")
    lr: float | None = None
    measure_at: object = ()
    name: str = "runs"

    def __post_init__(self):
        bad = [m for m in self.modes if m not in ("quick", "full")]
        if bad or not self.modes:
            raise ValueError(f"Sweep: modes must name 'quick' and/or 'full', got {self.modes!r}")
        if not self.recipes:
            raise ValueError("Sweep: recipes: give at least one recipe")

    def runs_in(self, quick: bool) -> bool:
        return ("quick" if quick else "full") in self.modes

    def recipes_for(self, quick: bool) -> tuple:
        return tuple(self.quick_recipes if quick and self.quick_recipes is not None else self.recipes)

    def steps_for(self, quick: bool) -> int | None:
        return self.quick_steps if quick else self.full_steps

    def task_for(self, quick: bool):
        """The task object of a quick or a full run."""
        cls = self.task
        if isinstance(cls, str):
            from .. import TASKS  # the pipeline's task registry (a name is looked up there)

            cls = TASKS.get(cls)
        return cls(**{**self.settings, **(self.quick_settings if quick else {})})


@dataclass(frozen=True)
class Finding:
    """One entry of the catalogue (module docstring).

    ``claim`` one sentence; ``source`` the arXiv id or issue; ``source_number`` what the source
    reports, in words and numbers; ``runtime`` the seconds of a (quick, full) run measured on a
    shared 2-core VM while others' jobs kept its load average near 8 (a quiet machine takes about
    a third to a half of that); ``order``: the catalogue's order (tables and lists sort by it).
    How it measures: ``sweep`` (a :class:`Sweep` or a tuple of them) with ``extract(results) ->
    numbers`` or ``(numbers, series)`` - ``results`` ``{recipe: [RunResult per seed]}`` for one
    sweep, ``{sweep name: {recipe: [...]}}`` for several, with ``results.quick``, ``.seeds`` and
    ``.tasks`` saying how they ran (``runner.SweepResults``) - or ``measure(quick, seeds, progress)``
    returning the same, or both (a measurement beside the runs: its numbers and series join
    extract's).  ``verdict(numbers) -> (verdict, reason)``; ``measured(numbers, series) ->
    str``; ``figure``: a standard figure's name (``figures.STANDARD``) with ``figure_options``, or a
    function ``draw(ax, series)``.  ``needs`` names a module the finding cannot run without ("" when
    it runs anywhere); ``seeds``: the seeds a full run uses when none are given - several where the
    claim is about training dynamics; ``seed_use``: ``"all"`` (every seed, seed means), ``"first"``
    (the sampling findings draw with the first seed) or ``"first-when-quick"``.
    """

    name: str
    claim: str
    source: str
    source_number: str
    runtime: tuple[float, float]
    order: int
    verdict: Callable
    measured: Callable
    sweep: Sweep | tuple | None = None
    extract: Callable | None = None
    measure: Callable | None = None
    figure: str | Callable | None = None
    figure_options: dict = field(default_factory=dict)
    needs: str = ""
    seeds: tuple = (0,)
    seed_use: str = "all"

    def __post_init__(self):
        if self.sweep is None and self.measure is None:
            raise ValueError(f"Finding {self.name!r}: give a sweep (with extract) or a measure function")
        if (self.sweep is None) != (self.extract is None):
            raise ValueError(f"Finding {self.name!r}: extract(results) -> numbers goes with a sweep, and only with one")
        if self.seed_use not in SEED_USES:
            raise ValueError(f"Finding {self.name!r}: seed_use must be one of {', '.join(SEED_USES)}, "
                             f"got {self.seed_use!r}")

    @property
    def sweeps(self) -> tuple:
        """The finding's sweeps as a tuple (empty for a measuring finding)."""
        if self.sweep is None:
            return ()
        return self.sweep if isinstance(self.sweep, tuple) else (self.sweep,)

    def reproduce(self, quick: bool = True, seeds=None, progress=None) -> FindingResult:
        """Run the finding here, one run after the other (``runner.reproduce``): ``seeds`` distinct
        integers >= 0, at least one (None: seed 0 for a quick run, the finding's own ``seeds`` for a full
        one); a RuntimeError naming what is missing when the finding cannot run here."""
        from .runner import reproduce

        return reproduce(self, quick, seeds, progress)

    def seeds_for(self, quick: bool, seeds=None) -> tuple:
        """The seeds a run uses (``reproduce``'s rule, then ``seed_use``), checked."""
        seeds = ((0,) if quick else self.seeds) if seeds is None else tuple(seeds)
        # >= 0: a run's seed seeds numpy's generator, which refuses a negative one deep inside a run
        if not seeds or not all(isinstance(s, numbers.Integral) and not isinstance(s, bool) and s >= 0 for s in seeds) \
                or len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds must be distinct integers >= 0, at least one; got {seeds!r}")
        seeds = tuple(int(s) for s in seeds)
        if self.seed_use == "first" or (self.seed_use == "first-when-quick" and quick):
            return seeds[:1]
        return seeds

    def available(self) -> bool:
        """Whether what the finding needs is importable here."""
        if not self.needs:
            return True
        import importlib.util

        try:
            return importlib.util.find_spec(self.needs) is not None
        except ModuleNotFoundError:
            return False
