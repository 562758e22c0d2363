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
_LOW = _U32(0xFFFF)


@jit(inline=True)
def _fewbit(v, r, two_k, rnd, variant):
    """``modekernels._stochastic``: whether v (its floor r) goes up with k random bits rnd
    (``two_k``: 2**k as float32)."""
    d = _F32(_F32(v - r) * two_k)
    n = _F32(two_k - _F32(rnd))  # exact: integers up to 2**24
    if variant == 3:
        return d >= n
    n = _F32(n - _F32(0.5))
    if variant == 2:
        return d >= n
    if d == n:
        return (rnd & 1) == (1 if variant == 1 else 0)  # N = 2**k - R is odd when R is
    return d > n


@jit(inline=True)
def _pick(v, neg, mode):
    """v (>= 0, float32, exact) rounded to an integer in a deterministic ``mode``
    (``modekernels._pick``)."""
    if mode == 1:
        return _F32(np.rint(v))  # ties to even
    r = _F32(np.floor(v))
    if mode == 2:
        up = v >= _F32(r + _F32(0.5))
    elif mode == 3:
        up = (v > r) and not neg
    elif mode == 4:
        up = (v > r) and neg
    elif mode == 5:
        up = (v > r) and (np.int32(r) & 1) == 0
    else:
        up = False
    return _F32(r + _F32(1.0)) if up else r


@jit(inline=True)
def _grid(x, top, qmin, man_field):
    """(v, q) for float32 x: |x| (clamped at ``top``) in ulps, exactly, and the ulp's pattern."""
    a = _f(_U32(_u(x) & _ABS))
    if a > top:  # NaN stays NaN (the comparison is false), as numpy's minimum keeps it
        a = top
    q = _U32(_U32(max(_U32(_u(a) & _EXP), qmin)) - man_field)  # one ulp
    return _F32(a * _f(_U32(_INV - q))), q  # exact: times a power of two


@jit()
def scaled_modes(src, dst, top, qmin, man_field, mode, u, rand, k, variant):
    """``round_magnitudes_f32`` for a format with a normal float32 ulp: float32 ``src`` -> the
    rounded magnitudes in ``dst``.  ``top``: 2**(emax + 2); ``qmin``: the exponent field of
    2**emin; ``man_field``: mantissa_bits << 23; ``u`` / ``rand``: the draws (empty if unused).
    One loop per kind of mode, so that the mode's test is not made value by value."""
    two_k = _F32(2.0**k)
    if mode == 6:  # exact SR: up where a float64 draw is below the fraction
        for i in range(src.shape[0]):
            v, q = _grid(src[i], top, qmin, man_field)
            r = _F32(np.floor(v))
            dst[i] = _F32(_F32(r + _F32(1.0) if u[i] < np.float64(_F32(v - r)) else r) * _f(q))
    elif mode == FEWBIT:  # each variant a constant in its own inlined loop
        if variant == 0:
            _scaled_fewbit_loop(src, dst, top, qmin, man_field, rand, two_k, 0)
        elif variant == 1:
            _scaled_fewbit_loop(src, dst, top, qmin, man_field, rand, two_k, 1)
        elif variant == 2:
            _scaled_fewbit_loop(src, dst, top, qmin, man_field, rand, two_k, 2)
        else:
            _scaled_fewbit_loop(src, dst, top, qmin, man_field, rand, two_k, 3)
    elif mode == 0:  # each deterministic mode a constant in its own inlined loop: no test per value
        _scaled_loop(src, dst, top, qmin, man_field, 0)
    elif mode == 1:
        _scaled_loop(src, dst, top, qmin, man_field, 1)
    elif mode == 2:
        _scaled_loop(src, dst, top, qmin, man_field, 2)
    elif mode == 3:
        _scaled_loop(src, dst, top, qmin, man_field, 3)
    elif mode == 4:
        _scaled_loop(src, dst, top, qmin, man_field, 4)
    else:
        _scaled_loop(src, dst, top, qmin, man_field, 5)


@jit(inline=True)
def _scaled_fewbit_loop(src, dst, top, qmin, man_field, rand, two_k, variant):
    for i in range(src.shape[0]):
        v, q = _grid(src[i], top, qmin, man_field)
        r = _F32(np.floor(v))
        dst[i] = _F32(_F32(r + _F32(1.0) if _fewbit(v, r, two_k, rand[i], variant) else r) * _f(q))


@jit(inline=True)
def _scaled_loop(src, dst, top, qmin, man_field, mode):
    for i in range(src.shape[0]):
        x = src[i]
        v, q = _grid(x, top, qmin, man_field)
        dst[i] = _F32(_pick(v, (_u(x) & _SIGN) != 0, mode) * _f(q))


@jit(inline=True)
def _bf16_fewbit(rem, k, rnd, variant):
    """``modekernels._bf16_fewbit`` on one value (int64 throughout: rem < 2**16, R < 2**24):
    D = rem * 2**(k - 16) cut as the variant says, and D + R >= 2**k."""
    if variant == 2:
        cut2 = rem >> (15 - k) if k <= 15 else rem << (k - 15)
        return cut2 + 2 * rnd + 1 >= (np.int64(1) << (k + 1))
    if k >= 16:
        cut = rem << (k - 16)
    elif variant == 3:
        cut = rem >> (16 - k)
    else:
        s = 16 - k
        cut = rem >> s
        low = rem & ((np.int64(1) << s) - 1)
        half = np.int64(1) << (s - 1)
        odd = (cut & 1) == 1
        cut += (low > half) or (low == half and (odd if variant == 0 else not odd))
    return cut + rnd >= (np.int64(1) << k)


_HALF = _U32(0x8000)
_LAST = _U32(0x10000)  # bfloat16's last kept bit
_ZERO = _U32(0)


@jit(inline=True)
def _bf16_up(a, rem, neg, mode):
    """Whether bfloat16 pattern a's cut (its low 16 bits rem, uint32) goes up in a deterministic mode."""
    if mode == 1:
        return rem > _HALF or (rem == _HALF and (a & _LAST) != _ZERO)
    if mode == 2:
        return rem >= _HALF
    if mode == 3:
        return rem != _ZERO and not neg
    if mode == 4:
        return rem != _ZERO and neg
    if mode == 5:
        return rem != _ZERO and (a & _LAST) == _ZERO
    return False


@jit(inline=True)
def _bf16_store(a, rem, up):
    """The rounded pattern (a NaN's |x| kept: cutting its payload may leave an inf pattern)."""
    r = _U32(_U32(a - rem) + (_LAST if up else _ZERO))
    return a if a > _EXP else r


@jit()
def bf16_modes(src, dst, mode, u, rand, k, variant):
    """``modekernels._bf16``: float32 patterns ``src`` -> bfloat16-grid magnitudes' patterns in
    ``dst``, one loop per kind of mode."""
    if mode == 6:  # exact SR: the draw below rem / 2**16, scaled exactly
        for i in range(src.shape[0]):
            a = _U32(src[i] & _ABS)
            rem = _U32(a & _LOW)
            dst[i] = _bf16_store(a, rem, u[i] * 65536.0 < np.float64(rem))
    elif mode == FEWBIT:  # each variant a constant in its own inlined loop
        if variant == 0:
            _bf16_fewbit_loop(src, dst, rand, k, 0)
        elif variant == 1:
            _bf16_fewbit_loop(src, dst, rand, k, 1)
        elif variant == 2:
            _bf16_fewbit_loop(src, dst, rand, k, 2)
        else:
            _bf16_fewbit_loop(src, dst, rand, k, 3)
    elif mode == 0:  # each deterministic mode a constant in its own inlined loop: no test per value
        _bf16_loop(src, dst, 0)
    elif mode == 1:
        _bf16_loop(src, dst, 1)
    elif mode == 2:
        _bf16_loop(src, dst, 2)
    elif mode == 3:
        _bf16_loop(src, dst, 3)
    elif mode == 4:
        _bf16_loop(src, dst, 4)
    else:
        _bf16_loop(src, dst, 5)


@jit(inline=True)
def _bf16_fewbit_loop(src, dst, rand, k, variant):
    for i in range(src.shape[0]):
        a = _U32(src[i] & _ABS)
        rem = _U32(a & _LOW)
        dst[i] = _bf16_store(a, rem, _bf16_fewbit(np.int64(rem), k, np.int64(rand[i]), variant))


@jit(inline=True)
def _bf16_loop(src, dst, mode):
    for i in range(src.shape[0]):
        b = src[i]
        a = _U32(b & _ABS)
        rem = _U32(a & _LOW)
        dst[i] = _bf16_store(a, rem, _bf16_up(a, rem, (b & _SIGN) != _ZERO, mode))
