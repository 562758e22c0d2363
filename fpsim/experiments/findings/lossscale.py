"""``fp16-loss-scaling``: float16 gradients below its range flush to zero and training falls
behind; scaling the loss keeps them (Micikevicius et al. 2018, arXiv 1710.03740) - the 2018
miniature of ``fpsim compare``.

The reference task (an autoencoder whose loss averages 2^20 outputs, so its gradients are tiny)
under ``fp32``, ``fp16-master`` (float16 model, float32 master weights, no scaling) and
``fp16-dynamic`` (plus PyTorch's GradScaler).  Reported: the share of non-zero activation
gradients float16 flushed to zero at the last step, and each final loss over fp32's.
"""

from __future__ import annotations

from .base import FINDINGS, Finding, Sweep, pct
from .runs import final_ratio, seed_mean, trained_steps

NAME = "fp16-loss-scaling"
RECIPES = ("fp32", "fp16-master", "fp16-dynamic")
SWEEP = Sweep("reference", RECIPES, quick_steps=20, measure_at=(-1,))


def extract(runs: dict) -> dict:
    steps = trained_steps(runs)
    return {"unscaled_flushed": seed_mean(r.act_grad_flushed[steps - 1] for r in runs["fp16-master"]),
            "scaled_flushed": seed_mean(r.act_grad_flushed[steps - 1] for r in runs["fp16-dynamic"]),
            "unscaled_ratio": final_ratio(runs, "fp16-master"), "scaled_ratio": final_ratio(runs, "fp16-dynamic"),
            "steps": float(steps)}


def measured(numbers: dict, series: dict) -> str:
    return (f"at step {int(numbers['steps']) - 1}: fp16 without scaling flushed {pct(numbers['unscaled_flushed'])} of "
            f"the activation gradients (with GradScaler {pct(numbers['scaled_flushed'], 3)}); final loss / fp32 "
            f"{numbers['unscaled_ratio']:.3f}x unscaled, {numbers['scaled_ratio']:.3f}x scaled")


def verdict(numbers: dict) -> tuple[str, str]:
    lost, kept = numbers["unscaled_flushed"], numbers["scaled_flushed"]
    behind, scaled = numbers["unscaled_ratio"], numbers["scaled_ratio"]
    if lost < 0.01 or kept >= 0.01:
        return "not at this scale", (f"float16 flushed {pct(lost)} of the gradients unscaled and {pct(kept)} scaled: "
                                     "no difference for scaling to make")
    if behind > 1.02 and scaled < 1.01:
        return "reproduced", (f"unscaled float16 loses {pct(lost)} of the activation gradients and ends {behind:.3f}x "
                              f"fp32's loss; loss scaling keeps them and ends {scaled:.3f}x")
    return "partly", (f"float16 loses {pct(lost)} of the gradients without scaling and scaling keeps them, but in "
                      f"{int(numbers['steps'])} steps the losses have not separated ({behind:.3f}x vs {scaled:.3f}x)")


FINDING = FINDINGS.register(Finding(
    NAME, "Float16 gradients below its range flush to zero and training falls behind float32; scaling the loss "
          "keeps them and matches float32.",
    "arXiv 1710.03740 (Micikevicius et al. 2018)",
    "Multibox SSD in float16 without loss scaling falls behind (most activation gradients below 2^-24 are lost); "
    "a loss scale of 8 matches float32", (15.0, 150.0), order=10, verdict=verdict, measured=measured,
    sweep=SWEEP, extract=extract, figure="loss-ratio", figure_options={"title": "fp16: loss scaling (reference task)"}))
