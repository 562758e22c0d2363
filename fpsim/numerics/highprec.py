"""The few values the float64 shortcut cannot decide, computed with Python's ``decimal`` and
rounded exactly to float32.

Each function takes one float (a float32 value) and returns the np.float32 nearest to the exact
function value (ties to even).  ``decimal`` evaluates exp and ln correctly rounded to the
context's precision; 50 significant digits, plus the digits a cancellation costs (tanh, log1p
and expm1 near 0), put the computed value within 1e-45 of its own size of the exact one, far
closer than any float32 input's exact value can come to a float32 halfway point without being
one (the hardest float32 cases for these functions come within about 1e-16).  The last step,
:func:`to_f32`, compares against the halfway point itself, in exact decimal arithmetic.
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np

__all__ = ["to_f32", "exp_decimal", "log_decimal", "tanh_decimal", "log1p_decimal", "expm1_decimal", "pow_decimal", "cos_decimal", "sin_decimal"]

_DIGITS = 50
_F32_MAX = float(np.finfo(np.float32).max)


def _extra(v: float) -> int:
    """Digits a result near 0 loses to cancellation (1 + x or e**x - 1 for tiny x)."""
    return max(0, -math.floor(math.log10(abs(v)))) if v else 0


def _neighbour(r: np.float32, towards_up: bool) -> float:
    """The float32 number next to r (as a float); past the largest finite one, +-2**128."""
    if abs(float(r)) == _F32_MAX and (float(r) > 0) == towards_up:
        return math.copysign(2.0**128, float(r))
    return float(np.nextafter(r, np.float32(np.inf if towards_up else -np.inf)))


def to_f32(v) -> np.float32:
    """The float32 nearest to the exact number ``v`` (a Decimal or a Fraction), ties to even;
    beyond float32's range +-inf, below half its smallest subnormal +0 or -0."""
    f = float(v)  # correctly rounded to float64 (for a Fraction too)
    with np.errstate(over="ignore"):
        r = np.float32(f) if math.isfinite(f) else np.float32(f)
    if not math.isfinite(float(r)):
        lo = math.copysign(_F32_MAX, f)
        # inf unless v is below the overflow threshold (the midpoint to 2**128)
        thr = (Fraction(_F32_MAX) + Fraction(2) ** 128) / 2
        if abs(Fraction(v) if isinstance(v, Fraction) else _frac(v)) < thr:
            return np.float32(lo)
        return r
    exact = Fraction(v) if isinstance(v, Fraction) else _frac(v)
    rf = Fraction(float(r))
    if exact == rf:
        return r
    other = Fraction(_neighbour(r, exact > rf))
    mid = (rf + other) / 2
    if exact == mid:  # a tie: the even one
        return r if int(np.float32(r).view(np.uint32)) % 2 == 0 else np.float32(float(other))
    if (exact > mid) == (other > rf):
        with np.errstate(over="ignore"):
            return np.float32(float(other))
    return r


def _frac(d: Decimal) -> Fraction:
    return Fraction(d)


def exp_decimal(x: float) -> np.float32:
    with localcontext() as ctx:
        ctx.prec = _DIGITS
        return to_f32(Decimal(x).exp())


def log_decimal(x: float) -> np.float32:
    if x <= 0 or not math.isfinite(x):
        return np.float32(np.log(np.float64(x)))
    with localcontext() as ctx:
        ctx.prec = _DIGITS
        return to_f32(Decimal(x).ln())


def tanh_decimal(x: float) -> np.float32:
    with localcontext() as ctx:
        ctx.prec = _DIGITS + _extra(x) + 5
        e = (2 * Decimal(x)).exp()
        return to_f32((e - 1) / (e + 1))


def log1p_decimal(x: float) -> np.float32:
    if x <= -1 or not math.isfinite(x):
        return np.float32(np.log1p(np.float64(x)))
    with localcontext() as ctx:
        ctx.prec = _DIGITS + _extra(x) + 5
        return to_f32((1 + Decimal(x)).ln())


def expm1_decimal(x: float) -> np.float32:
    with localcontext() as ctx:
        ctx.prec = _DIGITS + _extra(x) + 5
        return to_f32(Decimal(x).exp() - 1)


def pow_decimal(x: float, p: float) -> np.float32:
    """x**p: exact (fractions) for an integer p, else decimal's exp(p ln |x|)."""
    if p == int(p) and abs(p) <= 4096:
        if x == 0 and p < 0:
            return np.float32(np.power(np.float64(x), p))
        return to_f32(Fraction(x) ** int(p))
    if x < 0 or x == 0 or not math.isfinite(x):
        return np.float32(np.power(np.float64(x), p))
    with localcontext() as ctx:
        ctx.prec = _DIGITS + 10
        return to_f32((Decimal(p) * Decimal(x).ln()).exp())


def _pi(prec: int) -> Decimal:
    """pi to ``prec`` digits (Machin's formula in decimal arithmetic)."""
    with localcontext() as ctx:
        ctx.prec = prec + 5

        def arctan_inv(n: int) -> Decimal:
            x = Decimal(1) / n
            x2 = x * x
            total, term, k = x, x, 1
            while True:
                term *= -x2
                k += 2
                t = term / k
                if t == 0 or abs(t) < Decimal(10) ** -(prec + 5):
                    return total + t
                total += t

        return 16 * arctan_inv(5) - 4 * arctan_inv(239)


def _sin_cos(x: float, prec: int) -> tuple[Decimal, Decimal]:
    """(sin x, cos x) to about ``prec`` digits: x reduced modulo 2 pi exactly enough (x is a float32,
    |x| < 2**128, so 40 more digits of pi than x has before the point suffice), then Taylor series."""
    mag = max(0, math.frexp(abs(x))[1])
    with localcontext() as ctx:
        ctx.prec = prec + 10 + mag // 3
        pi2 = 2 * _pi(ctx.prec)
        r = Decimal(x) % pi2
        r2 = r * r
        s, c = r, Decimal(1)
        term_s, term_c, k = r, Decimal(1), 1
        eps = Decimal(10) ** -(prec + 10)
        while abs(term_s) > eps or abs(term_c) > eps:
            term_c *= -r2 / ((2 * k - 1) * (2 * k))
            term_s *= -r2 / ((2 * k) * (2 * k + 1))
            c += term_c
            s += term_s
            k += 1
        return s, c


def cos_decimal(x: float) -> np.float32:
    if not math.isfinite(x):
        return np.float32(np.nan)
    return to_f32(_sin_cos(x, _DIGITS)[1])


def sin_decimal(x: float) -> np.float32:
    if not math.isfinite(x):
        return np.float32(np.nan)
    if abs(x) < 1e-30:
        return to_f32(Fraction(x) - Fraction(x) ** 3 / 6)  # the series' first terms decide it
    return to_f32(_sin_cos(x, _DIGITS + _extra(x))[0])
