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


def exercise3(fmt):
    """The number at which counting by 1 in ``fmt`` (round to nearest after each +1) stops:
    2**p with p = significant bits.  There the gap is 2, so n + 1 is a tie, and ties go to
    the even neighbour - n itself."""
    import fpsim

    return 2.0 ** (fpsim.get_format(fmt).mantissa_bits + 1)
