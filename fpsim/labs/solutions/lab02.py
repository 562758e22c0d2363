"""Reference solutions to lab 02, "Underflow and the worked example"."""

from __future__ import annotations

import math

import numpy as np

import fpsim


def exercise1(x):
    """What float16 makes of x: "zero", "subnormal", "normal" or "inf"."""
    r = abs(float(fpsim.round_to(x, "float16")))  # classify the ROUNDED value
    if r == 0:
        return "zero"
    if math.isinf(r):
        return "inf"
    return "subnormal" if r < 2.0**-14 else "normal"


def exercise2(g, scale):
    """Loss scaling by hand: S*g in float32, rounded into float16, unscaled in float32."""
    scaled16 = fpsim.round_to(np.float32(g) * np.float32(scale), "float16")  # float32 in, float32 out
    with np.errstate(over="ignore"):
        return float(np.float32(scaled16) * np.float32(1.0 / scale))  # GradScaler multiplies by 1/S


def exercise3(g):
    """The smallest power of two S (S >= 1) for which S * |g| is at least float16's smallest
    normal number, 2**-14."""
    k = 0
    while abs(g) * 2.0**k < 2.0**-14:
        k += 1
    return 2.0**k
