"""The fast paths' test: does a float64 approximation with a known error bound decide its float32
rounding?

A float64 result y (a BLAS product, a numpy sum, numpy's float64 exp) differs from the exact
value by at most some bound.  If every real number within the bound of y rounds to the same
float32 number, that number is the correctly rounded exact value - whatever order, kernel or
implementation produced y.  :func:`round_within` tests it by rounding both ends of the interval
(rounding is monotonic: if the ends agree, everything between agrees); the few values it cannot
decide are computed exactly by the caller.  The passes run over chunks of 2**14 values, so that
their temporaries stay in the cache.
"""

from __future__ import annotations

import numpy as np

__all__ = ["round_within", "round_within_outer", "U", "gamma", "CHUNK"]

U = 2.0**-53  # float64's unit roundoff
CHUNK = 2**14  # values a pass: y, its bound and the two rounded ends stay in L2


def gamma(n: int) -> float:
    """Higham's gamma_n = n u / (1 - n u): a sum of n + 1 terms in float64, in ANY order (pairwise,
    blocked, with or without fused multiply-adds), is within gamma_n * sum|terms| of the exact sum."""
    nu = n * U
    if nu >= 0.5:
        raise ValueError(f"a sum of {n} terms is beyond the float64 error bound fpsim uses")
    return nu / (1 - nu)


def _ends(y, w, hi, lo, ok):
    """hi, lo = float32(y + w), float32(y - w) (each rounded to float64 first); ok where the two
    have the same bits and are not NaN (bits, not values: -0 and +0 differ - a sum in [-w, w]
    with w tiny has no sign yet - and the sign of a NaN differs between CPUs)."""
    np.subtract(y, w, out=lo, casting="same_kind")
    np.add(y, w, out=hi, casting="same_kind")
    np.equal(lo.view(np.uint32), hi.view(np.uint32), out=ok)
    ok &= lo == lo


def round_within(y: np.ndarray, w) -> tuple[np.ndarray, np.ndarray]:
    """(y rounded to float32, and where that is the rounding of every number within HALF of
    ``w`` of y).  y: float64; w: float64 (broadcast against y), at least 2**-52 |y| wherever the
    bound is not zero - so that the float64 ends y -+ w, rounded, still enclose y -+ w / 2, and a
    y exactly on a halfway point with a nonzero bound is never called decided.  A non-finite y
    is never decided (the caller says what inf and NaN give), nor is a zero whose sign the
    interval leaves open (y = -0 with w = 0 among them: an exact zero is +0, the caller says so)."""
    y = np.asarray(y, dtype=np.float64)
    w = np.broadcast_to(np.asarray(w, dtype=np.float64), y.shape)
    out = np.empty(y.shape, np.float32)
    ok = np.empty(y.shape, bool)
    yf, wf, of, kf = y.reshape(-1), np.ascontiguousarray(w).reshape(-1), out.reshape(-1), ok.reshape(-1)
    hi = np.empty(min(CHUNK, yf.size), np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        for s in range(0, yf.size, CHUNK):
            e = min(s + CHUNK, yf.size)
            _ends(yf[s:e], wf[s:e], of[s:e], hi[: e - s], kf[s:e])
    return out, ok


def round_within_outer(y: np.ndarray, wa: np.ndarray, wb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`round_within` with the bound w = wa[..., :, None] * wb[..., None, :] of a product's
    (..., M, N) outputs (row and column factors), made chunk by chunk and never stored whole."""
    y = np.asarray(y, dtype=np.float64)
    lead = y.shape[:-2]
    m, n = y.shape[-2:]
    wa = np.broadcast_to(wa, lead + (m,)).reshape(-1, m)
    wb = np.broadcast_to(wb, lead + (n,)).reshape(-1, n)
    y3 = y.reshape(-1, m, n)
    out = np.empty(y3.shape, np.float32)
    ok = np.empty(y3.shape, bool)
    nb_ = y3.shape[0]
    if m * n >= CHUNK or nb_ == 1:  # row blocks of each matrix
        blocks = [(b, b + 1, s, min(s + max(1, CHUNK // max(n, 1)), m))
                  for b in range(nb_) for s in range(0, m, max(1, CHUNK // max(n, 1)))]
    else:  # several small matrices at a time
        per = max(1, CHUNK // max(m * n, 1))
        blocks = [(b, min(b + per, nb_), 0, m) for b in range(0, nb_, per)]
    with np.errstate(over="ignore", invalid="ignore"):
        for b0, b1, s, e in blocks:
            ww = np.multiply(wa[b0:b1, s:e, None], wb[b0:b1, None, :])
            hi = np.empty(ww.shape, np.float32)
            _ends(y3[b0:b1, s:e], ww, out[b0:b1, s:e], hi, ok[b0:b1, s:e])
    return out.reshape(y.shape), ok.reshape(y.shape)
