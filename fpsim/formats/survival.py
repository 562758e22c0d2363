"""What a format keeps of a set of values: how many flush to zero, stay subnormal, are normal or
overflow, after an optional scale (``survival``).  The audit tool, gradient capture and the
histogram plots all count with it.
"""

from __future__ import annotations

import numpy as np

from .round import classify
from .table import get_format

__all__ = ["survival", "float_values", "is_float_dtype"]


def is_float_dtype(dt) -> bool:
    """numpy float dtypes and fpsim's own formats (bfloat16, fp8 from ml_dtypes)."""
    if dt.kind == "f":
        return True
    try:
        get_format(dt)
        return True
    except ValueError:
        return False


def float_values(values) -> np.ndarray:
    """values as a flat float32/float64 numpy array holding exactly the same numbers."""
    v = np.asarray(values)
    if v.dtype in (np.float32, np.float64):
        return v.ravel()
    if v.dtype.kind in "iu" or v.dtype.kind == "f" and v.dtype.itemsize > 8:
        return v.astype(np.float64).ravel()
    if is_float_dtype(v.dtype):  # float16, bfloat16, fp8: exact in float32
        return v.astype(np.float32).ravel()
    raise TypeError(f"expected float values, got dtype {v.dtype}")


def survival(values, fmt, scale: float = 1.0) -> dict:
    """What rounding ``values * scale`` to nearest into ``fmt`` does to the non-zero ones.

    The product is formed in float64 (exact for a power-of-two scale) and rounded once into
    the format.  Returns counts ``n`` (all values), ``zero`` (exact zeros), ``nonfinite``
    (inf/NaN already in the input), ``nonzero`` (the finite non-zero values, the base of every
    fraction), ``flushed`` (became 0), ``subnormal``, ``normal``, ``overflow`` (became inf or
    NaN), and ``frac_flushed``, ``frac_subnormal``, ``frac_normal``, ``frac_overflow``.
    """
    f = get_format(fmt)
    v = float_values(values)
    finite = np.isfinite(v)
    keep = finite & (v != 0)
    x = v[keep]
    if scale != 1.0:
        with np.errstate(over="ignore"):
            x = x.astype(np.float64) * float(scale)
    cat = classify(x, f).category  # indexes into CATEGORIES: zero subnormal normal inf nan
    per = np.bincount(cat, minlength=5)
    nz = int(x.size)
    out = {
        "n": int(v.size),
        "zero": int(np.count_nonzero(finite & (v == 0))),
        "nonfinite": int(v.size - np.count_nonzero(finite)),
        "nonzero": nz,
        "flushed": int(per[0]),
        "subnormal": int(per[1]),
        "normal": int(per[2]),
        "overflow": int(per[3] + per[4]),
    }
    for k in ("flushed", "subnormal", "normal", "overflow"):
        out["frac_" + k] = out[k] / nz if nz else 0.0
    return out
