"""What a finding is, and what running one gives.

A :class:`Finding` is a published claim about numbers in low precision, with its source and
the number the source reports; its ``run(quick, seeds, progress)`` measures fpsim's number in
miniature and returns a :class:`FindingResult`; its ``verdict(numbers)`` decides, from the
measured numbers alone, whether the miniature ``reproduced`` the claim, did so ``partly``, or
shows it ``not at this scale`` - each with a one-sentence reason.  The verdict is a pure
function of the numbers, so it is tested on fixed inputs.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["Finding", "FindingResult", "VERDICTS", "say"]

VERDICTS = ("reproduced", "partly", "not at this scale")


@dataclass(frozen=True)
class Finding:
    """One entry of the catalogue.

    ``claim`` one sentence; ``source`` the arXiv id or issue; ``source_number`` what the source
    reports, in words and numbers; ``runtime`` the seconds of a (quick, full) run measured on a
    shared 2-core VM while others' jobs kept its load average near 8 (a quiet machine takes about
    a third to a half of that); ``run(quick, seeds, progress)`` -> :class:`FindingResult` (the
    training findings run every seed and report seed means, the sampling ones draw with the first
    seed, and the result's ``seeds`` says which were used; ``progress`` is called with one line of
    text as each stage starts, or is None); ``verdict(numbers)`` -> (verdict, reason); ``needs``
    names a module the finding cannot run without ("" when it runs anywhere); ``seeds``: the seeds
    a full run uses when none are given - several where the claim is about training dynamics,
    which one seed can show by chance (the verdict reads what holds across them).
    """

    name: str
    claim: str
    source: str
    source_number: str
    runtime: tuple[float, float]
    run: Callable
    verdict: Callable
    needs: str = ""
    seeds: tuple = (0,)

    def reproduce(self, quick: bool = True, seeds=None, progress=None) -> FindingResult:
        """Run the finding (``run`` after the checks): ``seeds`` distinct integers, at least one
        (None: seed 0 for a quick run, the finding's own ``seeds`` for a full one); a RuntimeError
        naming what is missing when the finding cannot run here."""
        seeds = ((0,) if quick else self.seeds) if seeds is None else tuple(seeds)
        if not seeds or not all(isinstance(s, numbers.Integral) and not isinstance(s, bool) for s in seeds) \
                or len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds must be distinct integers, at least one; got {seeds!r}")
        if not self.available():
            raise RuntimeError(f"{self.name} needs {self.needs}, which this installation does not have")
        return self.run(bool(quick), tuple(int(s) for s in seeds), progress)

    def available(self) -> bool:
        """Whether what the finding needs is importable here."""
        if not self.needs:
            return True
        import importlib.util

        try:
            return importlib.util.find_spec(self.needs) is not None
        except ModuleNotFoundError:
            return False


@dataclass
class FindingResult:
    """What one run of a finding measured.

    ``numbers``: name -> float, every number the verdict reads (JSON-ready); ``measured``: fpsim's
    number in one line, to set beside the source's; ``verdict`` one of :data:`VERDICTS` and
    ``reason`` one sentence; ``draw(ax)`` draws the figure onto a matplotlib Axes (the caller
    makes and saves the figure, so this layer needs no plotting library); ``series``: the arrays
    the figure shows, by name.
    """

    name: str
    numbers: dict
    measured: str
    verdict: str
    reason: str
    quick: bool
    seeds: tuple
    seconds: float = 0.0
    draw: Callable | None = field(default=None, repr=False)
    series: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {', '.join(VERDICTS)}; got {self.verdict!r}")

    def to_json(self) -> dict:
        """The result as plain types (non-finite numbers stay floats; ``tools.jsonout`` writes them as null)."""
        return {"name": self.name, "verdict": self.verdict, "reason": self.reason, "measured": self.measured,
                "numbers": {k: float(v) for k, v in self.numbers.items()}, "quick": self.quick,
                "seeds": list(self.seeds), "seconds": self.seconds}


def say(progress, text: str) -> None:
    """Tell ``progress`` (a callable taking one line, or None) that a stage starts."""
    if progress is not None:
        progress(text)


def pct(x: float, digits: int = 1) -> str:
    """``x`` (a fraction) as a percentage, or 'nan'."""
    return f"{100 * x:.{digits}f}%" if math.isfinite(x) else "nan"
