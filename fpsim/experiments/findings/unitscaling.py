"""``unit-scaling``: when every tensor has unit variance at initialisation, fp8 trains at scale 1,
with no delayed or current scaling (Blake et al., "Unit Scaling", arXiv 2303.11257).

The reference task twice.  As it is (PyTorch's initialisation, the mean squared error over 2^20
outputs, whose gradients sit near 1e-8): ``fp32``, ``fp8-delayed``, ``fp8-scale1-start``
(delayed scaling whose first step runs at scale 1) and ``fp8-fixed1`` (every cast at scale 1,
always: ``lowp.FixedScaling``).  Unit-scaled (:class:`UnitReferenceTask`: ``nn.UnitMLP``, the
same sizes, N(0, 1) weights, scaled ops, the input divided by the data's root mean square and
the output multiplied by it, ``nn.unit_mse_loss``): ``fp32`` and ``fp8-fixed1``.  Each fp8 run's
final loss is set over its own model's fp32 final loss, seed by seed; the numbers are the seed
mean, min and max of that ratio.  Full runs add the tiny GPT (:class:`UnitTinyGPTTask`): ``fp32``
and ``fp8-delayed`` as it is, ``fp32`` and ``fp8-fixed1`` unit-scaled; quick runs leave it out.
At initialisation :func:`scale1_casts` counts, per kind of tensor cast, the share of values fp8
at scale 1 flushes to zero or saturates in each model.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import numpy as np

from ... import nn
from ...lowp import FixedScaling
from ...nn import unit
from ...numerics import mean64
from ..recipes import Recipe
from ..tasks import ReferenceTask
from ..tinygpt import TinyGPTTask
from .base import FINDINGS, Finding, Sweep, pct, say
from .fp8scale import SCALE1
from .runs import ratios, seed_mean, trained_steps

NAME = "unit-scaling"
FIXED1 = Recipe("fp8-fixed1", "float32", layers=FixedScaling(),
                description="fp8 matmuls with every cast at scale 1, never rescaled (e4m3 / e5m2, float32 masters)")
PLAIN = ("fp32", "fp8-delayed", SCALE1, FIXED1)
UNIT = ("fp32", FIXED1)
RATIOS = ("delayed", "scale1_start", "fixed1", "unit_fixed1")  # the fp8 runs, in the numbers' names


@dataclass(frozen=True)
class UnitReferenceTask(ReferenceTask):
    """The reference task with the unit-scaled MLP (module docstring) and the unit-scaled loss.
    ``lr``: Adam moves every weight by about ``lr`` a step, and unit-scaled weights are about
    sqrt(3 * fan_in) times PyTorch's, so the reference task's rate times sqrt(3 * 32)."""

    lr: float = 1e-2 * math.sqrt(96)

    def data_rms(self) -> float:
        """The data's root mean square: the exact mean of the squares rounded once (:func:`fpsim.numerics.mean64`)."""
        return math.sqrt(mean64(self.data().astype(np.float64) ** 2))

    def model(self, seed: int = 0):
        rms = self.data_rms()
        return unit.UnitMLP([self.dim, *self.hidden, self.dim], activation="tanh", seed=seed,
                            input_scale=1 / rms, output_scale=rms)

    def loss(self, model, batch, recipe):
        x, target = batch
        with recipe.forward_context():
            pred = model(x)
        return unit.unit_mse_loss(pred.to("float32"), target)


@dataclass(frozen=True)
class UnitTinyGPTTask(TinyGPTTask):
    """The tiny GPT unit-scaled: ``nn.unit.unit_scale_`` (every Linear a ``UnitLinear``, GELU a
    unit GELU; the embeddings are N(0, 1) already, the LayerNorms unit-variance by design), the
    cross-entropy's gradient unit-scaled by ``nn.unit.unit_ce_logits``.  ``lr``: ten times the tiny
    GPT's - unit-scaled Linear weights are sqrt(3 * 64) (about 14) times PyTorch's, while the
    embeddings and LayerNorms are not; of 5e-3, 2e-2 and 5e-2, 5e-2 gave seed 0's float32 run the
    lowest evaluation loss (0.072, against 0.080 for the model as it is)."""

    lr: float = 5e-2

    def model(self, seed: int = 0):
        return unit.unit_scale_(super().model(seed), seed)

    def loss(self, model, seq, recipe=None):
        with recipe.forward_context() if recipe is not None else contextlib.nullcontext():
            logits, target = self.logits_and_targets(model, seq)
            return nn.cross_entropy(unit.unit_ce_logits(logits.to("float32")), target)


def scale1_casts(task, seed: int = 0) -> dict:
    """What fp8 at scale 1 does to each kind of tensor it casts at initialisation: one forward and
    backward of ``task`` under ``fp8-fixed1`` (e4m3 inputs and weights, e5m2 output gradients,
    every Linear), and per kind the share of the values cast that flushed to zero and that
    saturated (the scaling states' counts, all Linears together)."""
    run = FIXED1.prepare(task.model(seed), lr=task.lr, seed=seed, optimizer=task.optimizer)
    batch = task.batches(FIXED1, run.model.parameters()[0].backend)(0)
    run.forward_backward(lambda model: task.loss(model, batch, FIXED1))
    totals = {}
    for st in run.scaling:
        kind = st.name.rsplit(".", 1)[-1]
        t = totals.setdefault(kind, [0, 0, 0])
        for i, k in enumerate(("n", "underflow", "saturated")):
            t[i] += st.counts[k]
    return {f"{kind}_{what}": v / n for kind, (n, under, sat) in totals.items()
            for what, v in (("flushed", under), ("saturated", sat))}


SWEEPS = (  # as it is, and unit-scaled; the tiny GPT in full runs only
    Sweep("reference", PLAIN, quick_steps=10, name="plain"),
    Sweep(UnitReferenceTask, UNIT, quick_steps=10, name="unit"),
    Sweep("tinygpt", ("fp32", "fp8-delayed"), full_steps=TinyGPTTask.steps, modes=("full",), name="gpt"),
    Sweep(UnitTinyGPTTask, UNIT, full_steps=TinyGPTTask.steps, modes=("full",), name="gpt-unit"),
)


def measure_casts(quick: bool = True, seeds=(0,), progress=None) -> dict:
    """:func:`scale1_casts` at the first seed's initial weights, per model (the tiny GPT's in full runs)."""
    tasks = (("plain", ReferenceTask()), ("unit", UnitReferenceTask()))
    if not quick:
        tasks += (("gpt_plain", TinyGPTTask()), ("gpt_unit", UnitTinyGPTTask()))
    say(progress, "what fp8 at scale 1 flushes and saturates at initialisation")
    return {f"{name}_{k}": v for name, task in tasks for k, v in scale1_casts(task, seeds[0]).items()}


def extract(results) -> tuple[dict, dict]:
    """The reference task's ratios (module docstring), and the tiny GPT's where a full run trained it."""
    runs, uruns = results["plain"], results["unit"]
    numbers = {"steps": float(trained_steps(runs))}
    numbers.update(_spread("delayed", ratios(runs, "fp8-delayed")) | _spread("scale1_start", ratios(runs, SCALE1.name))
                   | _spread("fixed1", ratios(runs, FIXED1.name)) | _spread("unit_fixed1", ratios(uruns, FIXED1.name)))
    numbers["fp32_loss"] = seed_mean(r.final_loss for r in runs["fp32"])
    numbers["unit_fp32_loss"] = seed_mean(r.final_loss for r in uruns["fp32"])
    if "gpt" in results:
        g, ug = results["gpt"], results["gpt-unit"]
        numbers.update(_spread("gpt_delayed", ratios(g, "fp8-delayed")) | _spread("gpt_unit_fixed1", ratios(ug, FIXED1.name))
                       | {"gpt_fp32_loss": seed_mean(r.final_loss for r in g["fp32"]),
                          "gpt_unit_fp32_loss": seed_mean(r.final_loss for r in ug["fp32"])})
    curves = {"fp8-delayed": _curve(runs, "fp8-delayed"), "scale-1 start": _curve(runs, SCALE1.name),
              "fixed scale 1": _curve(runs, FIXED1.name), "unit-scaled, fixed scale 1": _curve(uruns, FIXED1.name)}
    return numbers, {"curves": curves, "seeds": len(results.seeds)}


def measured(numbers: dict, series: dict) -> str:
    return describe(numbers, series["seeds"])


def describe(numbers: dict, n: int) -> str:
    """fpsim's number in one line, from the numbers of ``n`` seeds (the tiny GPT's where present)."""
    out = (f"final loss / own fp32 (mean, min-max over {n} seed{'s' * (n > 1)}): unit-scaled fp8 at scale 1 "
           f"{_span(numbers, 'unit_fixed1')}; fp8-delayed {_span(numbers, 'delayed')}; scale-1 start "
           f"{_span(numbers, 'scale1_start')}; fixed scale 1 without unit scaling {_span(numbers, 'fixed1')}; fp32 "
           f"losses {numbers['fp32_loss']:.3g} (plain), {numbers['unit_fp32_loss']:.3g} (unit-scaled); at "
           f"initialisation scale 1 flushes {pct(numbers['plain_grad_output_flushed'])} of the output gradients "
           f"(unit-scaled: {pct(numbers['unit_grad_output_flushed'], 4)})")
    if "gpt_unit_fixed1_mean" in numbers:
        out += (f"; tiny GPT: unit-scaled fp8 at scale 1 {_span(numbers, 'gpt_unit_fixed1')}, fp8-delayed "
                f"{_span(numbers, 'gpt_delayed')} (eval losses {numbers['gpt_fp32_loss']:.3g} plain, "
                f"{numbers['gpt_unit_fp32_loss']:.3g} unit-scaled, fp32; scale 1 flushes "
                f"{pct(numbers['gpt_plain_grad_output_flushed'])} / {pct(numbers['gpt_unit_grad_output_flushed'], 4)} "
                "of the output gradients at initialisation)")
    return out


def _spread(key: str, values: list) -> dict:
    return {f"{key}_mean": float(mean64(values)), f"{key}_min": float(np.min(values)),
            f"{key}_max": float(np.max(values))}


def _curve(runs: dict, name: str) -> np.ndarray:
    """Seed mean (:func:`fpsim.numerics.mean64`), step by step, of ``name``'s loss over fp32's."""
    n = min(len(r.losses) for r in runs[name])
    return mean64(np.asarray([np.asarray(r.losses[:n]) / np.asarray(b.losses[:n])
                              for r, b in zip(runs[name], runs["fp32"])], np.float64), axis=0)


def _span(numbers: dict, key: str) -> str:
    return f"{numbers[f'{key}_mean']:.3f}x ({numbers[f'{key}_min']:.3f}-{numbers[f'{key}_max']:.3f})"


def verdict(numbers: dict) -> tuple[str, str]:
    """From the reference task's ratios, and the tiny GPT's where a full run measured them: on each
    model unit-scaled fp8 at scale 1 "holds" when its seed mean and its worst seed are no further
    from float32 than fp8-delayed's, and "trains" when its worst seed is within 1.5x."""
    models = [("the reference task", "")] + ([("the tiny GPT", "gpt_")] if "gpt_unit_fixed1_mean" in numbers else [])
    unit_mean, delayed = numbers["unit_fixed1_mean"], numbers["delayed_mean"]
    if numbers["steps"] < 100:
        return "partly", (f"after {int(numbers['steps'])} steps unit-scaled fp8 at scale 1 is at {unit_mean:.3f}x its "
                          f"float32 loss against fp8-delayed's {delayed:.3f}x; the claim is about whole trainings")
    said = "; ".join(f"{m}: unit-scaled fp8 at fixed scale 1 {numbers[f'{p}unit_fixed1_mean']:.3f}x its float32 loss "
                     f"(worst seed {numbers[f'{p}unit_fixed1_max']:.3f}x), fp8-delayed {numbers[f'{p}delayed_mean']:.3f}x "
                     f"(worst {numbers[f'{p}delayed_max']:.3f}x)" for m, p in models)
    trains = all(numbers[f"{p}unit_fixed1_max"] <= 1.5 for _, p in models)
    holds = all(numbers[f"{p}unit_fixed1_mean"] <= numbers[f"{p}delayed_mean"]
                and numbers[f"{p}unit_fixed1_max"] <= numbers[f"{p}delayed_max"] for _, p in models)
    if not trains:
        return "not at this scale", f"unit-scaled fp8 at scale 1 ends beyond 1.5x its float32 loss on some seed ({said})"
    if holds:
        return "reproduced", (f"{said}: with unit scaling no per-tensor scale is needed (a scale-1 start without it: "
                              f"{numbers['scale1_start_mean']:.3f}x)")
    return "partly", f"unit-scaled fp8 trains at fixed scale 1 but not as close as delayed scaling ({said})"


def draw(ax, series: dict) -> None:
    """Each fp8 run's loss over its own model's fp32 loss, step by step (seed mean)."""
    for label, c in series["curves"].items():
        ax.plot(np.arange(1, len(c) + 1), c, label=label)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss / own model's fp32 loss (seed mean)")
    ax.set_title("fp8 at scale 1, with and without unit scaling")
    ax.legend(fontsize=8)


FINDING = FINDINGS.register(Finding(
    NAME, "With unit-variance weights, activations and gradients at initialisation (scaled ops), fp8 trains "
          "at scale 1, with no delayed or current scaling.",
    "arXiv 2303.11257 (Graphcore); u-muP",
    "BERT-Large trained in fp8 at scale 1 with no degradation", (20.0, 350.0), order=130, verdict=verdict,
    measured=measured, measure=measure_casts, sweep=SWEEPS, extract=extract, figure=draw, seeds=(0, 1, 2)))
