"""Lab 18 (the order of a sum): the same float32 numbers added in different orders, and a probe
that reads the order off a black-box sum.

Every function here adds float32 numbers in float32, each addition rounded to nearest even, in
an order it defines - the orders real libraries use:

- :func:`sequential_sum`: left to right, one accumulator (a naive loop; ``np.cumsum``'s last element);
- :func:`pairwise_sum`: numpy's own ``np.sum`` of a contiguous float32 array, written out (eight
  accumulators over blocks of up to 128, halves above that: numpy's ``pairwise_sum``);
- :func:`blocked_sum`: a BLAS-style blocking - each chunk of ``block`` summed, then the partials;
- (split-K, whose split follows the batch size, is :mod:`fpsim.experiments.splitk`'s;)
- :func:`probe_order` (FPRev's idea): with a huge value at i, its negative at j and ones elsewhere,
  the ones added before i and j meet are swallowed, so the sum counts the ones added after: the
  size of the smallest subtree holding i and j; :func:`order_tree` rebuilds the tree from them.
"""

from __future__ import annotations

import numpy as np

from ..checks import check_integer

__all__ = ["sequential_sum", "pairwise_sum", "blocked_sum", "probe_order", "order_tree", "PROBE_BIG"]

PROBE_BIG = 2.0**30  # float32 swallows any count of ones below 64 added to it: its ulp there is 128


def _f32(x) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype != np.float32 or x.ndim != 1:
        raise ValueError(f"x must be a 1-d float32 array, got {x.dtype} of shape {x.shape}")
    return x


def sequential_sum(x) -> np.float32:
    """``x[0] + x[1] + ...`` left to right in float32 (every addition rounded), from -0.0 as numpy
    starts (so a sum of -0.0s stays -0.0)."""
    x = _f32(x)
    return np.float32(np.add.accumulate(np.concatenate([np.float32([-0.0]), x]))[-1])


def pairwise_sum(x) -> np.float32:
    """``np.sum`` of a contiguous float32 array as numpy computes it, written out: fewer than 8
    values left to right; up to 128 in eight interleaved accumulators (r[j] takes x[j], x[j+8], ...),
    combined as ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)), the tail added after; more in two halves
    (the first a multiple of 8 long), each summed so, then added."""
    x = _f32(x)
    n = len(x)
    if n < 8:
        return sequential_sum(x)
    if n <= 128:
        whole = n - n % 8
        r = x[:8].copy()
        for i in range(8, whole, 8):
            r = r + x[i:i + 8]  # float32 + float32: each lane rounded
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        for v in x[whole:]:
            res = np.float32(res + v)
        return np.float32(res)
    half = n // 2
    half -= half % 8
    return np.float32(pairwise_sum(x[:half]) + pairwise_sum(x[half:]))


def blocked_sum(x, block: int) -> np.float32:
    """A BLAS-style blocked sum: each run of ``block`` consecutive values summed left to right,
    then the partial sums left to right."""
    x = _f32(x)
    check_integer(block, "block", 1)
    partials = np.array([sequential_sum(x[i:i + block]) for i in range(0, len(x), block)], np.float32)
    return sequential_sum(partials)


def probe_order(sum_fn, n: int) -> np.ndarray:
    """The (n, n) integer matrix L of a black-box sum ``sum_fn`` (float32 array of n -> its sum):
    L[i, j] is the number of inputs in the smallest subtree of its addition tree that holds both i
    and j, read from one call with ``PROBE_BIG`` at i, ``-PROBE_BIG`` at j and ones elsewhere (the
    ones that meet a big value first are swallowed; the rest are counted): L = n - sum.  L[i, i] = 1."""
    check_integer(n, "n", 2, 63)
    out = np.ones((n, n), dtype=np.int64)
    for i in range(n):
        for j in range(i + 1, n):
            x = np.ones(n, np.float32)
            x[i], x[j] = PROBE_BIG, -PROBE_BIG
            out[i, j] = out[j, i] = n - int(sum_fn(x))
    return out


def order_tree(sizes) -> str:
    """The addition tree that :func:`probe_order`'s matrix describes, as nested parentheses of
    input indices, e.g. ``((0 1) (2 3))``: leaves i and j share a child of a subtree of size s
    exactly when their L[i, j] < s.  A sum with no order (every L[i, j] = 2: the exact sum, which
    cancels the big pair whatever the order) comes back as one flat group."""
    sizes = np.asarray(sizes)
    if sizes.ndim != 2 or sizes.shape[0] != sizes.shape[1]:
        raise ValueError(f"sizes must be a square matrix, got shape {sizes.shape}")

    def tree(leaves: list) -> str:
        if len(leaves) == 1:
            return str(leaves[0])
        groups: list[list] = []
        for leaf in leaves:
            home = next((g for g in groups if sizes[leaf, g[0]] < len(leaves)), None)
            home.append(leaf) if home is not None else groups.append([leaf])
        if len(groups) == 1:  # nothing splits them: no tree to read (flat)
            return "(" + " ".join(map(str, leaves)) + ")"
        return "(" + " ".join(tree(g) for g in groups) + ")"

    return tree(list(range(sizes.shape[0])))
