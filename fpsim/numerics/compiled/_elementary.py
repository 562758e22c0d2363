"""The compiled path of the elementary functions (``elementary._correctly_rounded``): the same
float64 function (numpy's), the same test, in chunks that stay in the cache.

Each chunk of 2**15 values is widened to float64 into one buffer, numpy's float64 function runs
on it, and :func:`_check` makes ``checked.round_within(y, |y| * margin)``'s test in one loop,
writing inf, NaN and +-0 as IEEE gives them and collecting the few values left to ``decimal``.
"""

from __future__ import annotations

import math

import numpy as np

from ._exact import jit

__all__ = ["fused_elementary"]

_CHUNK = 2**15  # float64 values a chunk: 256 KiB, in L2 with its float32 ends


@jit()
def _check(y, out, margin, flag, idx, at, cnt):
    """out = float32(y - |y| margin) where that has the bits of float32(y + |y| margin) (not NaN);
    float32(y) (NaN: +NaN) where y is inf, NaN or +-0; elsewhere y's flat index (at + position) is
    appended to idx[cnt:].  Returns the new count.  (flag: scratch, so that the first loop, the
    test, has no branch and runs in vector registers.)"""
    left = 0
    for j in range(y.shape[0]):
        v = y[j]
        w = abs(v) * margin
        hi = np.float32(v + w)
        lo = np.float32(v - w)
        out[j] = lo
        bad = (hi != lo) | (v == 0.0)  # w << |y|: the ends' signs differ only at y = +-0
        flag[j] = bad
        left += bad
    if left:
        for j in range(y.shape[0]):
            if flag[j]:
                v = y[j]
                if math.isfinite(v) and v != 0.0:
                    idx[cnt] = at + j
                    cnt += 1
                else:
                    out[j] = np.float32(np.nan) if math.isnan(v) else np.float32(v)
    return cnt


def fused_elementary(x, f64, exact_fn, margin: float) -> np.ndarray:
    """``elementary._correctly_rounded`` for float32 x, with margin = 2 * REL_MARGIN."""
    out = np.empty(x.shape, np.float32)
    xs, of = x.reshape(-1), out.reshape(-1)
    n = xs.size
    buf = np.empty(min(n, _CHUNK))
    flag = np.empty(buf.size, np.bool_)
    idx = np.empty(n, np.int64)
    cnt = 0
    ufunc = isinstance(f64, np.ufunc)
    for s in range(0, n, _CHUNK):
        e = min(n, s + _CHUNK)
        b = buf[:e - s]
        np.copyto(b, xs[s:e])
        y = f64(b, out=b) if ufunc else f64(b)
        cnt = _check(np.ascontiguousarray(y, dtype=np.float64), of[s:e], margin, flag, idx, s, cnt)
    for i in idx[:cnt]:
        of[i] = exact_fn(float(xs[i]))
    return out
