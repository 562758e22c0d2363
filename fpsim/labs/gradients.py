"""Real gradients for the labs: a model trained a few float32 steps, and copies of it.

Labs 05, 06 and 08 look at the gradients of a run that has started learning, not of a freshly
initialised network (whose gradients are larger than they will be a few steps later).  The
helpers here train in float32 only, so what the labs then measure in float16 / bfloat16 / fp8
is what those formats would do to the float32 numbers, one rounding each.
"""

from __future__ import annotations

import copy

import numpy as np

from .. import ops
from ..experiments import ReferenceTask
from ..optim import SGD, Adam
from ..tensor import Tensor, tensor

__all__ = ["clone", "fit", "warm_reference", "binade_span"]


def clone(model, fmt=None):
    """A deep copy of ``model`` with its own parameters (no ``.grad``), rounded into ``fmt``
    if given (one rounding from the parameters' exact values; ``None`` keeps their format).

    Backends and format records are shared, not copied (they hold modules and dtypes)."""
    memo = {}
    for p in model.parameters():
        memo[id(p.backend)] = p.backend
        memo[id(p.fmt)] = p.fmt
        memo[id(p.grad_fmt)] = p.grad_fmt
    new = copy.deepcopy(model, memo)
    for p in new.parameters():
        p.grad = None
    return new.to(fmt) if fmt is not None else new


def _as_input(x, fmt):
    if isinstance(x, Tensor):
        return x
    return tensor(np.asarray(x, dtype=np.float32), fmt)


def _as_target(t):
    """Float targets become float32 tensors; integer class labels stay numpy arrays."""
    if isinstance(t, Tensor):
        return t
    arr = np.asarray(t)
    return tensor(arr.astype(np.float32), "float32") if arr.dtype.kind == "f" else arr


def fit(model, loss_fn, x, *targets, steps: int = 20, lr: float = 1e-2, optimizer: str = "adam") -> list[float]:
    """Train ``model`` in place, full batch: ``loss_fn(model(x), *targets)``, ``steps`` times.

    ``x`` (numpy or Tensor) is rounded once into the model's parameter format; float targets
    become float32 tensors, integer labels pass through.  ``optimizer``: ``"adam"`` or
    ``"sgd"`` (plain, no momentum), without master weights.  Returns the loss before each step
    (floats).  Meant for float32 models: it is how the labs get a model "a few steps in".
    """
    if optimizer not in ("adam", "sgd"):
        raise ValueError(f"optimizer must be 'adam' or 'sgd', got {optimizer!r}")
    if not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be an integer >= 0, got {steps!r}")
    params = model.parameters()
    xt = _as_input(x, params[0].fmt)
    ts = [_as_target(t) for t in targets]
    opt = Adam(params, lr=lr) if optimizer == "adam" else SGD(params, lr=lr)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(model(xt), *ts)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def warm_reference(n: int = 4096, steps: int = 20, seed: int = 0):
    """The reference autoencoder (``ReferenceTask(n=n)``: 64-32-8-32-64, tanh, MSE over all
    n x 64 outputs) after ``steps`` float32 Adam steps at the task's learning rate.

    Returns ``(model, x)``: the float32 model and the data (float32 numpy, (n, 64)), which is
    also the target.  With the default n = 4096 the loss averages 2^18 outputs (the full task:
    2^20), so gradients are about 4x larger than in ``fpsim compare`` - smaller, faster, and
    still tiny.
    """
    task = ReferenceTask(n=n)
    x = task.data()
    model = task.model(seed)
    fit(model, ops.mse_loss, x, x, steps=steps, lr=task.lr)
    return model, x


def binade_span(values, lo: float = 0.001, hi: float = 0.999) -> tuple[float, float]:
    """(log2 of the ``lo`` quantile, log2 of the ``hi`` quantile) of the non-zero finite |values|,
    in float64: where the bulk of a tensor lies, in powers of two.  Their difference is how
    many binades (factors of two) a format must cover to hold all but the extreme tails."""
    v = np.abs(np.asarray(values, dtype=np.float64).ravel())
    v = v[np.isfinite(v) & (v != 0)]
    if v.size == 0:
        raise ValueError("binade_span needs at least one non-zero finite value")
    if not 0 <= lo < hi <= 1:
        raise ValueError(f"need 0 <= lo < hi <= 1, got lo={lo}, hi={hi}")
    q = np.quantile(v, [lo, hi])
    return float(np.log2(q[0])), float(np.log2(q[1]))
