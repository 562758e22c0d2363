"""``fpsim bench``'s block-format rows: what block scaling itself costs, per 10**6 values.

- MXFP8 quantization (amax per block of 32, an e8m0 scale, the elements cast) against fpsim's
  plain float32 -> e4m3 cast of the same values;
- MXFP4 with stochastically rounded elements (what the ``mxfp4-sr-rht`` recipe does to its
  gradients) against MXFP4 rounded to nearest plus numpy's draw of the uniforms stochastic rounding
  takes (``rng.random``, one float64 a value): what rounding stochastically costs beyond its draws
  (exact stochastic rounding runs in float32, the fraction of each scaled value against its draw,
  the same bits as the float64 algorithm it replaced; the compiled path draws numpy's PCG64 doubles
  itself).  Against the nearest quantize alone it was <= 3x while that took 3.3 ms; compiled, the
  nearest quantize takes a quarter of the draws' time, so the draws set that ratio;
- that rounding itself, ``fpsim.cast`` of float32 values into float4_e2m1fn stochastically,
  against the float64 algorithm on the same values (``cast`` of them as float64, which still
  takes it; the same draws, the same results).
"""

from __future__ import annotations

import numpy as np

from ...formats import cast, quantize
from ...formats.kernels import f32_to_fp8
from .rows import Row, compare_row

__all__ = ["block_rows"]


def block_rows(s, n_text: str, tick) -> list[Row]:
    """The block rows (``s``: the run's ``BenchSettings``; ``tick`` as each row starts)."""
    x = np.random.default_rng(0).standard_normal(s.n_round).astype(np.float32)
    label = f"{n_text} float32 normal -> mxfp8_e4m3 (quantize)"
    tick(f"rounding {label}")
    rows = [compare_row("rounding", label, lambda: quantize(x, "mxfp8_e4m3"), "fpsim float32 -> e4m3 cast",
                    lambda: f32_to_fp8(x, "float8_e4m3fn"), s, target="<= 3x", limit=3.0)]
    label = f"{n_text} float32 normal -> mxfp4 (quantize), stochastic elements"
    tick(f"rounding {label}")
    rng, peer_rng = np.random.default_rng(1), np.random.default_rng(1)
    rows.append(compare_row("rounding", label, lambda: quantize(x, "mxfp4", rounding="stochastic", rng=rng),
                            "the quantize to nearest + rng.random of its uniforms",
                            lambda: (quantize(x, "mxfp4"), peer_rng.random(x.size)), s,
                            target="<= 1.5x", limit=1.5, note="float32 kernel, one float64 draw a value"))
    label = f"{n_text} float32 normal -> float4_e2m1fn, stochastic (float32 kernel)"
    tick(f"rounding {label}")
    x4, x64 = x * np.float32(3), (x * np.float32(3)).astype(np.float64)
    rows.append(compare_row("rounding", label, lambda: cast(x4, "float4_e2m1fn", "stochastic", saturate=True, seed=1),
                            "the float64 algorithm, same values and draws",
                            lambda: cast(x64, "float4_e2m1fn", "stochastic", saturate=True, seed=1), s,
                            target="<= 0.5x", limit=0.5))
    return rows
