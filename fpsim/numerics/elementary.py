"""exp, log, tanh, log1p, expm1, cos, sin and pow, correctly rounded to float32 - the same bits on every machine.

numpy's float32 ``exp`` (and log, tanh, ...) has several implementations - AVX-512, AVX2/FMA,
a baseline loop, another on Arm - each accurate to an ulp or so, and they disagree in the last
bit on a few values in a hundred.  fpsim defines each function's float32 result as the exact
value rounded once to float32 (to nearest, ties to even), and computes it from numpy's float64
function: that is within a few float64 ulps of the exact value on any platform (glibc, SVML,
Apple's libm, numpy's own loops), so unless the float64 value lies within 2**-46 of its own
size of a point halfway between two float32 numbers (about one value in two million), rounding
it to float32 gives the correct result whichever implementation ran.  Values that close are
recomputed with Python's ``decimal`` at 50 digits (``highprec``).  The margin, 2**-46 relative,
is 64 float64 ulps: sixteen times the worst error among the float64 implementations numpy uses
(SVML's 4 ulps).

inf, NaN and exact results (exp(0) = 1, log(1) = 0, exp(-inf) = 0) come straight from the
float64 function; NaN comes out as the positive quiet NaN.
"""

from __future__ import annotations

import numbers

import numpy as np

from . import compiled, highprec
from .checked import round_within

__all__ = ["exp_f32", "log_f32", "tanh_f32", "log1p_f32", "expm1_f32", "cos_f32", "sin_f32", "pow_f32", "REL_MARGIN"]

REL_MARGIN = 2.0**-46  # the float64 value must lie this far (relative) from a float32 halfway point


def _correctly_rounded(x, f64, exact_fn) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype != np.float32:
        x = x.astype(np.float32)
    fast = compiled.kernels()
    with np.errstate(all="ignore"):
        if fast is not None:
            return fast.elementary(x, f64, exact_fn, 2 * REL_MARGIN)
        y = f64(x.astype(np.float64))
        out, ok = round_within(y, np.abs(y) * (2 * REL_MARGIN))  # decided within w / 2
    if not ok.all():
        todo = np.flatnonzero(~ok.reshape(-1))
        flat = out.reshape(-1)
        yv = y.reshape(-1)[todo]
        fin = np.isfinite(yv) & (yv != 0)  # inf, NaN and an exact +-0 (tanh(-0) = -0) as they are
        with np.errstate(over="ignore", invalid="ignore"):
            v = yv[~fin].astype(np.float32)
        v[np.isnan(v)] = np.float32(np.nan)
        flat[todo[~fin]] = v
        xs = x.reshape(-1)
        for i in todo[fin]:
            flat[i] = exact_fn(float(xs[i]))
    return out


def exp_f32(x) -> np.ndarray:
    """e**x of float32 ``x``, correctly rounded to float32."""
    return _correctly_rounded(x, np.exp, highprec.exp_decimal)


def log_f32(x) -> np.ndarray:
    """The natural logarithm of float32 ``x``, correctly rounded (log 0 = -inf, log of a negative
    number NaN)."""
    return _correctly_rounded(x, np.log, highprec.log_decimal)


def tanh_f32(x) -> np.ndarray:
    """tanh of float32 ``x``, correctly rounded to float32."""
    return _correctly_rounded(x, np.tanh, highprec.tanh_decimal)


def log1p_f32(x) -> np.ndarray:
    """log(1 + x) of float32 ``x`` (exact for tiny x), correctly rounded to float32."""
    return _correctly_rounded(x, np.log1p, highprec.log1p_decimal)


def expm1_f32(x) -> np.ndarray:
    """e**x - 1 of float32 ``x`` (exact for tiny x), correctly rounded to float32."""
    return _correctly_rounded(x, np.expm1, highprec.expm1_decimal)


def cos_f32(x) -> np.ndarray:
    """cos of float32 ``x`` (radians), correctly rounded to float32."""
    return _correctly_rounded(x, np.cos, highprec.cos_decimal)


def sin_f32(x) -> np.ndarray:
    """sin of float32 ``x`` (radians), correctly rounded to float32."""
    return _correctly_rounded(x, np.sin, highprec.sin_decimal)


def pow_f32(x, p) -> np.ndarray:  # noqa: A001 - numpy's name
    """x**p of float32 ``x`` and a real scalar ``p``, correctly rounded to float32.

    p = 1, 2, 0.5 and -1 are one IEEE operation each (x, x * x, sqrt, 1 / x), correctly rounded
    by the hardware; any other p goes through the float64 power and the check above (an integer
    p is recomputed exactly, with fractions, where the check cannot decide)."""
    if not isinstance(p, numbers.Real):
        raise TypeError(f"pow takes a real scalar exponent, got {type(p).__name__}")
    p = float(p)
    x = np.asarray(x)
    if x.dtype != np.float32:
        x = x.astype(np.float32)
    with np.errstate(all="ignore"):
        if p == 1:
            return x.copy()
        if p == 2:
            return x * x
        if p == 0.5:
            return np.sqrt(x)
        if p == -1:
            return np.float32(1) / x
    return _correctly_rounded(x, lambda v: np.power(v, p), lambda v: highprec.pow_decimal(v, p))
