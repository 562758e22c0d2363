"""The compiled roundings from float64: float64 bit patterns rounded once to nearest, ties to even,
value by value in one loop, onto the grid of float16, bfloat16 or a one-byte element format (fp8,
fp6, fp4), as that format's bit patterns.

The numpy path (``fpsim/formats/round.py``) rounds float64 in several passes: numpy's float64 ->
float16 cast (correct, slow on subnormal results), float32 to nearest with the midpoints redone to
odd for bfloat16, float32 to odd (``_to_odd_f32``), then bfloat16 to odd and the narrowing tables of
``fpsim/formats/kernels.py`` (ml_dtypes' casts) for the element formats.  Each of these is the exact
value rounded once to nearest onto the target's grid (rounding to odd first, with at least two
extra bits, is innocuous: Boldo & Melquiond, 2008), overflow and all, so the loop here computes that
rounding directly from the float64 pattern, by the adder trick of ``_round.py`` carried over to
float64: with ``e`` the exponent of |x| clamped to the target's range [emin, emax + 1] and c =
2**(e + 52 - m) (m: the target's mantissa bits), float64's ulp at c is the target's ulp in x's
binade (for |x| below the smallest normal: its subnormal spacing), so the one float64 addition
|x| + c rounds |x| onto the target's grid with ties to even (c is an even number of those ulps),
and the sum's mantissa field, |x| rounded over that ulp, gives the target's code: ((e - emin) << m)
plus it, where a carry steps into the next binade.  No fastmath: every operation is IEEE's, in the
written order; float64 subnormal inputs are exact (they round to 0 here).

NaN inputs are only flagged (the loop returns whether there was one): the wrappers of
``_casts64.py`` hand them to the library casts the numpy path uses, which decide their payload bits.
The kernel takes C-contiguous one-dimensional arrays (the wrappers flatten).
"""

from __future__ import annotations

import numpy as np

from ._exact import jit

__all__ = ["rne_bits64"]

_U64 = np.uint64
_F64 = np.float64
_ABS = _U64(0x7FFFFFFFFFFFFFFF)
_EXP = _U64(0x7FF0000000000000)  # also +inf's pattern
_MANT = _U64(0x000FFFFFFFFFFFFF)


@jit(inline=True)
def _f(bits):
    """A uint64 bit pattern as the float64 it encodes."""
    return _U64(bits).view(_F64)


@jit(inline=True)
def _u(value):
    """A float64's bit pattern."""
    return _F64(value).view(_U64)


@jit(inline=True)
def _clip(v, lo, hi):
    return _U64(min(max(v, lo), hi))


@jit()
def rne_bits64(src, dst, lo, hi, man, bias, top, sign):
    """float64 patterns ``src`` rounded to nearest even onto a format of ``man`` mantissa bits whose
    normal binades are 2**emin .. 2**emax, its codes into ``dst`` (uint16 or uint8).  ``lo`` and
    ``hi``: the float64 patterns of 2**emin and 2**(emax + 1); ``bias``: (emin + 1075 - man) << man.
    With a = min(|x|, 2**(emax + 1)) and c = 2**(e + 52 - man), e the exponent of clip(|x|,
    2**emin, 2**(emax + 1)), the float64 sum a + c rounds a onto the format's grid, and the code is
    (c's exponent field << man) - bias + the sum's mantissa field = ((e - emin) << man) + a rounded
    over the ulp.  Codes above ``top`` become ``top``: the code after the largest finite value's (inf,
    or e4m3fn's NaN: what overflow gives), or with saturation the largest finite value's; +-inf
    inputs too.  A negative x's code is or-ed with ``sign`` (-0 stays -0).  Returns whether src
    holds a NaN (its code here is garbage: the caller redoes those)."""
    nan = False
    shift = _U64(_U64(52) - _U64(man))
    add = _U64(shift << _U64(52))
    for i in range(src.shape[0]):
        b = src[i]
        a = _U64(b & _ABS)
        nan |= a > _EXP
        a = _U64(min(a, hi))
        c = _U64(_U64(_clip(a, lo, hi) & _EXP) + add)
        s = _u(_F64(_f(a) + _f(c)))  # THE rounding: onto the format's grid, ties to even
        q = _U64(_U64(_U64(c >> shift) - bias) + _U64(s & _MANT))
        dst[i] = _U64(_U64(min(q, top)) | (sign if b > _ABS else _U64(0)))
    return nan
