"""What running a finding gives: :class:`FindingResult`, plain data only (numbers, the one-line
measurement, the verdict and its reason, the figure's series), so it crosses processes and JSON
and the figure is drawn wherever the result lands; and the small helpers every finding uses."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["FindingResult", "VERDICTS", "pct", "plain", "say"]

VERDICTS = ("reproduced", "partly", "not at this scale")


@dataclass
class FindingResult:
    """What one run of a finding measured, as plain data (it crosses processes and JSON).

    ``numbers``: name -> float, every number the verdict reads; ``measured``: fpsim's number in one
    line, to set beside the source's; ``verdict`` one of :data:`VERDICTS` and ``reason`` one
    sentence; ``series``: what the figure shows (lists, numbers and strings only: :func:`plain`);
    ``seeds`` the seeds used and ``seconds`` the time its runs took.
    """

    name: str
    numbers: dict
    measured: str
    verdict: str
    reason: str
    quick: bool
    seeds: tuple
    seconds: float = 0.0
    series: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {', '.join(VERDICTS)}; got {self.verdict!r}")
        self.series = plain(self.series)

    def to_json(self) -> dict:
        """The result as plain types (non-finite numbers stay floats; ``tools.jsonout`` writes them as null)."""
        return {"name": self.name, "verdict": self.verdict, "reason": self.reason, "measured": self.measured,
                "numbers": {k: float(v) for k, v in self.numbers.items()}, "quick": self.quick,
                "seeds": list(self.seeds), "seconds": self.seconds}


def plain(x):
    """``x`` as plain data: arrays and tuples as lists, numpy scalars as Python numbers, mapping keys
    as strings (what JSON holds); the values themselves unchanged (float64 -> float is exact)."""
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, np.ndarray):
        return plain(x.tolist())
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    raise TypeError(f"a finding's series holds plain data (numbers, strings, lists, dicts), got {type(x).__name__}")


def say(progress, text: str) -> None:
    """Tell ``progress`` (a callable taking one line, or None) that a stage starts."""
    if progress is not None:
        progress(text)


def pct(x: float, digits: int = 1) -> str:
    """``x`` (a fraction) as a percentage, or 'nan'."""
    return f"{100 * x:.{digits}f}%" if math.isfinite(x) else "nan"
