"""Lab 09 support (where half precision overflows): the same attention computed several ways."""

from __future__ import annotations

import math

import numpy as np

from .. import ops
from ..amp import autocast
from ..tensor import tensor
from ..textable import text_table

__all__ = ["FP16_MIN", "attention_variants", "variant_table"]

FP16_MIN = float(np.finfo(np.float16).min)  # -65504: the additive mask value many float16 models use


def attention_variants(q, k, v, pad=None) -> dict:
    """Causal attention of the float64 arrays q, k, v (..., T, d) computed five ways; name ->
    float32 numpy result.  ``pad``: a boolean key mask (True = a real token) for every variant."""
    def run(fmt, **kw):
        t = [tensor(a, fmt) for a in (q, k, v)]
        out = ops.scaled_dot_product_attention(*t, pad, is_causal=True, **kw)
        return np.asarray(out.numpy(), dtype=np.float32)

    out = {
        "float32": run("float32"),
        "float16": run("float16"),
        "float16, no max-subtraction": run("float16", stable=False),
        "float16, finfo.min mask": run("float16", mask_value=FP16_MIN),
    }
    with autocast("float16"):
        out["autocast float16"] = run("float32")
    return out


def variant_table(outs: dict) -> str:
    """One row per variant: NaNs, infs, and the largest difference from float32 (finite entries)."""
    ref = outs["float32"].astype(np.float64)
    rows = []
    for name, y in outs.items():
        y64 = y.astype(np.float64)
        fin = np.isfinite(y64) & np.isfinite(ref)
        err = float(np.abs(y64[fin] - ref[fin]).max()) if fin.any() else math.nan
        rows.append([name, str(int(np.isnan(y64).sum())), str(int(np.isinf(y64).sum())), f"{err:.3g}"])
    return "\n".join(text_table(["variant", "NaN", "inf", "max |diff| vs float32"], rows, right=(1, 2, 3)))
