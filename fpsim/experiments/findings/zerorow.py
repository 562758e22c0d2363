"""``fp8-rowwise-zero-row``: row-wise fp8 scaling takes each row's scale as 448 / amax; a row that
is all zeros (a zero-initialised LoRA adapter, a padding token) gets amax 0, the scale is inf,
``0 x inf`` is NaN, and the loss is NaN from the first step; a lower bound on the amax fixes it
(pytorch/ao#3356 - an issue thread: LoRA + fp8 training with ``Float8DynamicActivationFloat8WeightConfig
(granularity=PerRow())``).

The miniature: the reference autoencoder (2,048 rows) whose last Linear starts at zero, as LoRA
initialises its B, trained under ``fp32`` and with every Linear converted to
:class:`fpsim.lowp.rowwise.RowwiseScaling` - fpsim's default, the amax floored at 1e-12 as
torchao's float8 training does, and ``amax_floor=0``, the unguarded scale.  The task traces the
first non-finite value (:class:`fpsim.trace.NonFiniteTracer`), so the run says which computation
made it.  Reported: the step each run died at (or that it lived), the op the tracer named, and
the guarded run's final loss over float32's.

At the source's scale (a LoRA fine-tune of an LLM with torchao on a GPU) the first step is
enough: the failure needs one all-zero row, not size, and costs nothing more to show.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ... import nn
from ...lowp.rowwise import AMAX_FLOOR, RowwiseScaling
from ..recipes import Recipe
from ..tasks import ReferenceTask
from .base import FINDINGS, Finding, Sweep, pct
from .runs import final_ratio, seed_mean

NAME = "fp8-rowwise-zero-row"
SCALE_OP = "fp8.rowwise.scale"
GUARDED = Recipe("fp8-rowwise", "float32", layers=RowwiseScaling(),
                 description=f"row-wise current fp8 scaling, amax floored at {AMAX_FLOOR:g} (torchao's EPS)")
UNGUARDED = Recipe("fp8-rowwise-nofloor", "float32", layers=RowwiseScaling(amax_floor=0.0),
                   description="row-wise current fp8 scaling, scale 448 / amax with no floor")


@dataclass(frozen=True)
class ZeroInitTask(ReferenceTask):
    """The reference autoencoder whose last Linear's weight starts at zero (LoRA's B), every
    run traced for its first non-finite value."""

    trace_nonfinite = True
    n: int = 2048

    def model(self, seed: int = 0):
        model = super().model(seed)
        last = [m for _, m in model.named_modules() if isinstance(m, nn.Linear)][-1]
        last.weight.data = last.weight.data * 0  # +0.0 everywhere, in the weight's own dtype
        return model


SWEEP = Sweep(ZeroInitTask, ("fp32", GUARDED, UNGUARDED), quick_steps=5, full_steps=40)


def _origin(r) -> str:
    return r.nonfinite.op if r.nonfinite is not None else ""


def extract(runs: dict) -> tuple[dict, dict]:
    """Seed means: whether each fp8 run died and when (NaN where it lived), whether the tracer
    named the scale computation, the guarded run's final loss over fp32's."""
    numbers = {}
    for key, rec in (("guarded", GUARDED), ("unguarded", UNGUARDED)):
        rs = runs[rec.name]
        died = [r.died_at for r in rs if r.died_at is not None]
        numbers[f"{key}_died"] = len(died) / len(rs)
        numbers[f"{key}_died_at"] = float(min(died)) if died else math.nan
        numbers[f"{key}_origin_is_scale"] = seed_mean(float(_origin(r) == SCALE_OP) for r in rs)
    g = runs[GUARDED.name]
    numbers["guarded_ratio"] = final_ratio(runs, GUARDED.name) if not numbers["guarded_died"] else math.inf
    numbers["steps"] = float(max(len(r.losses) for r in g))
    first = next((r.nonfinite for r in runs[UNGUARDED.name] if r.nonfinite is not None), None)
    series = {"losses": {name: [list(r.losses) for r in rs] for name, rs in runs.items()},
              "origin": str(first) if first is not None else "", "origin_op": first.op if first is not None else "",
              "origin_where": first.where if first is not None else ""}
    return numbers, series


def measured(numbers: dict, series: dict) -> str:
    un = (f"amax_floor=0 died at step {numbers['unguarded_died_at']:.0f} in {pct(numbers['unguarded_died'], 0)} of "
          f"runs, the tracer's first non-finite value: op '{series['origin_op']}' in {series['origin_where']}"
          if numbers["unguarded_died"] else "amax_floor=0 lived")
    g = ("the default floor (1e-12) died too" if numbers["guarded_died"] else
         f"the default floor (1e-12) lived, final loss {numbers['guarded_ratio']:.3f}x fp32's")
    return f"{un}; {g} ({int(numbers['steps'])} steps)"


def verdict(numbers: dict) -> tuple[str, str]:
    if numbers["guarded_died"]:
        return "not at this scale", "the floored scale died as well: the floor is not what fails here"
    if not numbers["unguarded_died"]:
        return "not at this scale", "without the floor the zero-initialised layer's scale did not make a NaN"
    named = numbers["unguarded_origin_is_scale"] == 1
    if numbers["unguarded_died_at"] == 0 and named:
        return "reproduced", ("without the floor the all-zero rows' scale 448 / 0 = inf made the loss NaN at the "
                              "first step, and the tracer names the scale computation; floored at 1e-12 the run "
                              f"trains ({numbers['guarded_ratio']:.3f}x float32's loss); it takes one all-zero row, not the source's "
                              "scale")
    return "partly", (f"without the floor the run died at step {numbers['unguarded_died_at']:.0f}"
                      + ("" if named else ", but the tracer named another op than the scale"))


def draw(ax, series: dict) -> None:
    """The loss curves: float32, the floored row-wise fp8 run and the unfloored one (which ends at
    its first, NaN, step: nothing to draw but the marker of its death)."""
    for name, curves in series["losses"].items():
        steps = range(len(curves[0]))
        finite = [v if math.isfinite(v) else None for v in curves[0]]
        if any(v is not None for v in finite):
            ax.plot(steps, [math.nan if v is None else v for v in finite], marker=".", label=name)
        else:
            ax.axvline(0, color="r", ls="--", label=f"{name}: NaN at step 0 ({series['origin_op']})")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title("row-wise fp8, last layer zero-initialised (LoRA's B)")
    ax.legend(fontsize=8)


FINDING = FINDINGS.register(Finding(
    NAME, "Row-wise fp8 scaling of an all-zero row divides 448 by an amax of 0: the scale is inf, 0 x inf is NaN and "
          "the loss is NaN from the first step; a lower bound on the amax fixes it.",
    "pytorch/ao#3356 (an issue thread)",
    "Float8DynamicActivationFloat8WeightConfig(granularity=PerRow()): {'loss': nan, 'grad_norm': nan} from the first "
    "logged step; with activation_value_lb=1e-12 'loss': 0.664 and falling",
    (4.0, 40.0), order=45, verdict=verdict, measured=measured, sweep=SWEEP, extract=extract, figure=draw,
    seeds=(0, 1, 2)))
