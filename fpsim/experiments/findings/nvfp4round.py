"""``nvfp4-rounding``: stochastic rounding of NVFP4 elements roughly doubles the error of
round-to-nearest but is unbiased, and 16x16 weight tiles quantize W and W^T alike (arXiv
2509.25149, NVIDIA's NVFP4 pretraining recipe).

Measured with ``fpsim.quantize(x, "nvfp4", rounding=...)`` on Gaussian 1x16 blocks: the MSE
ratio stochastic / nearest; the bias of each, as the mean of q - x over ``draws`` stochastic
draws of the same values divided by the RMS of x (nearest's bias is the same every draw); and,
for a weight matrix, the share of entries where quantizing W^T and transposing back differs from
quantizing W - with 1x16 blocks along the rows, and with 16x16 tiles (zero when both see the same
tiles).
"""

from __future__ import annotations

import math

import numpy as np

from ...formats import quantize
from ...numerics import mean64
from ...numerics.random import normal
from .base import FINDINGS, Finding, pct, say

NAME = "nvfp4-rounding"
SOURCE_RATIO = 2.09


def measure(x: np.ndarray, draws: int, seed: int) -> dict:
    """MSE ratio SR / RTN and the two biases (relative to RMS x) of ``x`` (float32, (n, 16)); every
    mean the exact sum rounded once, over the count (:func:`fpsim.numerics.mean64`)."""
    x64 = x.astype(np.float64)
    near = quantize(x, "nvfp4").dequantize().astype(np.float64) - x64
    rng = np.random.default_rng(seed)
    sr_sum = np.zeros_like(x64)
    sr_sq = 0.0
    for _ in range(draws):
        e = quantize(x, "nvfp4", rounding="stochastic", rng=rng).dequantize().astype(np.float64) - x64
        sr_sum += e
        sr_sq += float(mean64(e**2))
    rms = math.sqrt(mean64(x64**2))
    return {"mse_ratio": sr_sq / draws / float(mean64(near**2)),
            "sr_bias": float(mean64(np.abs(sr_sum / draws))) / rms, "rtn_bias": float(mean64(np.abs(near))) / rms,
            "sr_bias_mean": float(mean64(sr_sum) / draws) / rms}


def transpose_mismatch(w: np.ndarray, block) -> float:
    """Share of entries of ``w`` (2-D float32) whose NVFP4 value differs between quantizing W and
    quantizing W^T (then transposing back), with ``block`` (16 or (16, 16))."""
    a = quantize(w, "nvfp4", block=block).dequantize()
    b = quantize(np.ascontiguousarray(w.T), "nvfp4", block=block).dequantize().T
    return float((a != b).mean())


def measure_rounding(quick: bool = True, seeds=(0,), progress=None) -> tuple[dict, dict]:
    """The numbers (module docstring) from the first seed's draws, and the same as the figure's series."""
    rng = np.random.default_rng(seeds[0])
    n, draws = (2**14, 16) if quick else (2**16, 64)
    say(progress, f"Gaussian 1x16 blocks: nearest, and {draws} stochastic draws")
    x = normal(rng, (n // 16, 16))
    numbers = measure(x, draws, seeds[0])
    say(progress, "a 256 x 256 weight: W against W^T, 1x16 blocks and 16x16 tiles")
    w = normal(rng, (256, 256), 1 / 16)
    numbers["transpose_mismatch_1x16"] = transpose_mismatch(w, 16)
    numbers["transpose_mismatch_16x16"] = transpose_mismatch(w, (16, 16))
    return numbers, {**numbers, "draws": draws}


def measured(numbers: dict, series: dict) -> str:
    return (f"SR / RTN MSE {numbers['mse_ratio']:.2f}x; mean |bias| per value SR {numbers['sr_bias']:.2e} "
            f"({series['draws']} draws) vs RTN {numbers['rtn_bias']:.2e} (x RMS); W vs W^T differ in "
            f"{pct(numbers['transpose_mismatch_1x16'])} of entries with 1x16 blocks, "
            f"{pct(numbers['transpose_mismatch_16x16'])} with 16x16 tiles")


def verdict(numbers: dict) -> tuple[str, str]:
    ratio = numbers["mse_ratio"]
    tiles_same = numbers["transpose_mismatch_16x16"] == 0
    unbiased = abs(numbers["sr_bias_mean"]) < 0.1 * numbers["rtn_bias"]
    if abs(ratio - SOURCE_RATIO) <= 0.2 and tiles_same and unbiased:
        return "reproduced", (f"SR costs {ratio:.2f}x the MSE of nearest (source 2.09x) with no net bias, and "
                              "16x16 tiles quantize W and W^T alike")
    if ratio > 1 and tiles_same:
        return "partly", f"SR costs {ratio:.2f}x nearest's MSE (source 2.09x); tiles agree, bias {numbers['sr_bias_mean']:.1e}"
    return "not at this scale", f"SR / RTN MSE {ratio:.2f}x and 16x16 tiles {'agree' if tiles_same else 'differ'}"


def draw(ax, numbers: dict) -> None:
    """The MSE ratio and the two transpose mismatches, beside the source's ratio."""
    names = ["MSE SR / RTN", "W vs W^T, 1x16 (%)", "W vs W^T, 16x16 (%)"]
    vals = [numbers["mse_ratio"], 100 * numbers["transpose_mismatch_1x16"], 100 * numbers["transpose_mismatch_16x16"]]
    ax.bar(names, vals, color=["C0", "C1", "C2"])
    ax.axhline(SOURCE_RATIO, color="k", ls="--", lw=0.8, label="source: SR MSE 2.09x RTN")
    ax.set_title("NVFP4: stochastic vs nearest rounding; 2-D weight tiles")
    ax.legend()


FINDING = FINDINGS.register(Finding(
    NAME, "Stochastic rounding of NVFP4 elements costs about twice the MSE of nearest but is unbiased; 16x16 "
          "weight tiles make W and W^T quantize to the same values.",
    "arXiv 2509.25149; arXiv 2601.22813", "SR MSE about 2.09x RTN on Gaussian blocks, unbiased; 16x16 weight blocks",
    (1.0, 4.0), order=90, verdict=verdict, measured=measured, measure=measure_rounding, figure=draw,
    seed_use="first"))
