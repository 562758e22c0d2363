"""The compiled path of the element roundings and widenings of ``fpsim/formats/kernels.py`` and
``fp8kernels.py``: each numpy kernel's steps, value by value, in one loop over memory.

The numpy kernels round by integer operations on the float32 bit patterns and one float32 addition
(the adder rounds onto the narrow format's grid, ties to even); numpy cannot fuse them, so each
step is a pass over the array.  Here each loop does the same operations on one value at a time:
the same integer steps (wrapped to 32 bits where numpy's uint32 arithmetic wraps), the same float32
additions and multiplications, in the written order (no fastmath: nothing reassociated or
contracted), so the results are the same bits.  The tables are the numpy path's own
(``widening_table``, the fp8 narrowing tables), passed in.  NaN inputs whose result bits numpy's or
ml_dtypes' cast decides (its payload) are only flagged here; the wrappers in ``__init__.py`` hand
those few to the same cast the numpy path uses.

Every kernel takes C-contiguous one-dimensional arrays (the wrappers flatten).
"""

from __future__ import annotations

import numpy as np

from ._exact import jit

__all__ = ["f16_bits", "snap16", "widen16", "table_widen", "narrow", "bf16_odd", "bf16_bits", "fp8_scaled"]

_U32 = np.uint32
_F32 = np.float32
_ABS = _U32(0x7FFFFFFF)
_EXP = _U32(0x7F800000)
_SIGN = _U32(0x80000000)
_LOW16 = _U32(0xFFFF)
_F16_TINY = _U32(0x38800000)  # 2**-14: float16's smallest normal
_F16_INF = _U32(0x47800000)  # 2**16
_F16_BIAS_ADD = _U32((13 << 23) + 0x800)  # kernels._BIAS_ADD
_SNAP_LO = _U32(113 << 23)
_SNAP_HI = _U32(143 << 23)
_SNAP_BIAS = _U32(13 << 23)
_UP = _F32(2.0**112)
_DOWN = _F32(2.0**-112)


@jit(inline=True)
def _f(bits):
    """A uint32 bit pattern as the float32 it encodes."""
    return _U32(bits).view(_F32)


@jit(inline=True)
def _u(value):
    """A float32's bit pattern."""
    return _F32(value).view(_U32)


@jit(inline=True)
def _clip(v, lo, hi):
    return _U32(min(max(v, lo), hi))


@jit()
def f16_bits(src, dst):
    """``kernels._f32_to_f16_bits`` on float32 patterns ``src`` into float16 patterns ``dst``;
    returns whether src holds a NaN (its result here is inf: the caller redoes those)."""
    nan = False
    for i in range(src.shape[0]):
        b = src[i]
        a = _U32(b & _ABS)
        nan |= a > _EXP
        c = _U32(_U32(_clip(a, _F16_TINY, _F16_INF) & _EXP) + _F16_BIAS_ADD)
        a = _clip(a, _U32(0), _F16_INF)
        s = _u(_F32(_f(a) + _f(c)))  # THE rounding: onto float16's grid, ties to even
        m = _U32(_U32(c >> _U32(13)) + s) | _U32(_U32(b >> _U32(16)) & _U32(0x8000))
        dst[i] = np.uint16(m & _LOW16)
    return nan


@jit()
def snap16(src, dst):
    """``kernels.snap_f16``: float32 patterns ``src`` onto float16's grid, as float32 patterns in
    ``dst``.  The overflow scaling (times 2**112, times 2**-112) runs on every value, where the
    numpy kernel runs it on the chunks holding a binade from 2**15 up: on the others it is exact
    (|result| < 2**16, so the product is finite and exact, and scaling back restores it)."""
    for i in range(src.shape[0]):
        bits = src[i]
        a = _U32(bits & _ABS)
        b = _U32(_clip(_U32(bits & _EXP), _SNAP_LO, _SNAP_HI) + _SNAP_BIAS)
        bf = _f(b)
        r = _F32(_f(a) + bf)  # THE rounding
        r = _F32(r - bf)
        r = _F32(r * _UP)
        r = _F32(r * _DOWN)
        dst[i] = _U32(_u(r) | _U32(bits & _SIGN))


@jit()
def widen16(src, dst, scale, table, scaled):
    """``kernels.f16_to_f32`` (``scaled`` False) and ``kernels.f16_to_f32_scaled``: float16 patterns
    ``src`` (int16) widened exactly into float32 ``dst`` (``kernels._widen_bits``: sign-extended,
    shifted and masked, the float32 2**112 times too small times 2**112), then, where ``scaled``,
    times float32 ``scale``, rounded once.  The infs and NaNs (exponent 31) from ``table`` (times
    ``scale``), in a second loop over the few there are.  Returns whether there were any."""
    special = False
    for i in range(src.shape[0]):
        h = src[i]
        special |= (_U32(np.uint16(h)) & _U32(0x7C00)) == _U32(0x7C00)
        v = _F32(_f(_U32(_U32(np.int32(h) << 13) & _U32(0x8FFFFFFF))) * _UP)
        dst[i] = _F32(v * scale) if scaled else v
    if special:
        for i in range(src.shape[0]):
            u = _U32(np.uint16(src[i]))
            if (u & _U32(0x7C00)) == _U32(0x7C00):
                dst[i] = _F32(table[u] * scale) if scaled else table[u]
    return special


@jit()
def table_widen(codes, table, dst):
    """dst = table[codes] (the one-byte formats' widening, ``kernels.fp8_to_f32``)."""
    for i in range(codes.shape[0]):
        dst[i] = table[codes[i]]


@jit(inline=True)
def _odd(b):
    """The top 16 bits of pattern b, the lowest or-ed with the 16 cut off: b rounded to odd at
    bfloat16's precision (``kernels.bf16_odd_patterns``)."""
    return _U32(_U32(b >> _U32(16)) | _U32(min(_U32(b & _LOW16), _U32(1))))


@jit()
def bf16_odd(src, dst):
    """``kernels.bf16_odd_patterns`` of float32 patterns ``src`` into uint32 ``dst``."""
    for i in range(src.shape[0]):
        dst[i] = _odd(src[i])


@jit()
def narrow(src, table, dst):
    """``kernels.narrow_cast``: float32 patterns ``src`` rounded to odd onto bfloat16, then the
    narrowing ``table`` (one byte for each bfloat16 pattern) into ``dst``."""
    for i in range(src.shape[0]):
        dst[i] = table[_odd(src[i])]


@jit()
def bf16_bits(src, dst):
    """float32 patterns ``src`` rounded to nearest even onto bfloat16 (whose numbers are the float32
    patterns with 16 low zero bits, subnormals included): the pattern plus 0x7FFF plus the last
    kept bit, cut - a carry steps into the next binade, and to inf past the largest.  ``dst``: the
    bfloat16 patterns.  Returns whether src holds a NaN (left to the caller's cast)."""
    nan = False
    for i in range(src.shape[0]):
        b = src[i]
        nan |= _U32(b & _ABS) > _EXP
        r = _U32(_U32(b + _U32(0x7FFF)) + _U32(_U32(b >> _U32(16)) & _U32(1)))
        dst[i] = np.uint16(r >> _U32(16))
    return nan


@jit()
def fp8_scaled(x, s, lo, up, maxpat, sh, offset, half, saturate, exact_zeros, out32, out8, codes):
    """``fp8kernels.scaled_fp8`` (its ``_chunk`` for the whole array, the byte's offset taken off
    here): float32 ``x`` times float32 ``s`` rounded onto the fp8 grid (the constants of
    ``fp8kernels._constants``), the values' patterns into ``out32``, the bytes into ``out8``
    where ``codes``.  Returns the flushes (non-zero x become +-0)."""
    flushed = 0
    zeros = 0
    for i in range(x.shape[0]):
        y = _u(_F32(x[i] * s))  # y, rounded in float32
        sg = _U32(y & _SIGN)
        a = _U32(y & _ABS)
        if saturate:
            a = _U32(min(a, maxpat))
        if exact_zeros:
            flushed += _U32(a - _U32(1)) < half  # a zero wraps to the top
        else:
            flushed += a <= half
            zeros += x[i] == 0
        b = _U32(_clip(_U32(a & _EXP), lo, _EXP) + up)  # 2**(e + 23 - man)
        bf = _f(b)
        t = _F32(_f(a) + bf)  # THE rounding: onto fp8's grid, ties to even
        out32[i] = _U32(_u(_F32(t - bf)) | sg)
        if codes:
            byte = _U32(_U32(_u(t) + _U32(b >> sh)) + _U32(sg >> _U32(24)))
            out8[i] = np.uint8(_U32(byte - offset) & _U32(0xFF))
    return flushed - zeros
