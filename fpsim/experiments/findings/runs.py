"""What the training findings read from their runs: ``{recipe: [RunResult per seed]}``, every run
of a recipe from the same initial weights per seed as the baseline's (the pipeline's sweep)."""

from __future__ import annotations

import math

from ...numerics import mean64

__all__ = ["final_ratio", "metric", "ratios", "seed_mean", "trained_steps"]


def ratios(runs: dict, name: str, base: str = "fp32") -> list:
    """Per seed: the final loss of ``name`` over ``base``'s (inf for a run that died)."""
    return [r.final_loss / b.final_loss if math.isfinite(r.final_loss) else math.inf
            for r, b in zip(runs[name], runs[base])]


def final_ratio(runs: dict, name: str, base: str = "fp32") -> float:
    """Mean over seeds (:func:`fpsim.numerics.mean64`) of :func:`ratios`."""
    return float(mean64(ratios(runs, name, base)))


def seed_mean(values) -> float:
    """The mean over seeds of ``values``: the exact sum rounded once (:func:`fpsim.numerics.mean64`)."""
    return float(mean64(list(values)))


def trained_steps(runs: dict) -> int:
    """The steps the sweep's runs trained: the most losses any run recorded (a run that died at
    step k has k + 1; one that lived, the sweep's steps)."""
    return max(len(r.losses) for rs in runs.values() for r in rs)


def metric(r, name: str):
    """The task's number ``name`` of the run ``r`` (its ``metrics`` where the RunResult has them,
    else the attribute of that name)."""
    metrics = getattr(r, "metrics", None)
    if isinstance(metrics, dict) and name in metrics:
        return metrics[name]
    return getattr(r, name)
