"""``ptq-degrades-with-training``: post-training quantization costs more loss the longer a model
has trained (Kumar et al., "Scaling Laws for Precision", arXiv 2411.04330).

The tiny GPT trained in float32 (its task's Adam, warm-up and cosine schedule), its weights kept
every ``len / CHECKPOINTS`` steps along the one run.  Each checkpoint's Linear weights (attention,
MLP and output head; embeddings and LayerNorms stay float32) are quantized after training into

- ``fp8``: e4m3fn with one power-of-two scale per tensor, ``2^floor(log2(448 / amax))``
  (``lowp.compute_scale``), saturating, then divided back (exact);
- ``mxfp4``: e2m1 in blocks of 32 along each weight's input axis (the GEMM's K), e8m0 floor scales;
- ``nvfp4``: e2m1 in blocks of 16 along the input axis, e4m3 block scales and a float32 tensor scale,

and evaluated (cross-entropy on the task's fixed evaluation batch, float32 activations).  The
loss increase is the quantized checkpoint's loss minus the float32 checkpoint's; the numbers are
its seed mean at every checkpoint and, per format, how it grows in the first half of training
(``*_early_rise``, while the model learns the task) and in the second (``*_late_rise``), each with
the share of seeds on which it grows (:func:`summarize`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import nn
from ...formats import quantize, round_to
from ...lowp import compute_scale
from ...numerics import mean64
from ..tinygpt import TinyGPTTask
from .base import FINDINGS, Finding, Sweep
from .runs import Checkpointed, metric

NAME = "ptq-degrades-with-training"
FORMATS = ("fp8", "mxfp4", "nvfp4")
CHECKPOINTS = 10  # checkpoints after the initial weights


def quantize_weight(w: np.ndarray, fmt: str) -> np.ndarray:
    """``w`` (float32, (out, in)) quantized into ``fmt`` and back to float32 (module docstring)."""
    if fmt == "fp8":
        amax = float(np.abs(w).max())
        s = compute_scale(amax, "float8_e4m3fn")
        return (round_to(w * s, "float8_e4m3fn", saturate=True) / s).astype(np.float32)
    if fmt in ("mxfp4", "nvfp4"):
        return quantize(w, "mxfp4_e2m1" if fmt == "mxfp4" else "nvfp4", axis=-1).dequantize().astype(np.float32)
    raise ValueError(f"quantize_weight: unknown format {fmt!r}; known: {', '.join(FORMATS)}")


def linear_weights(model) -> list:
    """The weight tensors of every ``nn.Linear`` in ``model``, in module order."""
    return [m.weight for _, m in model.named_modules() if type(m) is nn.Linear]


def ptq_losses(task, model) -> dict:
    """{"fp32": the evaluation loss, fmt: the loss with every Linear weight quantized into fmt}; the
    model's weights are restored afterwards."""
    weights = linear_weights(model)
    saved = [w.data.copy() for w in weights]
    out = {"fp32": task.evaluate(model)[0]}
    try:
        for fmt in FORMATS:
            for w, orig in zip(weights, saved):
                w.data = w.backend.asarray(quantize_weight(np.asarray(orig, np.float32), fmt))
            out[fmt] = task.evaluate(model)[0]
    finally:
        for w, orig in zip(weights, saved):
            w.data = orig
    return out


@dataclass(frozen=True)
class PTQTask(Checkpointed, TinyGPTTask):
    """The tiny GPT trained in float32 and quantized after training at its checkpoints: step 0, every
    ``steps // checkpoints`` steps and the end (each step's :func:`ptq_losses` taken as the step's
    loss is asked for, before its forward pass: the weights then are that checkpoint's).  Its
    metrics: ``ptq_at`` (the checkpoint steps) and ``ptq_losses`` ({name: losses})."""

    trace_nonfinite = False
    checkpoints: int = CHECKPOINTS

    def model(self, seed: int = 0):
        m = super().model(seed)
        m.ptq = ([], {k: [] for k in ("fp32", *FORMATS)})  # filled at each checkpoint
        return m

    def _checkpoint(self, model, step: int) -> None:
        at, losses = model.ptq
        at.append(step)
        for k, v in ptq_losses(self, model).items():
            losses[k].append(v)

    def metrics(self, model, recipe) -> dict:
        self._checkpoint(model, self.steps)  # the last checkpoint: the trained model
        at, losses = model.ptq
        return {"ptq_at": list(at), "ptq_losses": {k: list(v) for k, v in losses.items()}}


# quick runs: 20 steps, 4 checkpoints; full runs: the task's 250 steps, 10
SWEEP = Sweep(PTQTask, ("fp32",), quick_steps=20, quick_settings={"steps": 20, "checkpoints": 4})


def extract(runs: dict) -> tuple[dict, dict]:
    """Per seed the loss increases at the checkpoints, summarized (:func:`summarize`)."""
    per_seed = []
    for r in runs["fp32"]:
        at, losses = metric(r, "ptq_at"), metric(r, "ptq_losses")
        per_seed.append({f: np.asarray(losses[f]) - np.asarray(losses["fp32"]) for f in FORMATS} |
                        {"fp32": np.asarray(losses["fp32"])})
    numbers, _ = summarize(at, per_seed, at[-1])
    return numbers, {f: np.asarray([s[f] for s in per_seed]) for f in FORMATS} | {"steps": list(at)}


def measured(numbers: dict, series: dict) -> str:
    return describe(numbers, series["steps"])


def summarize(at: list, per_seed: list, steps: int) -> tuple[dict, str]:
    """The numbers (module docstring) and the one-line measurement from the checkpoint steps ``at``
    and, per seed, {"fp32": float32 losses, fmt: loss increases} at those steps (every mean
    :func:`fpsim.numerics.mean64`).  ``early_rise``:
    the increase at the middle checkpoint less that at the first after step 0; ``late_rise``: the
    mean increase over the checkpoints after the middle less that at the middle."""
    numbers = {"steps": float(steps), "seeds": float(len(per_seed))}
    mid = len(at) // 2
    for f in ("fp32", *FORMATS):
        curve = mean64(np.asarray([s[f] for s in per_seed]), axis=0)
        for step, v in zip(at, curve):
            numbers[f"{f}_{'loss' if f == 'fp32' else 'increase'}_at_{step}"] = float(v)
        if f == "fp32":
            continue
        for key, rises in (("early", [float(s[f][mid] - s[f][1]) for s in per_seed]),
                           ("late", [float(mean64(s[f][mid + 1:]) - s[f][mid]) for s in per_seed])):
            numbers[f"{f}_{key}_rise"] = float(mean64(rises))
            numbers[f"{f}_{key}_rise_share"] = float(np.mean([r > 0 for r in rises]))
    return numbers, describe(numbers, at)


def describe(numbers: dict, at: list) -> str:
    """fpsim's number in one line, from the numbers and the checkpoint steps ``at``."""
    n, last, mid = int(numbers["seeds"]), at[-1], len(at) // 2
    return (f"loss increase at step {at[1]} / {at[mid]} / {last} (seed mean, {n} seed{'s' * (n > 1)}): " +
            ", ".join(f"{f} " + " / ".join(f"{numbers[f'{f}_increase_at_{t}']:+.3g}" for t in (at[1], at[mid], last))
                      for f in FORMATS) +
            f"; float32 loss {numbers[f'fp32_loss_at_{at[1]}']:.3g} / {numbers[f'fp32_loss_at_{at[mid]}']:.3g} / "
            f"{numbers[f'fp32_loss_at_{last}']:.3g}")


def verdict(numbers: dict) -> tuple[str, str]:
    """``reproduced`` when, for at least two formats, the increase still grows over the second half
    of training on every seed; ``partly`` when it grows on every seed while the model learns (the
    first half) but not after; else ``not at this scale``."""
    if numbers["steps"] < 100:
        return "partly", (f"after {int(numbers['steps'])} steps the model has barely learned the task; the claim is "
                          "about long training")
    n = int(numbers["seeds"])

    def grows(key):
        return [f for f in FORMATS if numbers[f"{f}_{key}_rise"] > 0 and numbers[f"{f}_{key}_rise_share"] == 1.0]

    said = "; ".join(f"{key} rise (seed mean) " + ", ".join(f"{f} {numbers[f'{f}_{key}_rise']:+.3g} "
                                                           f"({numbers[f'{f}_{key}_rise_share']:.0%} of seeds)"
                                                           for f in FORMATS) for key in ("early", "late"))
    if len(grows("late")) >= 2:
        return "reproduced", (f"the loss increase from quantization still grows over the second half of training on "
                              f"all {n} seeds for {', '.join(grows('late'))} ({said})")
    if len(grows("early")) >= 2:
        return "partly", (f"the increase grows on every seed while the model learns the task ({', '.join(grows('early'))}) "
                          f"but not over the second half of the run, where the cosine schedule winds the rate down "
                          f"({said})")
    return "not at this scale", f"the increase does not grow with training on every seed for two formats ({said})"


def draw(ax, series: dict) -> None:
    """Per format, the loss increase at each checkpoint (seed mean, min-max band)."""
    at = series["steps"]
    for f in FORMATS:
        c = np.asarray(series[f], np.float64)
        line, = ax.plot(at, c.mean(axis=0), marker="o", label=f)
        ax.fill_between(at, c.min(axis=0), c.max(axis=0), color=line.get_color(), alpha=0.2)
    ax.axhline(0.0, color="k", lw=0.8)
    ax.set_xlabel("training step of the checkpoint")
    ax.set_ylabel("eval loss increase from PTQ (seed mean, min-max)")
    ax.set_title("tiny GPT: post-training quantization along one run")
    ax.legend(fontsize=8)


FINDING = FINDINGS.register(Finding(
    NAME, "Post-training quantization degrades a model more the longer it has trained.",
    "arXiv 2411.04330 (Scaling Laws for Precision)",
    "the loss increase from post-training quantization grows with the tokens seen during pretraining",
    (12.0, 75.0), order=150, verdict=verdict, measured=measured, sweep=SWEEP, extract=extract, figure=draw,
    seeds=(0, 1, 2)))
