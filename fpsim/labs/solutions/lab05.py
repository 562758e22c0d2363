"""Reference solutions for lab 05 (gradient histograms per format)."""

from __future__ import annotations


def exercise1(values, fmt):
    """The fraction of the non-zero finite ``values`` that rounding to nearest into ``fmt`` flushes to 0."""
    import numpy as np

    import fpsim

    v = np.asarray(values, dtype=np.float32).ravel()
    v = v[np.isfinite(v) & (v != 0)]
    if v.size == 0:
        return 0.0
    stored = fpsim.cast(v, fmt).astype(np.float32)  # one rounding, to nearest
    return float(np.mean(stored == 0))


def exercise2(values, fmt="float16", keep=0.999):
    """The smallest k >= 0 for which the loss scale 2**k keeps at least ``keep`` of the non-zero
    ``values`` from flushing to 0 in ``fmt`` without overflowing any; None if there is none."""
    from fpsim.formats.survival import survival

    for k in range(0, 41):
        s = survival(values, fmt, 2.0**k)
        if s["overflow"]:
            return None  # a larger scale only overflows more
        if s["nonzero"] - s["flushed"] >= keep * s["nonzero"]:
            return k
    return None
