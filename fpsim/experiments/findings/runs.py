"""What the training findings read from their runs: ``{recipe: [RunResult per seed]}``, every run
of a recipe from the same initial weights per seed as the baseline's (the pipeline's sweep)."""

from __future__ import annotations

import math

from ...numerics import mean64

__all__ = ["final_ratio", "metric", "ratios", "seed_mean", "trained_steps", "Checkpointed"]


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


class Checkpointed:
    """A task (mixed in before its Task class) that looks at its model inside training, at step 0 and
    every ``steps // checkpoints`` steps (``checkpoints``: a field of the task): its batches carry
    the step, and :meth:`loss` calls ``self._checkpoint(model, step)`` first where one is due,
    before that step's forward (PTQ's losses, the rollout engines' drift)."""

    @property
    def every(self) -> int:
        return max(1, self.steps // self.checkpoints)

    def batches(self, recipe, backend):
        """(step, token ids) of each step: the step says when a checkpoint is due."""
        return lambda step: (step, self.batch_at(step))

    def loss(self, model, batch, recipe=None):
        step, seq = batch
        if step % self.every == 0:
            self._checkpoint(model, step)
        return super().loss(model, seq, recipe)

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if not callable(getattr(cls, "_checkpoint", None)):
            raise TypeError(f"{cls.__name__} is Checkpointed: it must define _checkpoint(model, step)")
