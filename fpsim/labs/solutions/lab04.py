"""Reference solutions to lab 04, "Loss scaling"."""

from __future__ import annotations

import math

import numpy as np

import fpsim


def exercise1(scale, tracker, found_inf, growth_interval=2000, growth_factor=2.0, backoff_factor=0.5):
    """One GradScaler.update(): returns (new scale, new growth tracker)."""
    if found_inf:
        return float(np.float32(scale * backoff_factor)), 0
    tracker += 1
    if tracker == growth_interval:
        with np.errstate(over="ignore"):
            grown = np.float32(scale * growth_factor)  # float64 product rounded to float32, as PyTorch
        return (float(grown) if math.isfinite(grown) else float(scale)), 0
    return float(scale), tracker


def exercise2(max_grad):
    """The largest power of two S for which float16(S * max_grad) is still finite."""
    k = 0
    while math.isfinite(float(fpsim.round_to(max_grad * 2.0 ** (k + 1), "float16"))):
        k += 1
    while not math.isfinite(float(fpsim.round_to(max_grad * 2.0**k, "float16"))):
        k -= 1
    return 2.0**k
