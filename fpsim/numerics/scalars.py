"""Host scalars fpsim computes with Python floats, defined so that no libm decides them.

Python's ``b ** n``, ``math.log`` and ``math.exp`` on floats call the C library, accurate to
about half an ulp on glibc, a little less elsewhere: the last bit of Adam's bias correction
1 - beta**step, or of a reported log-ratio, could differ between machines.  These are correctly
rounded to float64 instead: :func:`powi` by exact rational arithmetic, :func:`log64`,
:func:`log2_64`, :func:`exp64` and :func:`cos64` with Python's ``decimal`` at 40 digits (its exp and ln are
correctly rounded to those digits; the float conversion rounds once more, and a transcendental
value is never within 1e-40 of a float64 halfway point in practice).  Slow (tens of
microseconds): for scalars, not arrays.
"""

from __future__ import annotations

import functools
import math
from decimal import Decimal, localcontext
from fractions import Fraction

__all__ = ["powi", "log64", "log2_64", "exp64", "cos64"]


@functools.lru_cache(maxsize=4096)
def powi(base: float, n: int) -> float:
    """base**n for a float base and an integer n >= 0, correctly rounded to float64."""
    if n < 0:
        raise ValueError(f"powi: n must be >= 0, got {n}")
    return float(Fraction(base) ** n)


def _decimal(fn, x: float) -> float:
    with localcontext() as ctx:
        ctx.prec = 40
        return float(fn(Decimal(x)))


def log64(x: float) -> float:
    """The natural logarithm of a float, correctly rounded (0 -> -inf, negative or NaN -> NaN)."""
    x = float(x)
    if not x > 0 or math.isinf(x):
        return math.log(x) if x > 0 else (-math.inf if x == 0 else math.nan)
    return _decimal(lambda d: d.ln(), x)


def log2_64(x: float) -> float:
    """log2 of a float, correctly rounded (exact for powers of two)."""
    x = float(x)
    if not x > 0 or math.isinf(x):
        return log64(x)
    m, e = math.frexp(x)
    if m == 0.5:
        return float(e - 1)
    with localcontext() as ctx:
        ctx.prec = 40
        return float(Decimal(x).ln() / Decimal(2).ln())


def exp64(x: float) -> float:
    """e**x of a float, correctly rounded (overflow -> inf, underflow -> 0)."""
    x = float(x)
    if math.isnan(x):
        return math.nan
    if x > 710:
        return math.inf
    if x < -746:
        return 0.0
    return _decimal(lambda d: d.exp(), x)


def cos64(x: float) -> float:
    """cos x (radians) of a float, correctly rounded (x reduced modulo 2 pi exactly enough first)."""
    x = float(x)
    if not math.isfinite(x):
        return math.nan
    from .highprec import _sin_cos

    return float(_sin_cos(x, 40)[1])
