"""Reference solutions for lab 06 (bfloat16)."""

from __future__ import annotations


def exercise1(w, fmt):
    """Half the gap between the stored weight (``w`` > 0 rounded into ``fmt``) and the next
    number of ``fmt`` above it: an update must be larger than this to move the weight up."""
    import fpsim

    stored = float(fpsim.round_to(float(w), fmt))
    return float(fpsim.ulp(stored, fmt)) / 2


def exercise2(g, scale):
    """The gradients a bfloat16 backward pass with loss scale ``scale`` hands the optimizer:
    ``g * scale`` computed in float32 and rounded to bfloat16, then multiplied in float32 by
    float32(1 / scale), as GradScaler.unscale_ does.  float32 array."""
    import numpy as np

    import fpsim

    g32 = np.asarray(g, dtype=np.float32)
    scaled = fpsim.round_to(g32 * np.float32(scale), "bfloat16")  # float32 in, bf16 values out
    return (scaled * np.float32(1.0 / np.float64(scale))).astype(np.float32)


def exercise3(w, u, fmt):
    """The probability that stochastic rounding rounds ``w + u`` UP in ``fmt`` (w > 0 rounded
    into fmt first, u >= 0): the fraction of the gap above the lower neighbour that w + u covers."""
    import numpy as np

    import fpsim

    x = float(fpsim.round_to(float(w), fmt)) + float(u)
    lower = float(fpsim.round_to(np.float64(x), fmt, "toward_zero"))
    gap = float(fpsim.ulp(lower, fmt))
    return (x - lower) / gap
