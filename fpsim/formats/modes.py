"""The rounding modes, defined once: which neighbour each picks, and what overflow, zero, sign
and NaN become.  The exact reference algorithm works in float64 (every float32 and float64
input, every format); ``modekernels.py`` does the same in float32 bit operations, fast, where it
can, and the tests hold the two against each other and against gfloat.

The modes (gfloat's ``RoundMode`` names in brackets):

- ``nearest``: to nearest, ties to even [TiesToEven]; ``nearest_away``: ties away from zero
  [TiesToAway];
- ``toward_zero`` [TowardZero], ``toward_positive`` [TowardPositive], ``toward_negative``
  [TowardNegative]: IEEE 754's directed roundings;
- ``to_odd``: keep the value if it is representable, else take the neighbour whose bit pattern is
  odd [ToOdd] (rounding to odd first makes a later rounding to nearest correct: Boldo &
  Melquiond 2008 - fpsim's float64 -> bfloat16 path relies on it);
- ``stochastic``: up with probability equal to the distance from the lower neighbour, in ulps;
  with ``sr_bits`` the few-bit variants of :mod:`fpsim.formats.sr` [Stochastic*].

Every mode rounds as if the exponent range were unbounded above, then deals with overflow
(gfloat's rules, and IEEE 754's for the directed modes): ``toward_zero`` gives +-max, a directed
mode gives +-max on the side it rounds away from (``toward_positive``: -max for a negative
overflow, +inf for a positive one), every other mode gives +-inf, or NaN in a format without inf
(saturating formats - fp6, fp4, ocp_int8 - and ``saturate=True`` clamp to +-max instead).  An
infinite input stays infinite unless saturated.  Formats without -0 (P3109, ocp_int8) give +0;
unsigned formats give NaN for negative inputs.  "Odd" and "even" are the bit pattern's last bit;
in a format with no mantissa bits that is the exponent's, except float8_e8m0fnu, whose ties go up
(as ml_dtypes and PyTorch round it).
"""

from __future__ import annotations

import numpy as np

from .sr import round_up_fewbit
from .table import Format

__all__ = ["ROUNDING_MODES", "DIRECTED", "round_magnitudes", "finish"]

ROUNDING_MODES = ("nearest", "nearest_away", "toward_zero", "toward_positive", "toward_negative", "to_odd",
                  "stochastic")
DIRECTED = ("toward_zero", "toward_positive", "toward_negative")


def round_magnitudes(x64: np.ndarray, f: Format, mode: str, rng=None, sr=None) -> np.ndarray:
    """|x| rounded onto ``f``'s grid in ``mode``, exactly, as float64 magnitudes with the exponent
    range unbounded above (0, inf and NaN pass through; the caller applies :func:`finish`).

    Scaling by a power of two (``ldexp``) moves one ulp to the units place, where ``floor`` is
    exact, and ``delta`` = the fraction above it, also exact; the mode picks floor or floor + 1.
    ``sr``: None, or (k, random integers, variant) for few-bit stochastic rounding.
    """
    a = np.abs(x64)
    ok = np.isfinite(a) & (a > 0)
    am = np.where(ok, a, 1.0)
    _, e2 = np.frexp(am)  # am = m * 2**e2, m in [0.5, 1)
    e = np.maximum(e2 - 1, f.emin)  # the binade, clamped so that subnormals share emin's ulp
    shift = f.mantissa_bits - e  # units place = one ulp
    y = np.ldexp(am, shift)
    lo = np.floor(y)
    delta = y - lo
    up = _goes_up(mode, lo, delta, e, np.signbit(x64) & f.signed, f, rng, sr)
    with np.errstate(invalid="ignore", over="ignore"):
        mag = np.ldexp(lo + up, -shift)
    return np.where(ok, mag, a)


def _goes_up(mode, lo, delta, e, neg, f: Format, rng, sr):
    if mode == "toward_zero":
        return np.zeros(lo.shape, dtype=bool)
    if mode == "toward_positive":
        return ~neg & (delta > 0)
    if mode == "toward_negative":
        return neg & (delta > 0)
    if mode == "nearest_away":
        return delta >= 0.5
    if mode == "stochastic":
        if sr is None:  # up with probability equal to the distance from the lower neighbour: unbiased
            return rng.random(lo.shape) < delta
        k, rand, variant = sr
        return round_up_fewbit(delta, k, rand, variant)
    ilo = lo.astype(np.int64)
    if f.mantissa_bits == 0 and f.has_zero:  # no mantissa: the pattern's last bit is the exponent's
        odd = (ilo != 0) & (((e + f.bias) & 1) == 1)
    else:
        odd = (ilo & 1) == 1
    if mode == "nearest":
        return (delta > 0.5) | ((delta == 0.5) & odd)
    if mode == "to_odd":
        return (delta > 0) & ~odd
    raise ValueError(f"unknown rounding mode {mode!r}")


_SIGN32 = np.uint32(0x80000000)


def finish(mag: np.ndarray, x: np.ndarray, f: Format, mode: str, saturate: bool) -> np.ndarray:
    """Signed results in ``f`` from rounded magnitudes ``mag`` (unbounded above) of inputs ``x``
    (same float dtype): overflow by the mode's rule, the sign, -0, zero and unsigned rules.

    float32 results of a signed format with nothing beyond max and no NaN (the common case) take
    a short path: the sign bits are or-ed onto the magnitudes in place (``mag`` is consumed)."""
    if x.dtype == np.float32 and f.signed and f.has_zero and not f.twos_complement and mag.size:
        top = np.max(mag)
        if top <= f.max:  # no overflow, no NaN (a NaN makes the max NaN)
            out = mag.reshape(-1).view(np.uint32)
            out |= np.bitwise_and(x.reshape(-1).view(np.uint32), _SIGN32)
            if not f.has_nz:  # no -0 in P3109: a -0 pattern becomes +0
                out[out == _SIGN32] = 0
            return mag
    neg = np.signbit(x)
    amax = np.where(neg, f.max_negative, f.max) if f.twos_complement else x.dtype.type(f.max)
    top = np.max(mag, initial=0) if mag.size else 0
    if not top <= f.max_negative:  # something overflowed, or NaN: the slow path, rarely taken
        with np.errstate(invalid="ignore"):
            over = mag > amax
        if saturate or f.saturates:
            mag = np.where(over, amax, mag)
        else:
            to_max = {"toward_zero": over, "toward_positive": over & neg, "toward_negative": over & ~neg}.get(mode)
            if to_max is not None:
                mag = np.where(to_max & np.isfinite(x), amax, mag)
            with np.errstate(invalid="ignore"):
                mag = np.where(mag > amax, np.inf if f.has_inf else np.nan, mag)
    elif f.twos_complement:
        mag = np.minimum(mag, amax)
    if not f.has_zero:
        mag = np.where(mag == 0, f.tiny, mag)  # no zero: the smallest value is the floor
    if not f.signed:
        with np.errstate(invalid="ignore"):
            keep = (x > 0) | ((x == 0) & f.has_zero)
        return np.where(keep, mag, np.nan).astype(x.dtype, copy=False)
    out = np.copysign(mag, x)
    if not f.has_nz:
        out = np.where(out == 0, x.dtype.type(0), out)  # no -0 in P3109 or ocp_int8
    return np.asarray(out).astype(x.dtype, copy=False)
