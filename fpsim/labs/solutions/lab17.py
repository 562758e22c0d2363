"""Reference solutions to lab 17, "TF32"."""

from __future__ import annotations

import math

import numpy as np


def exercise1(x):
    """float32 -> TF32 to nearest, ties away from zero (``cvt.rna.tf32.f32``), on the bit patterns:
    add half the weight of the 13 dropped bits (bit 12), clear them; inf and NaN are put back as
    they were (adding 0x1000 to a NaN's bits can carry into the sign)."""
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(over="ignore"):
        bits = x.view(np.uint32) + np.uint32(0x1000)
    out = (bits & np.uint32(0xFFFFE000)).view(np.float32)
    return np.where(np.isfinite(x), out, x)


def exercise2(a, b, rounding="nearest_away"):
    """The error TF32 makes on the dot product a . b from its operands: the exact sum of the
    TF32 products minus the exact sum of the float32 products (every product exact in float64,
    the whole difference summed exactly and rounded once by math.fsum)."""
    from fpsim.labs.tf32 import to_tf32

    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    ta, tb = (to_tf32(v, rounding).astype(np.float64) for v in (a, b))
    return math.fsum(np.concatenate([ta * tb, -(a64 * b64)]))
