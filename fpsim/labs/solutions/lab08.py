"""Reference solutions for lab 08 (fp8 in miniature)."""

from __future__ import annotations


def exercise1(x, fmt):
    """The largest power of two s with max|x| * s <= the largest finite number of ``fmt``."""
    import math

    import numpy as np

    import fpsim

    f = fpsim.get_format(fmt)
    amax = float(np.max(np.abs(np.asarray(x, dtype=np.float64))))
    k = math.floor(math.log2(f.max / amax))
    while amax * 2.0**k > f.max:  # guard the log's rounding at an exact power of two
        k -= 1
    while amax * 2.0 ** (k + 1) <= f.max:
        k += 1
    return 2.0**k


def exercise2(values, fmt, scale):
    """The fraction of the non-zero finite ``values`` still non-zero and finite after a
    saturating cast of ``values * scale`` into ``fmt``."""
    import numpy as np

    import fpsim

    v = np.asarray(values, dtype=np.float64).ravel()
    v = v[np.isfinite(v) & (v != 0)]
    if v.size == 0:
        return 1.0
    back = fpsim.cast(v * scale, fmt, saturate=True).astype(np.float32)
    return float(np.mean((back != 0) & np.isfinite(back)))


def exercise3(history, fmt, margin=0):
    """Delayed scaling: the scale for the next step from an amax history (the largest |x| of
    each earlier step): 2**(floor(log2(max / amax)) - margin) with amax the largest entry of the
    history; 1.0 while the history holds nothing but zeros."""
    import math

    import fpsim

    f = fpsim.get_format(fmt)
    amax = max(float(a) for a in history)
    if amax == 0:
        return 1.0
    k = math.floor(math.log2(f.max / amax))
    while amax * 2.0**k > f.max:  # guard the log's rounding at an exact power of two
        k -= 1
    while amax * 2.0 ** (k + 1) <= f.max:
        k += 1
    return 2.0 ** (k - margin)
