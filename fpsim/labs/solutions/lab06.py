"""Reference solutions for lab 06 (bfloat16), and wrong answers the self-checks must reject
(``WRONG``: exercise -> [(the mistake, code), ...])."""

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


WRONG = {
    1: [
        ("does not round w into the format first", """
def exercise1(w, fmt):
    return float(fpsim.ulp(float(w), fmt)) / 2
"""),
        ("the whole gap instead of half of it", """
def exercise1(w, fmt):
    return float(fpsim.ulp(float(fpsim.round_to(float(w), fmt)), fmt))
"""),
        ("the rule of thumb 2**-8 x w (relative, not the gap of w's binade)", """
def exercise1(w, fmt):
    p = fpsim.get_format(fmt).mantissa_bits + 1
    return float(fpsim.round_to(float(w), fmt)) * 2.0**-p
"""),
        ("the gap below the weight instead of above it", """
def exercise1(w, fmt):
    stored = float(fpsim.round_to(float(w), fmt))
    below = float(fpsim.round_to(np.nextafter(stored, 0.0), fmt, "toward_zero"))
    return (stored - below) / 2
"""),
        ("always bfloat16, whatever the format", """
def exercise1(w, fmt):
    stored = float(fpsim.round_to(float(w), "bfloat16"))
    return float(fpsim.ulp(stored, "bfloat16")) / 2
"""),
    ],
    2: [
        ("divides by the scale instead of multiplying by float32(1/scale)", """
def exercise2(g, scale):
    g32 = np.asarray(g, dtype=np.float32)
    scaled = fpsim.round_to(g32 * np.float32(scale), "bfloat16")
    return (scaled / np.float32(scale)).astype(np.float32)
"""),
        ("never rounds into bfloat16", """
def exercise2(g, scale):
    g32 = np.asarray(g, dtype=np.float32)
    return ((g32 * np.float32(scale)) * np.float32(1.0 / scale)).astype(np.float32)
"""),
        ("rounds into float16 instead of bfloat16", """
def exercise2(g, scale):
    g32 = np.asarray(g, dtype=np.float32)
    scaled = fpsim.round_to(g32 * np.float32(scale), "float16")
    return (scaled * np.float32(1.0 / scale)).astype(np.float32)
"""),
        ("returns float64 instead of float32", """
def exercise2(g, scale):
    g32 = np.asarray(g, dtype=np.float32)
    scaled = fpsim.round_to(g32 * np.float32(scale), "bfloat16")
    return scaled.astype(np.float64) / scale
"""),
        ("ignores the scale: a plain cast", """
def exercise2(g, scale):
    return fpsim.round_to(np.asarray(g, dtype=np.float32), "bfloat16")
"""),
    ],
    3: [
        ("the update in gaps of w, without finding the neighbour below w + u", """
def exercise3(w, u, fmt):
    stored = float(fpsim.round_to(float(w), fmt))
    return float(u) / float(fpsim.ulp(stored, fmt))
"""),
        ("the probability of rounding down", """
def exercise3(w, u, fmt):
    x = float(fpsim.round_to(float(w), fmt)) + float(u)
    lower = float(fpsim.round_to(np.float64(x), fmt, "toward_zero"))
    return 1 - (x - lower) / float(fpsim.ulp(lower, fmt))
"""),
        ("takes the nearest neighbour for the one below", """
def exercise3(w, u, fmt):
    x = float(fpsim.round_to(float(w), fmt)) + float(u)
    near = float(fpsim.round_to(np.float64(x), fmt))
    return (x - near) / float(fpsim.ulp(near, fmt))
"""),
        ("does not round w into the format first", """
def exercise3(w, u, fmt):
    x = float(w) + float(u)
    lower = float(fpsim.round_to(np.float64(x), fmt, "toward_zero"))
    return (x - lower) / float(fpsim.ulp(lower, fmt))
"""),
        ("estimates it by drawing stochastic roundings", """
def exercise3(w, u, fmt):
    x = float(fpsim.round_to(float(w), fmt)) + float(u)
    lower = float(fpsim.round_to(np.float64(x), fmt, "toward_zero"))
    draws = fpsim.round_to(np.full(20000, x), fmt, rounding="stochastic", seed=0)
    return float(np.mean(draws > lower))
"""),
    ],
}
