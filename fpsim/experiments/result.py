"""What one training run did: :class:`RunResult`, the one record every task's run fills and the
one table (:mod:`~fpsim.experiments.report`) and figure (``fpsim.tools.compareplot``) read.

Steps are numbered from 0 everywhere: ``losses[k]`` is the loss the forward pass of step k
computed (before step k's update), and a run that died at step k (:attr:`RunResult.died_at`)
has ``k + 1`` losses - its last is the one step k computed.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

__all__ = ["RunResult", "Column", "COLUMN_STYLES"]

COLUMN_STYLES = ("fixed4", "percent", "nonfinite")
# What RunResult held as fields before the task's numbers moved into ``metrics`` (and their old
# defaults): read as attributes they still work, with a DeprecationWarning, until 2027-06-01.
_OLD_FIELDS = {"r2": None, "accuracy": None, "eval_loss": None, "attn_logits": []}


@dataclass(frozen=True)
class Column:
    """A column a task adds to the comparison table (:mod:`~fpsim.experiments.report`).

    ``key``: the value, in :attr:`RunResult.metrics` or else a RunResult field; ``title``: the
    header; ``style``: ``"fixed4"`` (4 decimals), ``"percent"`` (1 decimal) or ``"nonfinite"``
    (where the first inf / NaN was made: a :class:`~fpsim.trace.NonFinite`); ``place``:
    ``"quality"`` (after the ratio to the baseline) or ``"end"`` (before the time); ``live_only``:
    ``-`` for a run that diverged."""

    key: str
    title: str
    style: str = "fixed4"
    place: str = "quality"
    live_only: bool = False

    def __post_init__(self):
        if self.style not in COLUMN_STYLES:
            raise ValueError(f"Column {self.key!r}: style must be one of {', '.join(COLUMN_STYLES)}, got {self.style!r}")
        if self.place not in ("quality", "end"):
            raise ValueError(f"Column {self.key!r}: place must be 'quality' or 'end', got {self.place!r}")


@dataclass
class RunResult:
    """What one recipe did on one task, step by step and at the end.

    Every number is a Python float read from the float32 values the run computed (losses,
    scales, fractions); nothing here is rounded again."""

    recipe: str
    losses: list = field(default_factory=list)  # float32 loss (unscaled) of each step, before its update
    scales: list = field(default_factory=list)  # loss scale used at each step (1.0 without a scaler)
    skipped: list = field(default_factory=list)  # whether the optimizer step was skipped
    act_grad_flushed: dict = field(default_factory=dict)  # step -> fraction of activation gradients lost
    weight_grad_flushed: dict = field(default_factory=dict)  # step -> fraction of weight-gradient entries lost
    stalled: dict = field(default_factory=dict)  # step -> fraction of parameter entries the update left unchanged
    scaler: str | None = None  # the loss scaler: None, "static" or "dynamic"
    died_at: int | None = None  # the step (from 0) after which the run was non-finite; None if it lived
    frozen_fraction: float = float("nan")  # parameters (entries) that never changed
    failure: str = ""  # where a NaN / inf came from, if the run died (training stops there)
    seconds: float = 0.0
    fp8: dict = field(default_factory=dict)  # fp8 recipes: tensor -> ScalingState.summary() after the last step
    metrics: dict = field(default_factory=dict)  # the task's numbers of the final model (Task.metrics): r2, ...
    columns: tuple = ()  # the table's columns the task declares (Column records: Task.table_columns)
    legend: tuple | None = None  # the table's legend lines the task declares (None: report's default)
    traced: bool = False  # whether a NonFiniteTracer watched the run (then ``nonfinite`` is its finding)
    nonfinite: object = None  # fpsim.trace.NonFinite: the first op that made inf/NaN (scaler overflows aside)
    scaler_overflows: int = 0  # backward passes where the loss-scaled gradients overflowed (traced runs)
    notes: list = field(default_factory=list)

    @property
    def final_loss(self) -> float:
        """NaN for a dead run; else the evaluation loss where the task has one, or the last
        training loss."""
        if self.failure or not self.losses:
            return float("nan")
        eval_loss = self.metrics.get("eval_loss")
        return self.losses[-1] if eval_loss is None else eval_loss

    def __getattr__(self, name: str):
        """The task's numbers under their old attribute names (``r.r2``, ``r.accuracy``, ...):
        deprecated, read ``r.metrics[...]`` (removed 2027-06-01)."""
        if name not in _OLD_FIELDS:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        warnings.warn(f"RunResult.{name} is deprecated (removed 2027-06-01): read RunResult.metrics[{name!r}]",
                      DeprecationWarning, stacklevel=2)
        return self.__dict__.get("metrics", {}).get(name, _OLD_FIELDS[name])

    @property
    def steps_skipped(self) -> int:
        return int(sum(self.skipped))

    @property
    def final_scale(self) -> float:
        return self.scales[-1] if self.scales else float("nan")
