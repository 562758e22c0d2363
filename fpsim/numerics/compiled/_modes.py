"""The compiled path of ``fpsim/formats/modekernels.py`` (``round_magnitudes_f32``): every rounding
mode from float32, value by value in one loop, with the numpy kernel's operations in its order.

For a format other than bfloat16 (:func:`scaled_modes`): |x| clamped at 2**(emax + 2), the ulp
q = 2**(e - mantissa_bits) built from its exponent field (clamped at emin), v = |x| / q exactly
(times the power of two 1/q), v rounded to an integer in the mode, times q.  For bfloat16
(:func:`bf16_modes`): integer arithmetic on the patterns, the low 16 bits being the fraction.
Stochastic rounding takes its random numbers as arrays drawn by the caller in the numpy path's
order: ``u`` (float64 uniforms: exact SR) or ``rand`` (k-bit integers: few-bit SR).
"""

from __future__ import annotations

import numpy as np

from ._exact import jit
from ._round import _f, _u

__all__ = ["MODES", "VARIANTS", "scaled_modes", "bf16_modes"]

MODES = {"toward_zero": 0, "nearest": 1, "nearest_away": 2, "toward_positive": 3, "toward_negative": 4,
         "to_odd": 5, "stochastic": 6}  # 7: stochastic with k random bits
FEWBIT = 7
VARIANTS = {"rne": 0, "rto": 1, "fast": 2, "fastest": 3}

_U32 = np.uint32
_F32 = np.float32
_ABS = _U32(0x7FFFFFFF)
_EXP = _U32(0x7F800000)
_SIGN = _U32(0x80000000)
_INV = _U32(254 << 23)


@jit(inline=True)
def _fewbit(v, r, k, rnd, variant):
    """``modekernels._stochastic``: whether v (its floor r) goes up with k random bits rnd."""
    d = _F32(_F32(v - r) * _F32(2.0**k))
    n = _F32(_F32(2.0**k) - _F32(rnd))  # exact: integers up to 2**24
    if variant == 3:
        return d >= n
    n = _F32(n - _F32(0.5))
    if variant == 2:
        return d >= n
    if d == n:
        return (rnd & 1) == (1 if variant == 1 else 0)  # N = 2**k - R is odd when R is
    return d > n


@jit(inline=True)
def _pick(v, neg, mode, u, rnd, k, variant):
    """v (>= 0, float32, exact) rounded to an integer in ``mode`` (``modekernels._pick``)."""
    if mode == 1:
        return _F32(np.rint(v))  # ties to even
    r = _F32(np.floor(v))
    if mode == 0:
        return r
    if mode == 2:
        up = v >= _F32(r + _F32(0.5))
    elif mode == 3:
        up = (v > r) and not neg
    elif mode == 4:
        up = (v > r) and neg
    elif mode == 5:
        up = (v > r) and (np.int32(r) & 1) == 0
    elif mode == 6:
        up = u < np.float64(_F32(v - r))  # a float64 draw below the fraction
    else:
        up = _fewbit(v, r, k, rnd, variant)
    return _F32(r + _F32(1.0)) if up else r


@jit()
def scaled_modes(src, dst, top, qmin, man_field, mode, u, rand, k, variant):
    """``round_magnitudes_f32`` for a format with a normal float32 ulp: float32 ``src`` -> the
    rounded magnitudes in ``dst``.  ``top``: 2**(emax + 2); ``qmin``: the exponent field of
    2**emin; ``man_field``: mantissa_bits << 23; ``u`` / ``rand``: the draws (empty if unused)."""
    for i in range(src.shape[0]):
        x = src[i]
        a = _f(_U32(_u(x) & _ABS))
        if a > top:  # NaN stays NaN (the comparison is false), as numpy's minimum keeps it
            a = top
        q = _U32(_U32(max(_U32(_u(a) & _EXP), qmin)) - man_field)  # one ulp
        v = _F32(a * _f(_U32(_INV - q)))  # exact: a power of two
        neg = (_u(x) & _SIGN) != 0
        r = _pick(v, neg, mode, u[i] if mode == 6 else 0.0, rand[i] if mode == FEWBIT else 0, k, variant)
        dst[i] = _F32(r * _f(q))


@jit(inline=True)
def _bf16_fewbit(rem, k, rnd, variant):
    """``modekernels._bf16_fewbit`` on one value: D = rem * 2**(k - 16) cut as the variant says,
    and D + R >= 2**k."""
    if variant == 2:
        cut2 = rem >> (15 - k) if k <= 15 else rem << (k - 15)
        return cut2 + 2 * rnd + 1 >= 2 ** (k + 1)
    if k >= 16:
        cut = rem << (k - 16)
    elif variant == 3:
        cut = rem >> (16 - k)
    else:
        s = 16 - k
        cut = rem >> s
        low = rem & ((1 << s) - 1)
        half = 1 << (s - 1)
        odd = (cut & 1) == 1
        cut += (low > half) or (low == half and (odd if variant == 0 else not odd))
    return cut + rnd >= 2**k


@jit()
def bf16_modes(src, dst, mode, u, rand, k, variant):
    """``modekernels._bf16``: float32 patterns ``src`` -> bfloat16-grid magnitudes' patterns in
    ``dst`` (NaN: |x| kept)."""
    for i in range(src.shape[0]):
        b = src[i]
        a = _U32(b & _ABS)
        rem = np.int64(a & _U32(0xFFFF))
        neg = (b & _SIGN) != 0
        if mode == 1:
            up = rem > 0x8000 or (rem == 0x8000 and (a & _U32(0x10000)) != 0)
        elif mode == 2:
            up = rem >= 0x8000
        elif mode == 3:
            up = rem != 0 and not neg
        elif mode == 4:
            up = rem != 0 and neg
        elif mode == 5:
            up = rem != 0 and (a & _U32(0x10000)) == 0
        elif mode == 6:
            up = u[i] * 65536.0 < rem  # the draw below rem / 2**16, scaled exactly
        elif mode == FEWBIT:
            up = _bf16_fewbit(rem, k, np.int64(rand[i]), variant)
        else:
            up = False
        r = _U32(_U32(a - _U32(rem)) + (_U32(0x10000) if up else _U32(0)))
        dst[i] = a if a > _EXP else r
