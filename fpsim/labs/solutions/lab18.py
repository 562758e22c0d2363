"""Reference solutions to lab 18, "The order of a sum"."""

from __future__ import annotations

import numpy as np


def exercise1(x):
    """x[0] + x[1] + ... left to right, each addition rounded to float32."""
    s = np.float32(0.0)
    for v in np.asarray(x, dtype=np.float32):
        s = np.float32(s + v)
    return s


def exercise2(sum_fn, n):
    """FPRev's probe: for each pair, 2^30 at i, -2^30 at j, ones elsewhere (float32); the ones that
    meet a big value first are swallowed, so n - sum is the size of the subtree where i and j meet."""
    big = np.float32(2.0**30)
    sizes = np.ones((n, n), dtype=np.int64)
    for i in range(n):
        for j in range(i + 1, n):
            probe = np.ones(n, np.float32)
            probe[i], probe[j] = big, -big
            sizes[i, j] = sizes[j, i] = n - int(sum_fn(probe))
    return sizes
