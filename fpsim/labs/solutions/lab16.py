"""Reference solutions for lab 16 (a loss spike, taken apart)."""

from __future__ import annotations

import math

import numpy as np

from ...formats import round_to


def exercise1(q, k, scale=None):
    """The largest |q.k * scale| over the (query i, key j) pairs a causal mask allows (j <= i),
    every leading (batch, head) index included; q and k (..., t, d), scale 1/sqrt(d) by default."""
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = np.abs(q @ np.swapaxes(k, -1, -2) * scale)
    t = q.shape[-2]
    return float(np.where(np.tril(np.ones((t, t), bool)), s, 0.0).max())


def exercise2(x):
    """Fisher's excess kurtosis of all entries of x, in float64: m4 / m2^2 - 3 (biased moments)."""
    v = np.asarray(x, np.float64).ravel()
    d = v - v.mean()
    m2 = np.mean(d**2)
    return float(np.mean(d**4) / m2**2 - 3)


def exercise3(max_logits, fmt, head_dim):
    """The first step whose scores' matmul overflows in fmt: the product q.k it rounds is the
    logit times sqrt(head_dim) (the scale comes after the product); the first whose product does
    not survive rounding into fmt (inf, or NaN in a format without inf), or None."""
    for step, v in enumerate(max_logits):
        if not np.isfinite(round_to(np.float32(v * math.sqrt(head_dim)), fmt)):
            return step
    return None
