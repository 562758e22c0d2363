"""``fp4-sqrt3-rule``: quantized training stops helping once the gradient's norm falls below about
sqrt(3) times the quantization noise's (arXiv 2505.19115, "FP4 All the Way"; the abstract of its
second version reads 3 sqrt(3), so the step the ratio passes that threshold is reported too).

The miniature: the reference autoencoder (2,048 samples in quick runs and full ones alike, so the
steps are affordable) trained with every Linear in NVFP4 (16x16 weight tiles, stochastically
rounded gradients, as the paper's backward), Adam at the task's learning rate; at every step a
:class:`~fpsim.experiments.gradnoise.GradientNoiseMonitor` measures ||g|| / ||Q(g) - g|| against
the float32 gradient at the same weights.  A float32 run from the same initial weights is the
control.  Reported: the first step c where the ratio's 5-step mean is below sqrt(3), and the gap
between the two runs' losses (NVFP4 / float32, means over 5 steps) at c and at the end: a gap
that widens after c is quantized training falling behind.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...lowp import BlockScaling
from ...numerics import mean64
from ..gradnoise import SQRT3, GradientNoiseMonitor
from ..recipes import Recipe
from ..run import Run
from ..tasks import ReferenceTask
from .base import FINDINGS, Finding, Sweep
from .runs import metric, trained_steps

NAME = "fp4-sqrt3-rule"
WINDOW = 5


@dataclass(frozen=True)
class NoiseTask(ReferenceTask):
    """The reference task whose model carries a float32 twin (``model.twin``, in a tuple: a companion,
    not a submodule) for :class:`NoiseRecipe`'s monitor, and whose metrics add the monitor's
    ``noise_ratios`` (one per step) where a monitor watched the run."""

    def model(self, seed: int = 0):
        m = super().model(seed)
        m.twin = (super().model(seed),)
        return m

    def metrics(self, model, recipe) -> dict:
        out = super().metrics(model, recipe)
        mon = getattr(model, "noise", None)
        return out if mon is None else {**out, "noise_ratios": list(mon.ratios)}


@dataclass
class MonitoredRun(Run):
    """A :class:`~fpsim.experiments.run.Run` that measures ||g|| / ||Q(g) - g|| after every backward
    pass, before the update (``monitor``: a GradientNoiseMonitor, called on the step's own loss)."""

    monitor: object = None

    def forward_backward(self, loss_fn, hook=None):
        self._loss_fn = loss_fn
        return super().forward_backward(loss_fn, hook)

    def update(self) -> bool:
        self.monitor(self.model, self._loss_fn)
        return super().update()


@dataclass(frozen=True)
class NoiseRecipe(Recipe):
    """A recipe whose run is a :class:`MonitoredRun` (on a :class:`NoiseTask`, whose model brings its twin)."""

    def prepare(self, model, **kw) -> Run:
        mon = GradientNoiseMonitor(model.twin[0])
        run = super().prepare(model, **kw)
        model.noise = mon  # read back by NoiseTask.metrics
        return MonitoredRun(run.recipe, run.model, run.opt, run.scaler, run.scaling, monitor=mon)


RECIPE = NoiseRecipe("nvfp4-all", "float32",
                     layers=BlockScaling("nvfp4", weight_block=(16, 16), grad_rounding="stochastic"),
                     description="NVFP4 on every Linear, 16x16 weight tiles, SR gradients")
# 2,048 samples in quick runs and full ones alike; the float32 control from the same initial weights
SWEEP = Sweep(NoiseTask, (RECIPE, "fp32"), quick_steps=40, full_steps=150, settings={"n": 2048, "steps": 150},
              quick_settings={"steps": 40})


def _smooth(a: np.ndarray, at: int) -> float:
    return float(mean64(a[max(0, at - WINDOW + 1): at + 1]))


def extract(runs: dict) -> tuple[dict, dict]:
    """The crossing steps and the loss gaps (module docstring) of the first seed's runs."""
    run = runs[RECIPE.name][0]
    mon = GradientNoiseMonitor(None)
    mon.ratios = list(metric(run, "noise_ratios"))
    lq, lf = np.asarray(run.losses), np.asarray(runs["fp32"][0].losses)
    steps = trained_steps(runs)
    c = mon.first_below(SQRT3, WINDOW)
    c3 = mon.first_below(3 * SQRT3, WINDOW)  # the paper's v2 abstract reads 3 sqrt(3): reported beside it
    end = steps - 1
    numbers = {"ratio_start": mon.ratios[0], "ratio_end": float(mean64(mon.ratios[-WINDOW:])),
               "cross_step": float("nan") if c is None else float(c),
               "gap_at_cross": float("nan") if c is None else _smooth(lq, c) / _smooth(lf, c),
               "gap_at_end": _smooth(lq, end) / _smooth(lf, end), "steps": float(steps),
               "cross_step_3sqrt3": float("nan") if c3 is None else float(c3)}
    return numbers, {"ratio": mon.ratios, "loss_nvfp4": lq, "loss_fp32": lf, "cross": c, "cross_3sqrt3": c3}


def measured(numbers: dict, series: dict) -> str:
    c, c3 = series["cross"], series["cross_3sqrt3"]
    cross = "never" if c is None else f"at step {c}"
    return (f"||g|| / ||Q(g) - g|| {numbers['ratio_start']:.1f} at step 0, below sqrt(3) {cross}, "
            f"{numbers['ratio_end']:.2f} at the end; NVFP4 / float32 loss {numbers['gap_at_cross']:.2f}x at the "
            f"crossing, {numbers['gap_at_end']:.2f}x at the end; below 3 sqrt(3) (the v2 abstract's "
            f"threshold) {'never' if c3 is None else f'at step {c3}'}")


def verdict(numbers: dict) -> tuple[str, str]:
    c, start = numbers["cross_step"], numbers["ratio_start"]
    if not c == c:  # NaN: no crossing
        return "not at this scale", f"the ratio stayed above sqrt(3) for all {int(numbers['steps'])} steps"
    grew = numbers["gap_at_end"] / numbers["gap_at_cross"]
    if start > SQRT3 and grew >= 1.2:
        return "reproduced", (f"the ratio fell below sqrt(3) at step {int(c)}, and from there NVFP4's loss fell "
                              f"behind float32's by a further {grew:.2f}x")
    return "partly", (f"the ratio fell below sqrt(3) at step {int(c)}, but the loss gap to float32 changed only "
                      f"{grew:.2f}x after it")


def draw(ax, series: dict) -> None:
    """The noise ratio per step against sqrt(3), and both runs' losses on a second axis."""
    c = series["cross"]
    steps = np.arange(len(series["ratio"]))
    ax.semilogy(steps, series["ratio"], color="C0", label="||g|| / ||Q(g) - g|| (NVFP4)")
    ax.axhline(SQRT3, color="C0", ls="--", lw=0.8, label="sqrt(3)")
    if c is not None:
        ax.axvline(c, color="k", lw=0.8, ls=":", label=f"crossing, step {c}")
    ax.set_xlabel("step")
    ax.set_ylabel("gradient / quantization noise")
    loss = ax.twinx()
    loss.semilogy(steps, series["loss_nvfp4"], color="C3", label="loss, NVFP4")
    loss.semilogy(steps, series["loss_fp32"], color="C2", label="loss, float32")
    loss.set_ylabel("training loss")
    lines = ax.get_legend_handles_labels()
    more = loss.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8)
    ax.set_title("FP4 training: the sqrt(3) rule")


FINDING = FINDINGS.register(Finding(
    NAME, "Quantized (FP4) training stops helping once ||g|| falls below about sqrt(3) times the quantization "
          "noise ||Q(g) - g||.",
    "arXiv 2505.19115", "quantized training is effective while ||g|| > sqrt(3) ||Q(g) - g||", (16.0, 100.0),
    order=100, verdict=verdict, measured=measured, sweep=SWEEP, extract=extract, figure=draw, seed_use="first"))
