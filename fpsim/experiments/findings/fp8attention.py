"""``fp8-attention-p-cast``: FP8 attention casts the softmax probabilities P to e4m3 before the
product with V; with an attention sink in the first KV block, forward iteration flushes most
non-sink P to zero ("P-collapse"), and a static scale of 256 on P or the reverse block order cut
the output MSE 3-10x (arXiv 2606.06521, Lau, "P-Cast Precision in FP8 Attention").

The miniature: :func:`fpsim.experiments.onlinesoftmax.online_attention` (flash-style online
softmax in float32, P times a static scale rounded into e4m3, blocks of 64 keys forward or
reverse) on synthetic inputs with a sink: q, k, v standard normal (d = 64, 64 queries, 512 keys),
the first four keys (the source's k_sink = 4) ``Delta`` nats above the rest along one direction
every query shares, and those four keys' values zero - a sink is where attention goes to do
nothing (the model learns to give it a small value).  Reported per sink strength Delta: the share
of the non-sink P values the cast flushed, and the output MSE against the same attention in
float32 with no cast, for forward / reverse order and scale 1 / 256; the source's leading-order
prediction of forward order's flushed share, Phi(Delta + delta_4 - 6.93 - ln S) with delta_4 the
expected maximum of four standard normals; and at Delta = 6 the MSEs with the sink's values drawn
like the others (``*_vplain``), which the sink's own e4m3 rounding then dominates.

"Moderate" sink strengths are those where forward order at scale 1 flushes between 5% and 95%
of the non-sink P.  At the source's scale (real sequence lengths, 128-wide heads, real models'
Q, K, V) the same kernel is a few thousand times this sample's arithmetic: minutes on this CPU,
no GPU needed; what a CPU cannot give is the source's hpc-ops kernel itself.
"""

from __future__ import annotations

import math

import numpy as np

from ...numerics import mean64
from ...numerics.random import normal
from ..onlinesoftmax import online_attention, reference_attention
from .base import FINDINGS, Finding, pct, say

NAME = "fp8-attention-p-cast"
DELTAS = (2, 4, 6, 8, 10, 12)
CONFIGS = (("fwd_s1", "forward", 1.0), ("fwd_s256", "forward", 256.0), ("rev_s1", "reverse", 1.0),
           ("rev_s256", "reverse", 256.0))
N_SINK = 4
DELTA_4 = 1.0293753730  # E[max of 4 standard normals], the source's delta_k for k_sink = 4
LN_1024 = 10 * math.log(2)  # e4m3's flush threshold 2^-10 in nats: the source's 6.93


def sink_inputs(delta: float, seed: int, tq: int = 64, tk: int = 512, d: int = 64, sink_value: bool = False):
    """float32 q (tq, d), k (tk, d), v (tk, d), standard normal (fpsim's normal, the same bits
    everywhere), with the first :data:`N_SINK` keys' scores ``delta`` above the rest's: every
    query holds sqrt(d) in coordinate 0, the sink keys ``delta`` there and the others 0.  The sink
    keys' values are zero unless ``sink_value``."""
    rng = np.random.default_rng([seed, 2606])
    q, k, v = normal(rng, (tq, d)), normal(rng, (tk, d)), normal(rng, (tk, d))
    q[:, 0] = np.float32(math.sqrt(d))
    k[:, 0] = 0
    k[:N_SINK, 0] = np.float32(delta)  # their scores: sqrt(d) * delta / sqrt(d) = delta above the rest
    if not sink_value:
        v[:N_SINK] = 0
    return q, k, v


def predicted_flush(delta: float, p_scale: float) -> float:
    """The source's leading-order share of non-sink P that forward order flushes,
    Phi(delta + delta_4 - 6.93 - ln S), to three decimals (a libm's last bit cannot move it)."""
    x = delta + DELTA_4 - LN_1024 - math.log(p_scale)
    return round(0.5 * math.erfc(-x / math.sqrt(2)), 3)


def _mse(out: np.ndarray, ref: np.ndarray) -> float:
    return float(mean64((out.astype(np.float64) - ref.astype(np.float64)) ** 2))


def measure_one(delta: float, seed: int, sizes: dict, sink_value: bool = False) -> dict:
    """``{cfg}_mse`` and ``{cfg}_flushed`` (share of the non-sink P) of every configuration of
    :data:`CONFIGS` at sink strength ``delta``."""
    q, k, v = sink_inputs(delta, seed, sink_value=sink_value, **sizes)
    ref = reference_attention(q, k, v)
    out = {}
    for cfg, order, s in CONFIGS:
        r = online_attention(q, k, v, block=64, order=order, p_scale=s)
        out[f"{cfg}_mse"] = _mse(r["out"], ref)
        out[f"{cfg}_flushed"] = float(r["flushed"][:, N_SINK:].mean())
    return out


def measure(quick: bool = True, seeds=(0,), progress=None) -> tuple[dict, dict]:
    """Seed means (the exact mean, :func:`fpsim.numerics.mean64`) over ``seeds`` of every
    configuration at every Delta, the gains of the two fixes, and the figure's series."""
    sizes = {"tq": 64, "tk": 512} if quick else {"tq": 128, "tk": 1024}
    numbers: dict = {}
    for delta in DELTAS:
        say(progress, f"sink strength {delta}: forward / reverse, scale 1 / 256, {len(seeds)} seed(s)")
        per = [measure_one(delta, s, sizes) for s in seeds]
        for key in per[0]:
            numbers[f"d{delta}_{key}"] = float(mean64([p[key] for p in per]))
        numbers[f"d{delta}_predicted_flushed"] = predicted_flush(delta, 1.0)
        numbers[f"d{delta}_scale_gain"] = numbers[f"d{delta}_fwd_s1_mse"] / numbers[f"d{delta}_fwd_s256_mse"]
        numbers[f"d{delta}_reverse_gain"] = numbers[f"d{delta}_fwd_s1_mse"] / numbers[f"d{delta}_rev_s1_mse"]
    plain = [measure_one(6, s, sizes, sink_value=True) for s in seeds]
    for cfg, _, _ in CONFIGS:
        numbers[f"d6_{cfg}_mse_vplain"] = float(mean64([p[f"{cfg}_mse"] for p in plain]))
    numbers["seeds"] = float(len(seeds))
    series = {"deltas": list(DELTAS), **{f"{cfg}_{what}": [numbers[f"d{d}_{cfg}_{what}"] for d in DELTAS]
                                         for cfg, _, _ in CONFIGS for what in ("mse", "flushed")}}
    return numbers, series


def moderate(numbers: dict) -> list:
    """The sink strengths where forward order at scale 1 flushes 5% to 95% of the non-sink P."""
    return [d for d in DELTAS if 0.05 <= numbers[f"d{d}_fwd_s1_flushed"] <= 0.95]


def _gains(numbers: dict, mid: list) -> tuple[float, float, float, float]:
    scale = [numbers[f"d{d}_scale_gain"] for d in mid]
    rev = [numbers[f"d{d}_reverse_gain"] for d in mid]
    return min(scale), max(scale), min(rev), max(rev)


def measured(numbers: dict, series: dict) -> str:
    mid = moderate(numbers)
    parts = [f"Delta {d}: forward S=1 flushes {pct(numbers[f'd{d}_fwd_s1_flushed'], 1)} of non-sink P (source's "
             f"formula {pct(numbers[f'd{d}_predicted_flushed'], 1)}), MSE / {numbers[f'd{d}_scale_gain']:.1f} with "
             f"S=256, / {numbers[f'd{d}_reverse_gain']:.1f} in reverse" for d in mid]
    d6 = numbers["d6_fwd_s1_mse_vplain"]
    return ("; ".join(parts) + f"; reverse + S=256 flushes {pct(numbers['d8_rev_s256_flushed'], 1)} at Delta 8; "
            f"with the sink's values like the others' (Delta 6) the gains are only "
            f"{d6 / numbers['d6_fwd_s256_mse_vplain']:.1f}x and {d6 / numbers['d6_rev_s1_mse_vplain']:.1f}x")


def verdict(numbers: dict) -> tuple[str, str]:
    mid = moderate(numbers)
    if not mid:
        return "not at this scale", "no sink strength tried puts forward order's flushed share between 5% and 95%"
    s_lo, s_hi, r_lo, r_hi = _gains(numbers, mid)
    span = f"Delta {mid[0]}-{mid[-1]}" if len(mid) > 1 else f"Delta {mid[0]}"
    top = max(mid, key=lambda d: numbers[f"d{d}_fwd_s1_flushed"])
    if min(s_lo, r_lo) >= 3:
        return "reproduced", (f"at moderate sink strengths ({span}) forward order flushes up to "
                              f"{pct(numbers[f'd{top}_fwd_s1_flushed'], 0)} of the non-sink P (the source's formula "
                              f"{pct(numbers[f'd{top}_predicted_flushed'], 0)}), and S=256 cuts the output MSE "
                              f"{s_lo:.1f}-{s_hi:.1f}x, reverse order {r_lo:.1f}-{r_hi:.1f}x (source: 3-10x; more "
                              "where the sink's values are zero, as here; the source's sizes are minutes of the same "
                              "arithmetic on this CPU)")
    if min(s_lo, r_lo) > 1:
        return "partly", (f"both fixes lower the MSE at {span}, but by only {min(s_lo, r_lo):.1f}x at the least "
                          "(source: 3-10x)")
    return "not at this scale", f"at {span} a fix leaves the MSE no lower ({min(s_lo, r_lo):.2f}x)"


def draw(ax, series: dict) -> None:
    """Output MSE against the sink strength for the four configurations (log scale), and forward
    order's flushed share at scale 1 on a second axis."""
    x = series["deltas"]
    for cfg, order, s in CONFIGS:
        ax.semilogy(x, series[f"{cfg}_mse"], marker="o", label=f"{order}, S={s:g}")
    ax.set_xlabel("sink strength Delta (nats above the other scores)")
    ax.set_ylabel("output MSE vs float32 attention")
    ax2 = ax.twinx()
    ax2.plot(x, [100 * v for v in series["fwd_s1_flushed"]], "k:", label="forward, S=1: non-sink P flushed (%)")
    ax2.set_ylabel("non-sink P flushed to 0 (%)")
    ax.legend(loc="upper left", fontsize=8)
    ax2.legend(loc="lower right", fontsize=8)
    ax.set_title("FP8 attention: P cast to e4m3 (sink in the first KV block)")


FINDING = FINDINGS.register(Finding(
    NAME, "FP8 attention casts the softmax probabilities P to e4m3 before P.V; with a sink in the first KV block "
          "forward iteration flushes the non-sink P (P-collapse), and a static scale of 256 or reverse order cut the "
          "output MSE.",
    "arXiv 2606.06521 (Lau)",
    "a fraction Phi(Delta + delta_k - 6.93 - ln S) of non-sink P values underflow to zero; reverse iteration removes "
    "it; kernel-faithful experiments show 3-10x MSE improvement at moderate sink strengths",
    (2.0, 12.0), order=95, verdict=verdict, measured=measured, measure=measure, figure=draw, seeds=(0, 1, 2)))
