"""What one training run did: :class:`RunResult`, the one record every task's run fills and the
one table (:mod:`~fpsim.experiments.report`) and figure (``fpsim.tools.compareplot``) read.

Steps are numbered from 0 everywhere: ``losses[k]`` is the loss the forward pass of step k
computed (before step k's update), and a run that died at step k (:attr:`RunResult.died_at`)
has ``k + 1`` losses - its last is the one step k computed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["RunResult"]


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
    r2: float | None = None  # reference task: 1 - mse / variance of the data, on the final model
    failure: str = ""  # where a NaN / inf came from, if the run died (training stops there)
    seconds: float = 0.0
    fp8: dict = field(default_factory=dict)  # fp8 recipes: tensor -> ScalingState.summary() after the last step
    accuracy: float | None = None  # tasks with answers (tiny GPT): share predicted exactly, final model
    eval_loss: float | None = None  # tasks with an evaluation batch: its loss on the final model
    attn_logits: list = field(default_factory=list)  # tiny GPT with record_logits: largest |attention logit| per step
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
        return self.losses[-1] if self.eval_loss is None else self.eval_loss

    @property
    def steps_skipped(self) -> int:
        return int(sum(self.skipped))

    @property
    def final_scale(self) -> float:
        return self.scales[-1] if self.scales else float("nan")
