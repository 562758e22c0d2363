"""The training runs the recipe findings share: several recipes over seeds on one task, each
run from the same initial weights per seed (``experiments.run_recipe``), and their losses set
against a baseline's."""

from __future__ import annotations

import math

import numpy as np

from .. import run_recipe
from ..recipes import get_recipe
from .base import say

__all__ = ["train_recipes", "final_ratio", "draw_ratio_curves"]


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
    """Mean over seeds of the final loss of ``name`` over ``base``'s (inf for a run that died)."""
    ratios = []
    for r, b in zip(runs[name], runs[base]):
        loss = r.final_loss
        ratios.append(loss / b.final_loss if math.isfinite(loss) else math.inf)
    return float(np.mean(ratios))


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
