"""``bf16-kahan-stochastic``: pure bfloat16 training loses small weight updates to rounding;
Kahan-compensated or stochastically rounded updates recover float32's quality (Zamirai et al.,
"Revisiting BFloat16 Training", arXiv 2010.06192).

The reference task under ``fp32``, ``bf16-pure`` (bfloat16 weights and Adam state, updates
rounded to nearest), ``bf16-kahan`` and ``bf16-stochastic``.  Reported: each final loss over
fp32's, the share of weights bf16-pure's last update left unchanged, and how much of bf16-pure's
gap to fp32 each cure closes.
"""

from __future__ import annotations

from .base import FINDINGS, Finding, Sweep, pct
from .runs import final_ratio, seed_mean, trained_steps

NAME = "bf16-kahan-stochastic"
RECIPES = ("fp32", "bf16-pure", "bf16-kahan", "bf16-stochastic")
SWEEP = Sweep("reference", RECIPES, quick_steps=15, measure_at=(-1,))


def extract(runs: dict) -> dict:
    steps = trained_steps(runs)
    numbers = {f"{n}_ratio": final_ratio(runs, n) for n in RECIPES[1:]}
    numbers["pure_stalled"] = seed_mean(r.stalled[steps - 1] for r in runs["bf16-pure"])
    numbers["steps"] = float(steps)
    return numbers


def measured(numbers: dict, series: dict) -> str:
    return (f"final loss / fp32: bf16-pure {numbers['bf16-pure_ratio']:.3f}x (its last update left "
            f"{pct(numbers['pure_stalled'])} of the weights unchanged), bf16-kahan "
            f"{numbers['bf16-kahan_ratio']:.3f}x, bf16-stochastic {numbers['bf16-stochastic_ratio']:.3f}x")


def verdict(numbers: dict) -> tuple[str, str]:
    gap = numbers["bf16-pure_ratio"] - 1
    if gap < 0.01:
        return "not at this scale", (f"in {int(numbers['steps'])} steps pure bfloat16 ends within {pct(gap, 2)} of "
                                     "float32: nothing for the cures to recover")
    closed = min(1 - (numbers[f"{n}_ratio"] - 1) / gap for n in ("bf16-kahan", "bf16-stochastic"))
    if closed >= 0.6:
        return "reproduced", (f"pure bfloat16 ends {numbers['bf16-pure_ratio']:.3f}x float32; Kahan and stochastic "
                              f"updates close at least {pct(closed, 0)} of that gap")
    if closed > 0:
        return "partly", f"the cures close only {pct(closed, 0)} of pure bfloat16's {pct(gap)} gap"
    return "not at this scale", "neither cure ends closer to float32 than pure bfloat16"


FINDING = FINDINGS.register(Finding(
    NAME, "Pure bfloat16 training loses small weight updates to rounding; Kahan-compensated or stochastically "
          "rounded updates recover float32's quality.",
    "arXiv 2010.06192 (Zamirai et al.)",
    "bf16 with nearest-rounded updates falls short of fp32; stochastic rounding or Kahan summation matches it",
    (12.0, 150.0), order=30, verdict=verdict, measured=measured, sweep=SWEEP, extract=extract,
    figure="loss-ratio", figure_options={"title": "bfloat16 updates (reference task)"}))
