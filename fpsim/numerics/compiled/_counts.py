"""The compiled path of the monitor's counts (``fpsim/monitor.py``): what one rounding of float32
values into a format of one or two bytes did, counted in one loop over the exact values and the
stored bit patterns.

The numpy path widens the stored values and makes a pass for each comparison (about 25, or a few
in its short count, which steps aside whenever a value reaches max, inf or NaN).  Here each value
is widened by the format's own widening table (the numpy path's, indexed by the pattern: exact,
NaN payloads as the library reads them) and compared once, in float32, as the numpy path compares:
the same tests, so the same counts, whatever the values (no short count to step aside from).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ._exact import jit

__all__ = ["rounding_counts", "subnormal_count", "stored_subnormal_count"]

_U32 = np.uint32
_EXP = _U32(0x7F800000)
_BF16 = np.dtype(ml_dtypes.bfloat16)
_F16_TINY = np.float32(2.0**-14)  # float16's smallest normal


@jit()
def _count(x, codes, table, tiny, fmax, threshold, has_inf, out):
    """Into int64 ``out``: inexact, underflow, subnormal, overflow, inf, nan, nan_in of float32
    ``x`` stored as ``codes`` (uint8 / uint16 patterns, widened by ``table``), the numpy path's
    tests value by value (``monitor._event_counts``: NaN != NaN, an exact NaN kept NaN is exact; an
    overflow is a finite x stored inf or NaN, or stored as max from beyond the ``threshold`` -
    from it on where the format has inf, past it where it has none)."""
    ne = under = sub = over = inf = nan = nan_in = 0
    for i in range(x.shape[0]):
        v = x[i]
        r = table[codes[i]]
        a = abs(r)
        nan_x = v != v
        nan_r = r != r
        fin_x = not nan_x and abs(v) != np.inf
        fin_r = not nan_r and a != np.inf
        ne += (r != v) and not (nan_x and nan_r)
        under += a == 0 and v != 0
        sub += a > 0 and a < tiny
        beyond = abs(v) >= threshold if has_inf else abs(v) > threshold
        over += fin_x and (not fin_r or (a == fmax and beyond))
        inf += a == np.inf
        nan += nan_r
        nan_in += nan_x
    out[0], out[1], out[2], out[3], out[4], out[5], out[6] = ne, under, sub, over, inf, nan, nan_in


@jit(inline=True)
def _widen_f16(h):
    """float16 pattern h's value (not inf or NaN), exactly, with no float32 subnormal on the way
    (an x86 core takes a slow path for each, and a flush-to-zero mode would change it): the fields
    moved into float32's, the exponent rebiased by 112; a subnormal one (exponent field 0) rebiased
    by 113 instead, which makes it 2**-14 * (1 + m / 1024), minus 2**-14 - exact (Sterbenz), a
    normal float32.  One subtraction in place of a conversion and a product: about 30% less of the
    count's time (a 200,704-value count 126 -> 86 us, timed in one process)."""
    u = _U32(h)
    sign = _U32(_U32(u & _U32(0x8000)) << _U32(16))
    m = _U32(_U32(u & _U32(0x7FFF)) << _U32(13))
    small = _U32(np.float32(_U32(m + _U32(113 << 23)).view(np.float32) - _F16_TINY).view(_U32))
    return _U32(sign | (_U32(m + _U32(112 << 23)) if u & _U32(0x7C00) else small)).view(np.float32)


@jit(inline=True)
def _widen_bf16(h):
    """bfloat16 pattern h's value: the pattern shifted up."""
    return _U32(_U32(h) << _U32(16)).view(np.float32)


@jit(inline=True)
def _finite16(x, codes, widen, exp16, tiny, fmax, beyond, out):
    """:func:`_count` where no stored value is inf or NaN and every x is finite (then overflow is
    only max stored from ``beyond`` (the threshold, or the float32 above it where a format without
    inf overflows only past it) on, and inf, nan and nan_in are 0), the storage widened by its bit
    steps instead of the table, with no branch, so that the loop vectorises.  Returns False,
    having counted nothing, where that is not so."""
    special = False
    ne = under = sub = over = 0
    for i in range(x.shape[0]):
        v = x[i]
        h = codes[i]
        special |= ((np.float32(v).view(np.uint32) & _EXP) == _EXP) | ((h & exp16) == exp16)
        r = widen(h)
        a = abs(r)
        ne += r != v
        under += (a == 0) & (v != 0)
        sub += (a > 0) & (a < tiny)
        over += (a == fmax) & (abs(v) >= beyond)
    if special:
        return False
    out[0], out[1], out[2], out[3] = ne, under, sub, over
    return True


@jit()
def _finite_f16(x, codes, tiny, fmax, beyond, out):
    return _finite16(x, codes, _widen_f16, np.uint16(0x7C00), tiny, fmax, beyond, out)


@jit()
def _finite_bf16(x, codes, tiny, fmax, beyond, out):
    return _finite16(x, codes, _widen_bf16, np.uint16(0x7F80), tiny, fmax, beyond, out)


@jit()
def _subnormals32(xb, tiny):
    """How many float32 patterns ``xb`` are subnormal in a format whose smallest normal has the
    float32 pattern ``tiny`` (0 < |x| < tiny, on the magnitudes' patterns: |x| - 1 wraps a zero to
    the top), or -1 where one is inf or NaN."""
    special = False
    sub = 0
    for i in range(xb.shape[0]):
        a = _U32(xb[i] & _U32(0x7FFFFFFF))
        special |= a >= _EXP
        sub += _U32(a - _U32(1)) < _U32(tiny - _U32(1))
    return -1 if special else sub


@jit()
def _subnormals16(codes, tiny, exp):
    """How many 16-bit patterns ``codes`` are subnormal (0 < |p| < ``tiny``'s pattern, as
    :func:`_subnormals32`), or -1 where one is inf or NaN (its exponent field ``exp`` all ones)."""
    special = False
    sub = 0
    for i in range(codes.shape[0]):
        a = _U32(codes[i] & np.uint16(0x7FFF))
        special |= a >= exp
        sub += _U32(a - _U32(1)) < _U32(tiny - _U32(1))
    return -1 if special else sub


def stored_subnormal_count(stored: np.ndarray, tiny: int, exp: int) -> int:
    """How many values of float16 / bfloat16 ``stored`` are subnormal, from their patterns (``tiny``:
    the format's smallest normal's, ``exp``: its exponent field's), or -1 where one is inf or NaN
    (``monitor._exact16``: an exact result, one pass)."""
    return int(_subnormals16(np.ascontiguousarray(stored).reshape(-1).view(np.uint16), _U32(tiny), _U32(exp)))


def subnormal_count(x: np.ndarray, tiny) -> int:
    """How many float32 values ``x`` are subnormal in a format of smallest normal ``tiny`` (0 < |x| <
    tiny; a value, or its float32 pattern as a numpy uint32, made once by the caller), or -1 where
    one is inf or NaN (``monitor._unrounded_counts``' one pass)."""
    tb = tiny if type(tiny) is _U32 else _U32(np.float32(tiny).view(_U32))
    return int(_subnormals32(np.ascontiguousarray(x).reshape(-1).view(_U32), tb))


def rounding_counts(x: np.ndarray, stored: np.ndarray, table: np.ndarray, tiny, fmax, threshold,
                    has_inf: bool, beyond) -> list[int]:
    """The monitor's COUNTERS (n, inexact, underflow, subnormal, overflow, inf, nan, nan_in) of
    float32 ``x`` rounded into ``stored`` (a one- or two-byte format's storage, x's shape;
    ``table``: its widening table; ``tiny``, ``fmax``, ``threshold``: the format's smallest
    normal, max and overflow threshold as float32; ``beyond``: the least float32 from which a
    stored max is an overflow - the threshold where the format has inf, the float32 after it where
    not, made once by the caller), as Python ints."""
    xs = np.ascontiguousarray(x).reshape(-1)
    codes = np.ascontiguousarray(stored).reshape(-1).view(np.uint8 if stored.dtype.itemsize == 1 else np.uint16)
    out = np.zeros(7, np.int64)
    tiny, fmax, threshold = np.float32(tiny), np.float32(fmax), np.float32(threshold)
    finite = _finite_f16 if stored.dtype == np.float16 else _finite_bf16 if stored.dtype == _BF16 else None
    if finite is None or not finite(xs, codes, tiny, fmax, np.float32(beyond), out):
        _count(xs, codes, table, tiny, fmax, threshold, bool(has_inf), out)
    return [xs.size, *out.tolist()]

# name -> function, beside the roundings in :func:`fpsim.numerics.compiled.rounding`'s table
COUNTS = {f.__name__: f for f in (rounding_counts, subnormal_count, stored_subnormal_count)}
