"""Small training loops the labs run several times (labs 03 and 04).

``one_weight``: one parameter, a constant gradient, plain SGD - the vanishing update without
anything else going on.  ``scaler_run``: the reference task's autoencoder in float16 with
float32 master weights, trained under a loss scaler the caller builds (GradScaler or
StaticScaler); the loop is the one lab 04 writes out by hand, with the scale, the skipped
steps and the flushed gradients recorded at every step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .. import ops
from ..checks import check_integer
from ..formats import get_format
from ..monitor import monitor
from ..optim import SGD, Adam
from ..tensor import tensor

__all__ = ["OneWeightRun", "one_weight", "ScalerRun", "scaler_run"]


@dataclass
class OneWeightRun:
    """The weight after each step (float64 copies of exact values; index 0 = the start).

    ``stored``: the parameter in its own format - what the model computes with;
    ``master``: the optimizer's float32 master copy (None without master weights)."""

    fmt: str
    stored: np.ndarray
    master: np.ndarray | None

    @property
    def moved(self) -> float:
        """How far the stored weight moved in all: last minus first."""
        return float(self.stored[-1] - self.stored[0])


def one_weight(w0: float = 1.0, grad: float = 0.01, lr: float = 0.01, steps: int = 100, fmt="float16",
               master: bool = False) -> OneWeightRun:
    """Train one weight ``w`` (stored in ``fmt``) with SGD(lr) on ``loss = grad * w``, whose
    gradient is the constant ``grad`` - so the exact weight after k steps is w0 - k*lr*grad.

    The gradient is rounded into ``fmt`` by the backward pass; without masters the update
    ``w - lr*g`` is computed in float32 and rounded into ``fmt`` (lost when below half an ulp
    of w); with ``master=True`` it lands on a float32 copy and the parameter is a fresh
    rounding of that copy after every step.
    """
    check_integer(steps, "steps", 0)
    f = get_format(fmt)
    w = tensor([w0], f, requires_grad=True, name="weight")
    opt = SGD([w], lr=lr, master_weights=master)
    stored = [float(w.f32()[0])]
    masters = [float(opt.master_params()[0].f32()[0])] if master else None
    for _ in range(steps):
        opt.zero_grad()
        ops.sum(ops.mul(w, grad)).backward()
        opt.step()
        stored.append(float(w.f32()[0]))
        if master:
            masters.append(float(opt.master_params()[0].f32()[0]))
    return OneWeightRun(f.name, np.array(stored), np.array(masters) if master else None)


@dataclass
class ScalerRun:
    """One ``scaler_run``, step by step: the loss (float32 value of the unscaled loss), the
    scale used, whether the optimizer step was skipped, and the fraction of the float16
    gradients rounded in the backward pass that were non-zero and became 0."""

    losses: list = field(default_factory=list)
    scales: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    flushed: list = field(default_factory=list)

    @property
    def steps_skipped(self) -> int:
        return int(sum(self.skipped))


def scaler_run(scaler, task=None, *, steps: int = 40, loss_format="float32", seed: int = 0, lr: float | None = None,
               measure: bool = True) -> ScalerRun:
    """Train ``task``'s autoencoder (default ``ReferenceTask(n=1024)``) in float16 with float32
    master weights (Adam) under ``scaler`` (a GradScaler or StaticScaler), in PyTorch's order:
    ``scaler.scale(loss).backward()``, ``scaler.step(opt)``, ``scaler.update()``.

    ``loss_format="float32"``: the loss runs in float32, as autocast does it;
    ``"float16"``: the loss is computed on the float16 output and a float16 copy of the data,
    so it is a float16 number - then the gradient of ``S * loss`` with respect to the loss,
    S itself, must fit in float16, and S = 2**16 does not (the first-step trap).
    ``measure``: count flushed gradients with a monitor (costs a little time).
    """
    from ..experiments import ReferenceTask

    task = task or ReferenceTask(n=1024)
    check_integer(steps, "steps", 1)
    lf = get_format(loss_format).name
    if lf not in ("float16", "float32"):
        raise ValueError(f"loss_format must be float16 or float32, got {loss_format!r}")
    lr = task.lr if lr is None else lr
    data = task.data()
    model = task.model(seed).to("float16")
    x = tensor(data, "float16")
    target = tensor(data, lf)
    opt = Adam(model.parameters(), lr=lr, master_weights=True)
    out = ScalerRun()
    for _ in range(steps):
        opt.zero_grad()
        pred = model(x)
        loss = ops.mse_loss(pred if lf == "float16" else pred.to("float32"), target)
        out.scales.append(scaler.get_scale())
        if measure:
            with monitor() as m:
                scaler.scale(loss).backward()
            t = m.totals(direction="backward", fmt="float16")
            out.flushed.append(t["underflow"] / t["n"] if t["n"] else 0.0)
        else:
            scaler.scale(loss).backward()
            out.flushed.append(math.nan)
        scaler.step(opt)
        scaler.update()
        out.skipped.append(scaler.last_step_skipped(opt))
        out.losses.append(loss.item())
    return out
