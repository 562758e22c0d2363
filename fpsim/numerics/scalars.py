"""Host scalars fpsim computes with Python floats, defined so that no libm decides them.

Python's ``b ** n`` on floats calls the C library's ``pow``, accurate to about half an ulp on
glibc, a little less on others: the last bit of Adam's bias correction 1 - beta**step could
differ between machines.  :func:`powi` is the correctly rounded power instead (exact rational
arithmetic, then one rounding), which every accurate ``pow`` agrees with almost always.
"""

from __future__ import annotations

import functools
from fractions import Fraction

__all__ = ["powi"]


@functools.lru_cache(maxsize=4096)
def powi(base: float, n: int) -> float:
    """base**n for a float base and an integer n >= 0, correctly rounded to float64."""
    if n < 0:
        raise ValueError(f"powi: n must be >= 0, got {n}")
    return float(Fraction(base) ** n)
