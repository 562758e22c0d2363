"""How biased few-bit stochastic rounding is: measured exactly, per format, number of bits and variant
(see :mod:`fpsim.formats.sr` for the variants)."""

from __future__ import annotations

import numpy as np

from ..numerics import mean64
from .round import round_to
from .sr import SR_VARIANTS
from .table import get_format

__all__ = ["sr_bias", "sr_bias_table"]


def sr_bias(fmt="bfloat16", sr_bits=(1, 2, 3, 4, 6, 8, 12, None), variants=SR_VARIANTS, *, values=None,
            seed: int = 0) -> list[dict]:
    """The bias of few-bit stochastic rounding, exactly, per number of random bits and variant.

    For each value v (default: 4096 values spread over [1, 2), a binade where ``fmt``'s ulp is
    ``eps``), E[round(v)] - v is computed exactly by averaging the result over all 2**k random
    integers (k = None: exact SR, whose expectation is v itself).  Returned per (k, variant): the
    mean bias and the largest |bias| in ulps, and the mean bias relative to the value.  ``fpsim``'s
    docs and the rounding lab print this table (:func:`sr_bias_table`).  Values are float64; the
    rounding is ``fpsim.round_to(v, fmt, "stochastic", sr_bits=k, sr_random=R, sr_variant=...)``.
    """
    f = get_format(fmt)
    if values is None:
        rng = np.random.default_rng(seed)
        values = 1.0 + rng.random(4096)
    v = np.asarray(values, dtype=np.float64)
    ulp = np.ldexp(1.0, np.frexp(np.abs(v))[1] - 1 - f.mantissa_bits)
    rows = []
    for k in sr_bits:
        for variant in variants if k is not None else ("exact",):
            if k is None:
                mean = v.copy()  # exact SR: E = lo + delta * ulp = v, by construction
            else:
                n = 2**k
                reps = np.broadcast_to(np.arange(n, dtype=np.int64)[:, None], (n, v.size))
                # the 2**k roundings are two neighbouring values: their float64 sum is exact in any order
                mean = round_to(np.broadcast_to(v, (n, v.size)), f, "stochastic", sr_bits=k, sr_random=reps,
                                sr_variant=variant).mean(axis=0)
            b = (mean - v) / ulp
            rows.append({"sr_bits": k, "variant": variant, "mean_bias_ulp": mean64(b),
                         "max_abs_bias_ulp": float(np.abs(b).max()), "mean_rel_bias": mean64((mean - v) / v)})
    return rows


def sr_bias_table(fmt="bfloat16", **kw) -> str:
    """:func:`sr_bias` as a text table."""
    rows = sr_bias(fmt, **kw)
    lines = [f"few-bit stochastic rounding into {fmt}: E[round(v)] - v, in ulps (values in [1, 2))",
             f"{'bits':>5} {'variant':>8} {'mean bias':>12} {'max |bias|':>12}"]
    for r in rows:
        k = "exact" if r["sr_bits"] is None else str(r["sr_bits"])
        lines.append(f"{k:>5} {r['variant']:>8} {r['mean_bias_ulp']:>12.3e} {r['max_abs_bias_ulp']:>12.3e}")
    return "\n".join(lines)
