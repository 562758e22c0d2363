"""``nvfp4-four-over-six``: scaling each NVFP4 block's max to 6 or to 4, whichever errs less,
lowers the block error (arXiv 2512.02010).

Measured with ``fpsim.quantize(x, "nvfp4", scale_rounding=...)`` on Gaussian 1x16 blocks, and
on the real gradients of the reference task and the tiny GPT: the relative MSE
sum((q - x)^2) / sum(x^2) under the standard rule (amax to 6, tensor scale from 448) and under
4/6 (tensor scale from 256), and the share of blocks whose largest element is stored as 4 (a
block scaled to 6 stores its max as 6: its e4m3 scale is within 1/16 of exact, far from the
midpoint 5).
"""

from __future__ import annotations

import numpy as np

from ...formats import quantize
from ...numerics import fsum64
from .base import FINDINGS, Finding, pct, say
from .samples import sample

NAME = "nvfp4-four-over-six"
KINDS = ("gaussian", "reference_grads", "tinygpt_grads")
SOURCE_MSE_CHANGE, SOURCE_SHARE_FOUR = -0.163, 0.452


def measure(x: np.ndarray) -> dict:
    """Relative MSE of ``x`` (float32, length a multiple of 16) in NVFP4 1x16 blocks under both
    rules, its change, and the share of blocks 4/6 scales to 4; every sum exact, rounded once to
    float64 (:func:`fpsim.numerics.fsum64`)."""
    x = x.reshape(-1, 16)
    x64 = x.astype(np.float64)
    sq = float(fsum64(x64**2))
    out = {}
    for rule, key in ((None, "six"), ("four_over_six", "four_over_six")):
        q = quantize(x, "nvfp4", scale_rounding=rule)
        out[f"{key}_mse"] = float(fsum64((q.dequantize().astype(np.float64) - x64) ** 2)) / sq
        if rule:
            top = np.abs(q.elements.astype(np.float32)).max(axis=-1)
            out["share_four"] = float((top == 4).mean())
    out["mse_change"] = out["four_over_six_mse"] / out["six_mse"] - 1
    return out


def measure_blocks(quick: bool = True, seeds=(0,), progress=None) -> tuple[dict, dict]:
    """The numbers of every sample kind (its values drawn with the first seed), and the same as the
    figure's series."""
    n = 2**16 if quick else 2**20
    numbers = {}
    for kind in KINDS:
        say(progress, f"{kind}: NVFP4 under amax-to-6 and 4/6")
        x = sample(kind, n, seeds[0])
        x = x[: x.size - x.size % 16]
        numbers.update({f"{kind}_{k}": v for k, v in measure(x).items()})
    return numbers, dict(numbers)


def measured(numbers: dict, series: dict) -> str:
    return (f"Gaussian blocks: MSE {pct(numbers['gaussian_mse_change'])}, {pct(numbers['gaussian_share_four'])} "
            f"choose 4; reference grads {pct(numbers['reference_grads_mse_change'])}, tiny-GPT grads "
            f"{pct(numbers['tinygpt_grads_mse_change'])}")


def verdict(numbers: dict) -> tuple[str, str]:
    change, four = numbers["gaussian_mse_change"], numbers["gaussian_share_four"]
    if abs(change - SOURCE_MSE_CHANGE) <= 0.02 and abs(four - SOURCE_SHARE_FOUR) <= 0.03:
        return "reproduced", (f"4/6 changes the Gaussian block MSE by {pct(change)} with {pct(four)} of blocks "
                              "scaled to 4 (source -16.3%, 45.2%)")
    if change < 0:
        return "partly", f"4/6 lowers the MSE ({pct(change)}) but not by the source's 16.3% ({pct(four)} choose 4)"
    return "not at this scale", f"4/6 did not lower the Gaussian block MSE ({pct(change)})"


def draw(ax, numbers: dict) -> None:
    """Per sample kind, the block MSE under each rule, annotated with the change and the share scaled to 4."""
    x = np.arange(len(KINDS))
    ax.bar(x - 0.2, [numbers[f"{k}_six_mse"] for k in KINDS], 0.4, label="amax to 6 (TE)")
    ax.bar(x + 0.2, [numbers[f"{k}_four_over_six_mse"] for k in KINDS], 0.4, label="4/6")
    for i, k in enumerate(KINDS):
        ax.annotate(f"{pct(numbers[f'{k}_mse_change'])}\n{pct(numbers[f'{k}_share_four'])} to 4",
                    (i + 0.2, numbers[f"{k}_four_over_six_mse"]), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, KINDS)
    ax.set_ylabel("relative MSE, sum (q - x)^2 / sum x^2")
    ax.set_title("NVFP4 1x16 blocks: Four Over Six")
    ax.legend()


FINDING = FINDINGS.register(Finding(
    NAME, "Scaling each NVFP4 block's max to 6 or to 4, whichever errs less, lowers the quantization error.",
    "arXiv 2512.02010; NVIDIA/TransformerEngine#3068", "block MSE -16.3% on Gaussian 1x16 blocks, 45.2% of blocks "
                                                       "choose 4", (1.0, 5.0), order=80, verdict=verdict, measured=measured,
    measure=measure_blocks, figure=draw, seed_use="first"))
