"""The compiled path of :func:`fpsim.numerics.sum_f32` (and so of ``mean_f32``): the same definition
as ``sums.py`` - the exact sum rounded once, decided by a float64 sum and its error bound - with
the float32 values read once, and a float64 sum whose order this module fixes, so that its bound
can be tighter than the any-order gamma_(n-1) * sum|x| the numpy path must use.

A contiguous row is summed in blocks of _BLOCK values, each block in eight running sums combined
pairwise, and the block sums one after the other: a summation tree of depth at most
_BLOCK / 8 + 10 + (number of blocks), and a sum over a strided axis likewise in blocks of _BLOCK
rows, so the bound is gamma_depth * sum|x| (Higham: any tree of depth d).  sum|x| itself is only
a bound's ingredient, so it is summed with fastmath (any order, within gamma_n of its value,
which the slack allows for).  Where the interval rounds to one float32 number, that is the
answer (the correctly rounded exact sum, as the numpy path's); the rest - or all, where a grid
makes every float64 sum exact (``sums.sum_f32``'s grid test) - are settled as the numpy path does:
c itself if exact, IEEE's inf / NaN, else the exact sum (a compensated sum where its bound
decides, else Shewchuk's partials; ``_exact``).
"""

from __future__ import annotations

import math

import numpy as np

from ..checked import gamma
from ._exact import CAPACITY, fsum_partials, grow, jit, round_compensated, round_partials, two_sum_step

__all__ = ["fused_sum", "fsum64_rows"]

_BLOCK = 2048  # values (a row) or rows (a strided axis) a block
# float64 partials: non-overlapping, so each owns a bit position from 2**-1074 to 2**1023 (grow needs one more)
_F64_PARTIALS = 2100


@jit(fastmath={"reassoc", "contract"})
def _abs_sum(v):
    """sum |v| in float64, in any order: a bound's ingredient only."""
    t = 0.0
    for i in range(v.shape[0]):
        t += abs(np.float64(v[i]))
    return t


@jit()
def _sum_row(v):
    """The float64 sum of float32 row v in the fixed order of the module docstring."""
    n = np.uint64(v.shape[0])
    total = 0.0
    for b0 in range(np.uint64(0), n, np.uint64(_BLOCK)):
        b1 = min(n, b0 + np.uint64(_BLOCK))
        s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
        for i in range(b0, b1 - (b1 - b0) % np.uint64(8), np.uint64(8)):
            s0 += np.float64(v[i])
            s1 += np.float64(v[i + np.uint64(1)])
            s2 += np.float64(v[i + np.uint64(2)])
            s3 += np.float64(v[i + np.uint64(3)])
            s4 += np.float64(v[i + np.uint64(4)])
            s5 += np.float64(v[i + np.uint64(5)])
            s6 += np.float64(v[i + np.uint64(6)])
            s7 += np.float64(v[i + np.uint64(7)])
        for i in range(b1 - (b1 - b0) % np.uint64(8), b1):
            s0 += np.float64(v[i])
        total += ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
    return total


def _depth_row(n: int) -> int:
    return _BLOCK // 8 + 10 + -(-n // _BLOCK)


@jit()
def _one(s, t, const, gq):
    """(float32 result, still open?) of a sum s with sum of magnitudes t, as ``sums.sum_f32`` decides
    it: exact by the grid's quantum gq (gq < 0: none), else within the bound t * const, else IEEE's
    inf / NaN; open otherwise."""
    if gq >= 0 and t < 2.0**53 * gq and math.isfinite(s):
        return np.float32(s + 0.0), False
    w = t * const
    hi = np.float32(s + w)
    lo = np.float32(s - w)
    if hi == lo and math.copysign(1.0, hi) == math.copysign(1.0, lo):
        return lo, False
    if not math.isfinite(s):
        return (np.float32(np.nan) if math.isnan(s) else np.float32(s)), False
    return lo, True


@jit()
def _exact(v, p, tmp):
    """The exact sum of the float32 values v, rounded once to float32: a compensated sum where its
    bound decides (``_exact.round_compensated``), else Shewchuk's partials."""
    s = comp = eabs = 0.0
    for i in range(v.shape[0]):
        s, comp, eabs = two_sum_step(s, comp, eabs, np.float64(v[i]))
    r, ok = round_compensated(s, comp, eabs, v.shape[0])
    if ok:
        return r
    n = np.int64(0)
    for i in range(v.shape[0]):
        if v[i] != 0:
            n = grow(p, n, np.float64(v[i]))
    return round_partials(p, n, tmp)


@jit()
def sum_last(x, out, const, gq):
    """out[i] = the exact sum of row x[i] (x: (P, R) float32), rounded once (see the module docstring);
    const: the bound's factor for the row's summation depth."""
    p, tmp = np.empty(CAPACITY), np.empty(CAPACITY)
    for i in range(x.shape[0]):
        v, still = _one(_sum_row(x[i]), _abs_sum(x[i]), const, gq)
        out[i] = _exact(x[i], p, tmp) if still else v


@jit()
def _sum_cols(x, i, s, t, blk):
    """s[q], t[q] = float64 sums of x[i, :, q] (blocks of _BLOCK rows, each block's sums added in
    turn) and of their magnitudes."""
    nq = x.shape[2]
    s[:] = 0.0
    t[:] = 0.0
    for r0 in range(0, x.shape[1], _BLOCK):
        blk[:] = 0.0
        for r in range(r0, min(x.shape[1], r0 + _BLOCK)):
            xr = x[i, r]
            for q in range(nq):
                v = np.float64(xr[q])
                blk[q] += v
                t[q] += abs(v)
        for q in range(nq):
            s[q] += blk[q]


def _depth_cols(n: int) -> int:
    return min(n, _BLOCK) + -(-n // _BLOCK)


@jit()
def sum_mid(x, out, const, gq):
    """out[i, q] = the exact sum of x[i, :, q] (x: (P, R, Q) float32), rounded once."""
    nq = x.shape[2]
    p, tmp = np.empty(CAPACITY), np.empty(CAPACITY)
    s, t, blk = np.empty(nq), np.empty(nq), np.empty(nq)
    for i in range(x.shape[0]):
        _sum_cols(x, i, s, t, blk)
        for q in range(nq):
            v, still = _one(s[q], t[q], const, gq)
            out[i, q] = _exact(x[i, :, q], p, tmp) if still else v


def fused_sum(x, axes: tuple, keepdims: bool, grid, n: int) -> np.ndarray:
    """``sums.sum_f32`` for float32 x, ``axes`` consecutive and sorted, n > 1 values a sum, x not empty."""
    gamma(n - 1)  # the numpy path's limit on n, with its error
    x = np.ascontiguousarray(x) if x.flags.writeable else np.array(x, order="C")  # kernels for writable arrays
    lead = math.prod(x.shape[:axes[0]])
    trail = math.prod(x.shape[axes[-1] + 1:])
    out = np.empty((lead, trail), np.float32)
    gq = -1.0 if grid is None else float(grid[1])
    slack = 1 + 4 * gamma(n)  # sum|x| in any order is within gamma_n of its value
    if trail == 1:
        sum_last(x.reshape(lead, n), out.reshape(lead), 2 * gamma(_depth_row(n)) * slack, gq)
    else:
        sum_mid(x.reshape(lead, n, trail), out, 2 * gamma(_depth_cols(n)) * slack, gq)
    if keepdims:
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    else:
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return out.reshape(shape)


@jit()
def _fsum64(x, out, left):
    """out[r] = ``math.fsum(x[r])`` for each row of float64 x (R, n) whose values and running sum
    stay finite (Shewchuk's partials, as fsum keeps them; the sum correctly rounded to float64, so
    the same float as fsum's); the other rows are flagged in ``left`` for the caller, which has
    fsum's own rules for inf and NaN and its OverflowError.  Returns how many were flagged."""
    p = np.empty(_F64_PARTIALS)
    flagged = 0
    for r in range(x.shape[0]):
        n = 0
        ok = True
        for j in range(x.shape[1]):
            v = x[r, j]
            if not math.isfinite(v):
                ok = False
                break
            n = grow(p, n, v)
            if n and not math.isfinite(p[n - 1]):  # the running sum overflowed
                ok = False
                break
        out[r] = fsum_partials(p, n) if ok else 0.0
        left[r] = not ok
        flagged += not ok
    return flagged


def fsum64_rows(rows: np.ndarray):
    """``sums.fsum64`` of each row of float64 ``rows`` (R, n): (float64 sums (R,), bool (R,) rows left to the
    caller: a value or the running sum not finite)."""
    rows = np.ascontiguousarray(rows, dtype=np.float64)
    out = np.empty(rows.shape[0], np.float64)
    left = np.zeros(rows.shape[0], np.bool_)
    _fsum64(rows, out, left)
    return out, left
