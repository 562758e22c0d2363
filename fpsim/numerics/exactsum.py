"""Exact sums of float64 terms, correctly rounded to float32: the slow, sure path.

:func:`round_rows` takes rows of float64 terms that are exact (products of two float32 numbers
are: 24 + 24 significand bits fit in float64's 53) and returns each row's EXACT sum rounded once
to float32, to nearest with ties to even.  The fast paths in this package (a float64 BLAS
product or numpy sum, checked against an error bound) hand it only the few results they cannot
decide - sums that land on, or within the bound of, a point halfway between two float32 numbers.

How, without a wider type: Knuth's TwoSum splits a + b into s = fl(a + b) and the exact error
e = (a + b) - s, both float64.  A pairwise tree of TwoSums turns a row into one float64 s1 and
the row of its errors, whose exact sum is the rest; a second tree on the errors gives s2 and the
second errors (about 2**-53 times smaller again).  Where the second errors are all zero the sum
is exactly s1 + s2, and two float64 terms round to float32 exactly (:func:`_round_two`).
Otherwise the second errors bound what is left, and the rounding is decided if that bound keeps
the sum away from a halfway point; the rare row still open goes to ``math.fsum`` (Shewchuk's
exact summation, correctly rounded to float64), and where that lands exactly on a halfway
point, the sign of the exact remainder decides.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["round_rows", "round_pairs"]

_F32_MAX = float(np.finfo(np.float32).max)
_F32_TOP = 2.0**128  # the number one ulp above float32's largest: where the overflow midpoint lies
_THRESHOLD = _F32_TOP - 2.0**103  # halfway between the largest float32 and 2**128: from here up, inf
_ROWS_CHUNK = 2**21  # terms per pass: the trees' arrays of one chunk stay a few MB
_FSUM_ROWS = 16  # up to this many rows, math.fsum row by row


def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _tree(x):
    """(a float64 tree sum of each row, the row of every TwoSum error made on the way): exactly,
    row sum of x = sum + sum of the errors.  (Which tree does not matter: every step is exact
    bookkeeping.  Halves, not pairs: contiguous slices are the fast ones.)"""
    errs = []
    while x.shape[1] > 1:
        h = x.shape[1] // 2
        s, e = _two_sum(x[:, :h], x[:, h:2 * h])
        errs.append(e)
        x = np.concatenate([s, x[:, 2 * h:]], axis=1) if x.shape[1] % 2 else s
    s = x[:, 0] if x.shape[1] else np.zeros(x.shape[0])
    return s, (np.concatenate(errs, axis=1) if errs else np.zeros((x.shape[0], 1)))


def _neighbours(r):
    """The float32 numbers just below and above float32 r, as float64; beyond the largest finite
    float32 the next number up is 2**128 (so that the overflow midpoint comes out right)."""
    up = np.nextafter(r, np.float32(np.inf)).astype(np.float64)
    dn = np.nextafter(r, np.float32(-np.inf)).astype(np.float64)
    up[r == np.float32(_F32_MAX)] = _F32_TOP
    dn[r == np.float32(-_F32_MAX)] = -_F32_TOP
    return dn, up


def _is_even(r):
    return (r.view(np.uint32) & 1) == 0


def round_pairs(h, tail):
    """float32 of the exact sums h + tail of float64 pairs with h = fl(h + tail) (a TwoSum's output),
    to nearest, ties to even.  If h is not halfway between two float32 numbers, h + tail rounds as
    h does (|tail| <= ulp(h) / 2, and a halfway point other than h is a float64 at least that far
    from h); if it is, the sign of tail says which side, and tail = 0 is a true tie."""
    with np.errstate(over="ignore"):
        r = h.astype(np.float32)
    rd = r.astype(np.float64)
    out = r.copy()
    # h at the overflow threshold rounds (a tie, to "even" 2**128) to inf: back to the largest
    # finite float32 if tail pulls the sum below it
    at = (np.abs(h) == _THRESHOLD) & (tail * h < 0)
    out[at] = np.copysign(np.float32(_F32_MAX), h[at]).astype(np.float32)
    off = (rd != h) & np.isfinite(rd)  # h itself is not a float32: maybe a halfway point
    if off.any():
        idx = np.flatnonzero(off)
        hh, rdi = h[idx], rd[idx]
        dn, up = _neighbours(r[idx])
        other = np.where(hh > rdi, up, dn)
        on = hh == (rdi + other) / 2  # exact: the mean of two neighbours has 25 bits
        if on.any():
            j = idx[on]
            # past the midpoint, away from r: the other neighbour; a tie (tail = 0) was rounded to
            # even by astype already
            away = (tail[j] > 0) & (h[j] > rd[j]) | (tail[j] < 0) & (h[j] < rd[j])
            with np.errstate(over="ignore"):
                out[j] = np.where(away, other[on].astype(np.float32), r[j])
    return out


def _round_bounded(h, tail, beta):
    """(float32 rounding, decided) for sums known to lie in [h + tail - beta, h + tail + beta], with
    (h, tail) a TwoSum pair.  Decided where no halfway point, nor the overflow threshold, lies in
    that interval."""
    with np.errstate(over="ignore"):
        r = h.astype(np.float32)
    rd = r.astype(np.float64)
    dn, up = _neighbours(r)
    fin = np.isfinite(rd)
    m_up = np.where(fin, (rd + up) / 2, np.inf)
    m_dn = np.where(fin, (rd + dn) / 2, -np.inf)
    # r = +-inf: the sum must stay beyond the overflow midpoint
    m_dn = np.where(r == np.inf, _THRESHOLD, m_dn)
    m_up = np.where(r == -np.inf, -_THRESHOLD, m_up)
    # the distances to the halfway points, each rounded once (a relative error of at most 2**-53)
    d_up = m_up - h
    d_dn = h - m_dn
    slack = (beta + np.abs(tail)) * (1 + 2.0**-50)
    ok_up = (d_up > slack) | (np.isinf(m_up) & (m_up > 0))
    ok_dn = (d_dn > slack) | (np.isinf(m_dn) & (m_dn < 0))
    return r, ok_up & ok_dn & (r != 0)  # a zero's sign needs the sum's: left to fsum


def _to_f32(v: float) -> np.float32:
    with np.errstate(over="ignore"):
        return np.float64(v).astype(np.float32)


def _fsum_row(terms: np.ndarray) -> np.float32:
    """The exact sum of one row, correctly rounded: ``math.fsum`` gives it correctly rounded to
    float64 (s); s and the exact sum lie on the same side of every float64 number, so they round
    alike to float32 unless s is itself a halfway point - then the exact remainder's sign decides."""
    vals = terms.tolist()
    s = math.fsum(vals)
    if s == 0:
        return np.float32(0.0)  # fsum's 0 is exact: +0 (a sum that only rounds to 0 is not 0 in float64)
    r = _to_f32(s)
    rd = float(r)
    if rd == s:
        return r
    if math.isinf(rd):
        lo, hi = (_F32_MAX, _F32_TOP) if s > 0 else (-_F32_TOP, -_F32_MAX)
    else:
        dn, up = (float(v[0]) for v in _neighbours(np.array([r], np.float32)))
        lo, hi = (dn, rd) if s < rd else (rd, up)
    if s != (lo + hi) / 2:
        return r
    rest = math.fsum(vals + [-s])  # correctly rounded, so its sign is the exact remainder's
    if rest == 0:
        return r  # a true tie: astype rounded it to even (2**128, i.e. inf, counts as even)
    return _to_f32(hi if rest > 0 else lo)


def round_rows(terms: np.ndarray) -> np.ndarray:
    """float32 of each row's exact sum (``terms``: (n, K) float64, every entry finite and exact),
    to nearest with ties to even; an exact 0 is +0.  Vectorised over rows; see the module
    docstring for how."""
    terms = np.asarray(terms, dtype=np.float64)
    n, k = terms.shape
    out = np.empty(n, np.float32)
    if n == 0:
        return out
    if k == 0:
        out[:] = 0
        return out
    if n <= _FSUM_ROWS:  # a few rows: one C loop each beats the trees' fixed cost of numpy calls
        for i in range(n):
            out[i] = _fsum_row(terms[i])
        return out
    step = max(1, _ROWS_CHUNK // max(k, 1))
    for lo in range(0, n, step):
        t = terms[lo:lo + step]
        out[lo:lo + step] = _round_chunk(t)
    return out


def _round_chunk(t):
    s1, e1 = _tree(t)
    s2, e2 = _tree(e1)
    h, tail = _two_sum(s1, s2)
    exact = ~(e2 != 0).any(axis=1)
    out = np.empty(t.shape[0], np.float32)
    if exact.any():
        out[exact] = round_pairs(h[exact], tail[exact])
    out[exact & (h == 0)] = 0  # an exact zero has no sign: +0 (a tiny negative sum rounds to -0)
    rest = ~exact
    if rest.any():
        idx = np.flatnonzero(rest)
        beta = np.abs(e2[idx]).sum(axis=1) * (1 + 2.0**-30)
        r, ok = _round_bounded(h[idx], tail[idx], beta)
        out[idx[ok]] = r[ok]
        for i in idx[~ok]:
            out[i] = _fsum_row(t[i])
    return out
