"""Sums that no library's order can change: the exact sum of float32 values, rounded once.

numpy's ``sum`` adds in an order of its own (pairwise blocks for a contiguous axis, one element
at a time along a strided one, buffered chunks for several axes), and float32 addition is not
associative, so the bits of a float32 sum are numpy's choice.  fpsim defines a reduction's
result instead as the EXACT sum of the values, rounded once to float32 (to nearest, ties to
even; an exact zero is +0).  It is computed fast: the float64 sum of the float32 values is
within gamma_(n-1) * sum|x| of the exact sum whatever the order (``checked.gamma``); where that
interval rounds to one float32 number, that is the answer; the few sums it leaves open are
summed exactly (``exactsum.round_rows``).  With ``grid`` - what is known of the values' format,
(mantissa bits, a power of two that divides every value), as 2**-24 divides every float16 - a
float64 sum whose sum|x| stays below 2**53 * that power is exact in any order, and nothing needs
checking.

inf and NaN follow IEEE arithmetic, which no order changes: NaN if any value is NaN or both
+inf and -inf occur, else the infinity (NaN comes out as the one positive quiet NaN).
"""

from __future__ import annotations

import math

import numpy as np

from . import compiled
from .checked import gamma, round_within
from .exactsum import round_rows

__all__ = ["sum_f32", "mean_f32", "reduced_axes", "fsum64", "mean64"]


def reduced_axes(axis, ndim: int) -> tuple:
    """``axis`` (None, an int or a tuple, negative allowed) as a sorted tuple of axes."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (tuple, list)):
        return tuple(sorted(a % ndim if ndim else a for a in axis))
    return (axis % ndim if ndim else axis,)


def _consecutive(axes: tuple) -> bool:
    return axes[-1] - axes[0] + 1 == len(axes)


def sum_f32(x, axis=None, keepdims: bool = False, grid=None) -> np.ndarray:
    """The exact sum of float32 (or narrower) ``x`` over ``axis``, rounded once to float32.

    ``axis``/``keepdims`` as numpy's.  Returns a float32 array (0-d for a full reduction, as
    ``np.float32`` scalars are awkward to write into).  ``grid``: optional (mantissa bits,
    quantum) of the format the values are in, as :func:`fpsim.numerics.matmul_f32` takes it; only
    the speed depends on it (see the module docstring)."""
    x = np.asarray(x)
    axes = reduced_axes(axis, x.ndim)
    n = 1
    for a in axes:
        n *= x.shape[a]
    fast = compiled.kernels() if n > 1 and x.dtype == np.float32 and x.size and _consecutive(axes) else None
    if fast is not None:
        return fast.sum(x, axes, keepdims, grid, n)
    x64 = x.astype(np.float64)
    s = x64.sum(axis=axes, keepdims=keepdims)
    if n <= 1:  # one value (or none: +0) is its own sum: exact
        return np.asarray((s + 0.0).astype(np.float32))
    t = np.abs(x64, out=x64).sum(axis=axes, keepdims=keepdims)  # sum |x|, for the bound
    del x64
    with np.errstate(over="ignore", invalid="ignore"):
        if grid is not None:
            exact = t < 2.0**53 * grid[1]
        else:
            exact = None
        out, ok = round_within(s, t * (2 * gamma(n - 1) * (1 + 2.0**-30)))  # round_within decides within w / 2
    if exact is not None:
        ok |= exact & np.isfinite(s)
        out = np.where(exact & np.isfinite(s), (s + 0.0).astype(np.float32), out) if exact.any() else out
    if not ok.all():
        _settle(x, axes, keepdims, s, out, ~ok)
    return np.asarray(out, dtype=np.float32)


def _settle(x, axes, keepdims, s, out, todo) -> None:
    """The sums ``round_within`` left open, exactly; inf and NaN by IEEE's rules."""
    lead = [i for i in range(x.ndim) if i not in axes]
    rows = np.moveaxis(x, axes, tuple(range(x.ndim - len(axes), x.ndim))).reshape(
        tuple(x.shape[i] for i in lead) + (-1,))
    flat_out = out.reshape(-1)
    flat_s = s.reshape(-1)
    flat_todo = np.flatnonzero(todo.reshape(-1))
    rows = rows.reshape(-1, rows.shape[-1])
    bad = ~np.isfinite(flat_s[flat_todo])
    if bad.any():  # NaN or inf: the same whatever the order (only NaN's sign varies: made +NaN)
        b = flat_todo[bad]
        v = flat_s[b].astype(np.float32)
        v[np.isnan(v)] = np.float32(np.nan)
        flat_out[b] = v
    fin = flat_todo[~bad]
    if fin.size:
        flat_out[fin] = round_rows(rows[fin].astype(np.float64))


def mean_f32(x, axis=None, keepdims: bool = False, grid=None) -> np.ndarray:
    """:func:`sum_f32` divided by the number of values in float32 (two roundings: the sum, then
    the quotient), as a float32 kernel's mean is; the mean of nothing is NaN (0 / 0)."""
    x = np.asarray(x)
    axes = reduced_axes(axis, x.ndim)
    n = 1
    for a in axes:
        n *= x.shape[a]
    s = sum_f32(x, axis, keepdims, grid)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(s / np.float32(n), dtype=np.float32)


def fsum64(x, axis=None) -> np.ndarray | float:
    """The exact sum of float64 (or narrower) values, correctly rounded to float64
    (``math.fsum``, Shewchuk's exact summation): for the statistics fpsim reports (an error's
    mean square, a kurtosis), where numpy's float64 ``sum`` would leave the last bits to its own
    order.  ``axis=None``: a float; an int axis: a float64 array.  inf and NaN as ``math.fsum``
    gives them, except that +inf meeting -inf is NaN (not an error).  Where the compiled path is on
    and there are at least ``compiled.ROUNDING_MIN_SIZE`` values, the same partials are kept by a
    numba loop (``compiled._sums``) instead of a Python list: the same floats, 10-20x faster."""
    x = np.asarray(x, dtype=np.float64)
    rows = x.reshape(1, -1) if axis is None else np.moveaxis(x, axis, -1)
    flat = rows.reshape(-1, rows.shape[-1])
    fast = compiled.kernels() if x.size >= compiled.ROUNDING_MIN_SIZE and flat.shape[1] else None
    if fast is None:
        sums = np.array([_fsum(r) for r in flat], np.float64)
    else:  # the same floats, 10-20x faster (a sum correctly rounded is one float whatever computes it)
        sums, left = fast.fsum64(flat)
        for i in np.flatnonzero(left):
            sums[i] = _fsum(flat[i])
    return float(sums[0]) if axis is None else sums.reshape(rows.shape[:-1])


def _fsum(v: np.ndarray) -> float:
    fin = np.isfinite(v)
    if not fin.all():
        bad = v[~fin]
        if np.isnan(bad).any() or (bad > 0).any() and (bad < 0).any():
            return math.nan
        return float(bad[0])
    return math.fsum(v.tolist())


def mean64(x, axis=None) -> np.ndarray | float:
    """:func:`fsum64` divided by the number of values (NaN for none)."""
    x = np.asarray(x, dtype=np.float64)
    n = x.size if axis is None else x.shape[axis]
    s = fsum64(x, axis)
    return s / n if n else (math.nan if axis is None else np.full(np.shape(s), np.nan))
