"""The training runs the recipe findings share: several recipes over seeds on one task, each
run from the same initial weights per seed (``experiments.run_recipe``), and their losses set
against a baseline's."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from ...numerics import mean64
from .. import run_recipe
from ..recipes import get_recipe
from ..tasks import ReferenceTask
from .base import FindingResult, say

__all__ = ["train_recipes", "final_ratio", "draw_ratio_curves", "ReferenceRuns", "reference_runs"]


@dataclass
class ReferenceRuns:
    """A recipe finding's runs on the reference task: ``runs`` ({recipe: [RunResult per seed]}),
    the ``steps`` each trained, the ``seeds``, and when training started (for the result's seconds)."""

    runs: dict
    steps: int
    seeds: tuple
    started: float = field(repr=False)

    def result(self, name: str, numbers: dict, measured: str, verdict, quick: bool, title: str) -> FindingResult:
        """The finding's result: ``verdict(numbers)``, the time since training started, and the
        figure of each recipe's loss over fp32's (:func:`draw_ratio_curves`)."""
        v, reason = verdict(numbers)
        return FindingResult(name, numbers, measured, v, reason, quick, self.seeds, time.perf_counter() - self.started,
                             draw=lambda ax: draw_ratio_curves(ax, self.runs, title=title))


def reference_runs(recipes, quick: bool, quick_steps: int, seeds, progress=None, measure_at=(-1,)) -> ReferenceRuns:
    """``recipes`` trained on the reference task over ``seeds``: ``quick_steps`` steps with
    ``quick``, else the task's full run."""
    started = time.perf_counter()
    task = ReferenceTask()
    steps = quick_steps if quick else task.steps
    seeds = tuple(seeds)
    return ReferenceRuns(train_recipes(recipes, task, steps, seeds, progress, measure_at), steps, seeds, started)


def train_recipes(recipes, task, steps: int, seeds, progress=None, measure_at=(-1,)) -> dict:
    """{recipe name: [RunResult per seed]} of ``recipes`` trained ``steps`` steps on ``task``."""
    out = {}
    for rec in recipes:
        name = get_recipe(rec).name
        out[name] = []
        for seed in seeds:
            say(progress, f"{name}, seed {seed}: {steps} steps")
            out[name].append(run_recipe(rec, task, steps=steps, seed=int(seed), measure_at=list(measure_at),
                                        progress=_every(progress, 50, f"{name}, seed {seed}", steps)))
    return out


def _every(progress, n: int, label: str, steps: int):
    """A per-step callback that tells ``progress`` every ``n`` steps (None without ``progress``)."""
    if progress is None:
        return None
    done = [0]

    def step():
        done[0] += 1
        if done[0] % n == 0 and done[0] < steps:
            progress(f"{label}: step {done[0]}/{steps}")

    return step


def final_ratio(runs: dict, name: str, base: str = "fp32") -> float:
    """Mean over seeds (:func:`fpsim.numerics.mean64`) of the final loss of ``name`` over ``base``'s
    (inf for a run that died)."""
    ratios = []
    for r, b in zip(runs[name], runs[base]):
        loss = r.final_loss
        ratios.append(loss / b.final_loss if math.isfinite(loss) else math.inf)
    return float(mean64(ratios))


def draw_ratio_curves(ax, runs: dict, base: str = "fp32", title: str = "") -> None:
    """Each recipe's loss over the baseline's, step by step (seed mean), on ``ax``."""
    ref = np.mean([r.losses for r in runs[base]], axis=0)
    for name, rs in runs.items():
        if name == base:
            continue
        n = min(len(r.losses) for r in rs)
        if n:
            ax.plot(np.mean([r.losses[:n] for r in rs], axis=0) / ref[:n], label=name)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xlabel("step")
    ax.set_ylabel(f"loss / {base}")
    ax.set_title(title)
    ax.legend(fontsize=8)
