"""``attention-forward-overflow``: in float16 the attention's exponentials overflow once training
sharpens the scores, the softmax returns NaN and the run dies; running softmax in float32
(autocast's policy) cures it (pytorch/pytorch#60939; huggingface/transformers#17437).

The tiny GPT with a softmax that does not subtract the row maximum (``experiments.OVERFLOW``,
``fpsim compare --task tinygpt --provoke-overflow``) under ``fp16-master`` (float16 model,
float32 masters, no scaler: the first overflow is fatal) and ``fp16-amp`` (float32 parameters,
float16 matmuls, softmax in float32, GradScaler).  Reported: the step fp16-master died at, the
op that made the first inf, and fp16-amp's answer accuracy.  Full runs: 100 steps of the task's
schedule; quick runs: 20 steps at four times the learning rate after a 5-step warm-up, so that
the scores sharpen within them.
"""

from __future__ import annotations

import math

import numpy as np

from .base import FINDINGS, Finding, Sweep, pct
from .runs import metric, seed_mean

NAME = "attention-forward-overflow"
RECIPES = ("fp16-master", "fp16-amp")
# OVERFLOW (experiments.tinygpt): attn_stable=False; quick runs at four times the rate after a 5-step warm-up
SWEEP = Sweep("tinygpt", RECIPES, quick_steps=20, full_steps=100, settings={"attn_stable": False},
              quick_settings={"lr": 2e-2, "warmup": 5}, measure_at=(-1,))


def extract(runs: dict) -> tuple[dict, dict]:
    died = [r.died_at for r in runs["fp16-master"]]
    first = runs["fp16-master"][0].nonfinite
    numbers = {"fp16_died": float(np.mean([d is not None for d in died])),
               "fp16_died_at": float(np.mean([d for d in died if d is not None])) if any(d is not None for d in died)
               else math.nan,
               "amp_died": float(np.mean([r.died_at is not None for r in runs["fp16-amp"]])),
               "amp_accuracy": seed_mean(metric(r, "accuracy") for r in runs["fp16-amp"]),
               "steps": float(len(runs["fp16-amp"][0].losses))}
    series = {n: [list(r.losses) for r in rs] for n, rs in runs.items()}
    series["first_inf"] = "" if first is None else f"{first.op} in {first.scope} ({first.kind})"
    return numbers, series


def measured(numbers: dict, series: dict) -> str:
    where = f"; first inf: {series['first_inf']}" if series["first_inf"] else ""
    at = f" (at step {numbers['fp16_died_at']:.0f})" if numbers["fp16_died"] else ""
    return (f"fp16-master died in {pct(numbers['fp16_died'], 0)} of runs{at}{where}; fp16-amp died in "
            f"{pct(numbers['amp_died'], 0)}, answer accuracy {pct(numbers['amp_accuracy'])}")


def verdict(numbers: dict) -> tuple[str, str]:
    if numbers["fp16_died"] == 1 and numbers["amp_died"] == 0:
        return "reproduced", (f"float16 attention overflowed and killed every run (step {numbers['fp16_died_at']:.0f}); "
                              "with softmax in float32 (autocast) every run lived")
    if numbers["fp16_died"] > 0 and numbers["amp_died"] < numbers["fp16_died"]:
        return "partly", f"float16 died in {pct(numbers['fp16_died'], 0)} of runs, autocast in {pct(numbers['amp_died'], 0)}"
    return "not at this scale", (f"in {int(numbers['steps'])} steps the scores never grew past float16's exp range"
                                 if numbers["fp16_died"] == 0 else "autocast did not save the runs")


def draw(ax, series: dict) -> None:
    """Each run's training loss, float16 in red, autocast in blue."""
    for name in RECIPES:
        curves = series[name]
        for i, c in enumerate(curves):
            ax.semilogy(c, color="C0" if name == "fp16-amp" else "C3", label=name if i == 0 else None)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_title("tiny GPT, softmax without max-subtraction: float16 vs autocast")
    ax.legend()


FINDING = FINDINGS.register(Finding(
    NAME, "In float16 the attention's exponentials overflow once training sharpens the scores and the run dies; "
          "softmax in float32 (autocast) cures it.",
    "pytorch/pytorch#60939; huggingface/transformers#17437",
    "q.k / exp reach inf in float16, softmax returns NaN; fixed by upcasting softmax to float32", (12.0, 40.0),
    order=20, verdict=verdict, measured=measured, sweep=SWEEP, extract=extract, figure=draw))
