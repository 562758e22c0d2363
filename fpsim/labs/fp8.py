"""Lab 08 (fp8 in miniature): per-tensor scaling by hand.

An fp8 format covers few binades (e4m3fn: 2^-9 .. 448; e5m2: 2^-16 .. 57344), so a tensor is
multiplied by its own scale before the cast and divided by it afterwards, as in Micikevicius
et al. 2022.  The scale here is the simplest one: computed from the tensor's own amax (its
largest magnitude), a power of two so that multiplying and dividing by it is exact.  (Training
recipes - :mod:`fpsim.lowp` - use *delayed* scaling instead: the scale comes from the amax of
earlier steps, which is why the cast must saturate: a value larger than any seen before must
clamp to max, not become NaN or inf.)
"""

from __future__ import annotations

import math

import numpy as np

from ..checks import check_integer
from ..formats import cast, get_format
from ..formats.survival import survival
from ..lowp import compute_scale
from ..textable import text_table

__all__ = ["per_tensor_scale", "fp8_round_trip", "survival_table", "scaled_histogram"]


def per_tensor_scale(x, fmt, margin: int = 0) -> float:
    """The largest power of two 2^k with amax(x) * 2^k <= max of ``fmt``, divided by 2^margin:
    :func:`fpsim.lowp.compute_scale` applied to this tensor's own amax (its largest finite |x|)
    instead of an amax history.  An all-zero (or empty) tensor gets 1.0.  A Python float;
    multiplying by it is exact as long as nothing over- or underflows."""
    check_integer(margin, "margin", 0)
    a = np.abs(np.asarray(x, dtype=np.float64).ravel())
    a = a[np.isfinite(a)]
    amax = float(a.max()) if a.size else 0.0
    return float(compute_scale(amax, fmt, margin=margin, previous=1.0))


def fp8_round_trip(x, fmt, scale: float = 1.0) -> np.ndarray:
    """What an fp8 tensor with a per-tensor scale hands back: ``x * scale`` (float64, exact for
    a power of two) rounded once to nearest into ``fmt`` with saturation (beyond max -> +-max),
    widened to float32 and divided by ``scale``.  Returns float32, the shape of ``x``."""
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"scale must be a finite number > 0, got {scale!r}")
    x64 = np.asarray(x, dtype=np.float64) * float(scale)
    stored = cast(x64, fmt, saturate=True)
    return (stored.astype(np.float32) / np.float32(scale)).astype(np.float32)


def survival_table(tensors: dict, formats=("float8_e4m3fn", "float8_e5m2")) -> str:
    """One row per named tensor and format: the % of the non-zero values that stay non-zero and
    finite when cast without a scale; the tensor's own :func:`per_tensor_scale` (as 2^k); the %
    kept with it; and the median relative error of the kept values after :func:`fp8_round_trip`
    (what fp8's few significant bits cost).  Keys may be strings or tuples (joined with '.')."""
    names = [get_format(f).name for f in formats]
    cols = ["tensor", "format", "kept, no scale", "per-tensor scale", "kept, scaled", "median rel. err"]
    rows = []
    for key, v in tensors.items():
        label = key if isinstance(key, str) else ".".join(str(k) for k in key if k)
        v = np.asarray(v)
        for i, n in enumerate(names):
            s = per_tensor_scale(v, n)
            plain, scaled = survival(v, n), survival(v, n, s)
            x = np.asarray(v, dtype=np.float64).ravel()
            q = fp8_round_trip(x, n, s).astype(np.float64)
            ok = (x != 0) & (q != 0) & np.isfinite(q)
            err = float(np.median(np.abs(q[ok] - x[ok]) / np.abs(x[ok]))) if ok.any() else float("nan")
            rows.append([label if i == 0 else "", n, f"{100 * _kept(plain):.2f}%", f"2^{round(math.log2(s))}",
                         f"{100 * _kept(scaled):.2f}%", f"{100 * err:.2f}%"])
    return "\n".join(text_table(cols, rows, right=range(2, len(cols))))


def _kept(s: dict) -> float:
    return 1.0 - s["frac_flushed"] - s["frac_overflow"] if s["nonzero"] else 1.0


def scaled_histogram(values, fmt, scale: float | None = None, *, title=None):
    """The gradient histogram of ``values`` in one fp8 format, with the histogram shifted by the
    tensor's per-tensor scale (default: its own :func:`per_tensor_scale`) - named in the legend
    for what it is here, a per-tensor fp8 scale, not a loss scale.  Returns the figure."""
    from .figures import histogram

    name = get_format(fmt).name
    s = per_tensor_scale(values, name) if scale is None else float(scale)
    return histogram(values, formats=(name,), scale=s, scale_name="per-tensor fp8 scale", title=title)
