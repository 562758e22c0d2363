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

import math
from dataclasses import dataclass, field

import numpy as np

from .. import nn, ops
from ..amp import GradScaler, autocast
from ..checks import is_real
from ..data import classification_blobs
from ..nn.utils import clip_grad_norm_
from ..numerics import fsum64
from ..optim import SGD, Adam
from ..tensor import tensor

__all__ = ["ORDERS", "ClipRun", "train_with_clipping", "ClipOrderDemo", "clip_order_demo"]

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


# ------------------------------------------------------------------ one step, both orders


@dataclass(frozen=True)
class ClipOrderDemo:
    """What one SGD step did to weights starting at 0, with gradient clipping done in the
    right order (scale -> backward -> unscale_ -> clip -> step) and in the wrong one (clip the
    SCALED gradients, then step, which unscales them).  Updates are signed float32
    differences ``w_after - w_before`` (so ``-lr * g`` when nothing is clipped)."""

    grads: tuple
    scale: float
    max_norm: float
    lr: float
    correct_update: np.ndarray
    wrong_update: np.ndarray
    correct_norm: float  # the total norm clip_grad_norm_ saw: that of the true gradients
    wrong_norm: float  # the norm it saw in the wrong order: scale times larger

    @property
    def ratio(self) -> float:
        """|correct update| / |wrong update| (float64): S * |g| / max_norm when |g| <= max_norm.
        Each norm the square root of the exact sum of the squares, rounded once (:func:`fpsim.numerics.fsum64`)."""
        c = _norm64(self.correct_update)
        w = _norm64(self.wrong_update)
        return c / w if w else math.inf

    def __str__(self) -> str:
        return "\n".join([
            f"grads {list(self.grads)}, loss scale {self.scale:g}, max_norm {self.max_norm:g}, lr {self.lr:g}",
            f"  right order (unscale_, clip, step): clip saw norm {self.correct_norm:.6g}; "
            f"update {np.array2string(self.correct_update, precision=6)}",
            f"  wrong order (clip, then step):      clip saw norm {self.wrong_norm:.6g}; "
            f"update {np.array2string(self.wrong_update, precision=6)}",
            f"  the wrong order moves the weights {self.ratio:.6g}x less",
        ])


def _norm64(v: np.ndarray) -> float:
    v = np.asarray(v, dtype=np.float64).ravel()  # float32 values: their squares are exact in float64
    return math.sqrt(fsum64(v * v))


def clip_order_demo(grads=(0.3, 0.4), scale: float = 1024.0, max_norm: float = 1.0, lr: float = 1.0) -> ClipOrderDemo:
    """Run one real training step twice - float32 weights at 0, ``loss = sum(w * grads)`` so
    that ``dL/dw = grads``, a real ``GradScaler(init_scale=scale)``, ``clip_grad_norm_`` and
    ``SGD(lr)`` - once clipping after ``unscale_`` and once before, and report both updates.

    With the defaults the right order moves the weights by -[0.3, 0.4] (the norm 0.5 is under
    max_norm, nothing is clipped) and the wrong order clips the scaled norm 512 down to 1,
    leaving [0.6, 0.8] / 1024 after unscaling: 512x (S * |g| / max_norm) less.
    """
    g = np.asarray(grads, dtype=np.float64).reshape(-1)
    if g.size == 0 or not np.all(np.isfinite(g)):
        raise ValueError(f"grads must be a non-empty sequence of finite numbers, got {grads!r}")
    if not is_real(max_norm) or not (float(max_norm) > 0 and math.isfinite(max_norm)):
        raise ValueError(f"max_norm must be a finite number > 0, got {max_norm!r}")

    def run(unscale_first: bool):
        w = tensor(np.zeros(g.size), "float32", requires_grad=True, name="weight")
        opt = SGD([w], lr=lr)
        scaler = GradScaler(init_scale=scale)
        loss = ops.sum(ops.mul(w, g.astype(np.float32)))
        scaler.scale(loss).backward()
        if unscale_first:
            scaler.unscale_(opt)
        norm = clip_grad_norm_([w], max_norm)
        scaler.step(opt)
        if scaler.last_step_skipped(opt):
            raise ValueError(f"scale {scale!r} overflows float32 with these gradients: the step was skipped")
        scaler.update()
        return w.f32().copy(), float(norm)

    right, right_norm = run(True)
    wrong, wrong_norm = run(False)
    return ClipOrderDemo(tuple(float(x) for x in g), float(scale), float(max_norm), float(lr),
                         right, wrong, right_norm, wrong_norm)
