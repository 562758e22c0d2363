"""Lab 07 (clipping and the order of operations): the same short AMP training run with the
gradient clip placed right, placed wrong, or left out.

The run is PyTorch's usual automatic mixed precision: float32 parameters, matmuls under
``autocast("float16")``, a ``GradScaler``, on a small blob classifier (full batch).  Only the
position of ``clip_grad_norm_`` differs between the orders:

- ``"unscale-first"`` (PyTorch's documented order): ``scale(loss).backward()`` ->
  ``unscale_(opt)`` -> ``clip_grad_norm_`` -> ``step`` -> ``update``;
- ``"clip-first"`` (the mistake): ``scale(loss).backward()`` -> ``clip_grad_norm_`` on the
  SCALED gradients -> ``step`` (which unscales what is left) -> ``update``;
- ``"no-clip"``: no clipping at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import nn
from ..amp import GradScaler, autocast
from ..data import classification_blobs
from ..nn.utils import clip_grad_norm_
from ..optim import SGD, Adam
from ..tensor import tensor

__all__ = ["ORDERS", "ClipRun", "train_with_clipping"]

ORDERS = ("unscale-first", "clip-first", "no-clip")


@dataclass
class ClipRun:
    """Per step: the float32 loss, and the total norm ``clip_grad_norm_`` returned (the norm
    BEFORE clipping: the true gradients' norm in the right order, S times it in the wrong one;
    NaN with no clipping)."""

    order: str
    optimizer: str
    losses: list = field(default_factory=list)
    norms: list = field(default_factory=list)
    skipped: int = 0


def train_with_clipping(order: str = "unscale-first", steps: int = 30, *, max_norm: float = 1.0,
                        scale: float = 1024.0, optimizer: str = "sgd", lr: float | None = None,
                        n: int = 512, seed: int = 0) -> ClipRun:
    """Train a 16-64-64-4 ReLU classifier on ``classification_blobs(n)`` for ``steps`` full-batch
    steps with float16 autocast, a ``GradScaler(init_scale=scale)`` and the clip in ``order``.

    ``optimizer``: ``"sgd"`` (default lr 0.1) or ``"adam"`` (default lr 1e-2).  Same data,
    same initial weights for every order, so the runs differ only by where the clip sits.
    """
    if order not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(ORDERS)}, got {order!r}")
    if optimizer not in ("sgd", "adam"):
        raise ValueError(f"optimizer must be 'sgd' or 'adam', got {optimizer!r}")
    x, y = classification_blobs(n=n, dim=16, classes=4, seed=seed)
    model = nn.MLP([16, 64, 64, 4], activation="relu", seed=seed)
    xt = tensor(x, "float32")
    params = model.parameters()
    if optimizer == "sgd":
        opt = SGD(params, lr=0.1 if lr is None else lr)
    else:
        opt = Adam(params, lr=1e-2 if lr is None else lr)
    scaler = GradScaler(init_scale=scale)
    run = ClipRun(order, optimizer)
    for _ in range(steps):
        opt.zero_grad()
        with autocast("float16"):
            loss = nn.cross_entropy(model(xt), y)
        scaler.scale(loss).backward()
        norm = float("nan")
        if order == "unscale-first":
            scaler.unscale_(opt)
            norm = float(clip_grad_norm_(params, max_norm))
        elif order == "clip-first":
            norm = float(clip_grad_norm_(params, max_norm))
        scaler.step(opt)
        scaler.update()
        run.skipped += int(scaler.last_step_skipped(opt))
        run.losses.append(loss.item())
        run.norms.append(norm)
    return run
