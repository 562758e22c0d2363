"""numba kernels shared by the compiled passes: the decision of one interval (as ``checked._ends``
makes it) and an exact sum correctly rounded to float32 (as ``exactsum._fsum_row`` makes it).

The exact sum is Shewchuk's, as CPython's ``math.fsum`` computes it: the running sum is kept as
non-overlapping float64 partials (:func:`grow`, every step an exact TwoSum), and
:func:`fsum_partials` rounds them correctly to float64 - including fsum's correction of a sum
that lands on a float64 halfway point.  :func:`round_partials` then rounds to float32 as
``exactsum._fsum_row`` does: a float64 s that is not a float32 halfway point rounds as the exact
sum does; one that is is decided by the sign of the exact remainder, the fsum of the partials
and -s.  Nothing here uses fastmath: every operation is IEEE's, in the written order.
"""

from __future__ import annotations

import math

import numba
import numpy as np

__all__ = ["jit", "CAPACITY", "decide_row", "two_sum_step", "round_compensated", "grow", "fsum_partials", "round_partials"]

CAPACITY = 1280  # partials: each owns a bit position; the terms here (float32 values and their products) span < 700


def jit(fastmath=False, inline=False):
    """numba.njit(cache=True, nogil=True), or without the cache where numba finds no writable place
    for it (a read-only install with no user cache directory): compiled in each process, never an
    error.  ``inline``: inlined into its callers by numba (a small function with many arrays:
    passing them costs more than the work)."""
    opts = {"nogil": True, "fastmath": fastmath, "inline": "always" if inline else "never"}

    def deco(f):
        try:
            return numba.njit(cache=True, **opts)(f)
        except RuntimeError:  # numba: "cannot cache function ...: no locator available"
            return numba.njit(cache=False, **opts)(f)
    return deco


_F32_MAX = float(np.finfo(np.float32).max)
_F32_TOP = 2.0**128


@jit()
def decide_row(y, w, out, flag):
    """out[j] = float32(y[j] - w[j]) and flag[j] = whether float32(y[j] + w[j]) differs in its bits
    or is NaN (``checked._ends``: -0 and +0 differ); returns how many are flagged."""
    cnt = 0
    for j in range(y.shape[0]):
        hi = np.float32(y[j] + w[j])
        lo = np.float32(y[j] - w[j])
        out[j] = lo
        bad = not ((hi == lo) & (math.copysign(1.0, hi) == math.copysign(1.0, lo)))
        flag[j] = bad
        cnt += bad
    return cnt


@jit(inline=True)
def two_sum_step(s, comp, eabs, x):
    """One step of a compensated float64 sum: ``s + x`` (TwoSum, Knuth), its rounding error added
    to ``comp`` and its magnitude to ``eabs`` (what :func:`round_compensated` reads); returns the
    three.  Inlined where it is called, with no reassociation (no fastmath)."""
    h = s + x
    bb = h - s
    e = (s - (h - bb)) + (x - bb)
    return h, comp + e, eabs + abs(e)


@jit()
def round_compensated(s, comp, eabs, n):
    """(float32 rounding, decided?) of an exact sum known as s + comp within the bound of a float64
    sum of n TwoSum errors of total magnitude eabs: s the float64 running sum, comp the float64
    sum of its TwoSum errors.  Where eabs is 0 every step was exact; else decided where the
    interval, widened as ``checked.round_within`` asks, rounds to one float32 number."""
    h = s + comp
    bb = h - s
    tail = (s - (h - bb)) + (comp - bb)  # h + tail = s + comp exactly
    if eabs == 0.0:  # s is the exact sum (comp = 0): one rounding (a zero is +0: x + -x = +0)
        return np.float32(h), True
    beta = eabs * (2.0 * n * 2.0**-53) * (1 + 2.0**-30)  # >= gamma_n * sum|e| (n u < 2**-20 here)
    w = max(2.0 * (abs(tail) + beta), 2.0**-51 * abs(h))  # round_within decides within w / 2
    hi = np.float32(h + w)
    lo = np.float32(h - w)
    return lo, (hi == lo) & (math.copysign(1.0, hi) == math.copysign(1.0, lo))


@jit()
def grow(p, n, x):
    """Add float64 x to the n non-overlapping partials p[:n] exactly (``math.fsum``'s inner loop);
    returns the new count."""
    i = 0
    for j in range(n):
        y = p[j]
        if abs(x) < abs(y):
            x, y = y, x
        hi = x + y
        lo = y - (hi - x)
        if lo != 0.0:
            p[i] = lo
            i += 1
        x = hi
    if x != 0.0:
        p[i] = x
        i += 1
    return i


@jit()
def fsum_partials(p, n):
    """The sum of the partials p[:n], correctly rounded to float64 (``math.fsum``'s last step)."""
    if n == 0:
        return 0.0
    n -= 1
    hi = p[n]
    lo = 0.0
    while n > 0:
        x = hi
        n -= 1
        y = p[n]
        hi = x + y
        yr = hi - x
        lo = y - yr
        if lo != 0.0:
            break
    if n > 0 and ((lo < 0.0 and p[n - 1] < 0.0) or (lo > 0.0 and p[n - 1] > 0.0)):
        y = lo * 2.0
        x = hi + y
        yr = x - hi
        if y == yr:
            hi = x
    return hi


@jit()
def _next32(r, up):
    """The float32 number next to float32 r, as float64; past the largest finite one +-2**128."""
    if up:
        return _F32_TOP if r == _F32_MAX else np.float64(np.nextafter(r, np.float32(np.inf)))
    return -_F32_TOP if r == -_F32_MAX else np.float64(np.nextafter(r, np.float32(-np.inf)))


@jit()
def round_partials(p, n, tmp):
    """float32 of the exact sum of the partials p[:n] (finite), to nearest, ties to even; an exact
    zero is +0.  ``tmp``: scratch of CAPACITY float64 (the remainder's partials)."""
    s = fsum_partials(p, n)
    if s == 0.0:
        return np.float32(0.0)
    r = np.float32(s)
    rd = np.float64(r)
    if rd == s:
        return r
    if math.isinf(rd):
        lo, hi = (_F32_MAX, _F32_TOP) if s > 0 else (-_F32_TOP, -_F32_MAX)
    else:
        other = _next32(r, s > rd)
        lo, hi = (other, rd) if s < rd else (rd, other)
    if s != (lo + hi) / 2:
        return r
    for i in range(n):
        tmp[i] = p[i]
    m = grow(tmp, n, -s)
    rest = fsum_partials(tmp, m)  # correctly rounded, so its sign is the exact remainder's
    if rest == 0.0:
        return r  # a true tie: the conversion rounded it to even (2**128, i.e. inf, counts as even)
    return np.float32(hi if rest > 0 else lo)
