"""The softmax family and the losses, computed in float32 (under autocast they are on the
float32 list): log_softmax, softmax, mse_loss.
"""

from __future__ import annotations

from ..tensor import Tensor, promote
from .core import _autocast, _const, _make, _quiet

__all__ = ['log_softmax', 'softmax', 'mse_loss']


@_quiet
def log_softmax(x: Tensor, axis=-1) -> Tensor:
    """log(softmax(x)) computed stably in float32 (x - max - log sum exp), rounded once."""
    (x,) = _autocast("log_softmax", x)
    xp = x.backend.xp
    x32 = x.f32()
    z = x32 - x32.max(axis=axis, keepdims=True)
    out32 = z - xp.log(xp.exp(z).sum(axis=axis, keepdims=True, dtype=xp.float32))

    def backward(g, out):
        return (g - xp.exp(out.f32()) * g.sum(axis=axis, keepdims=True, dtype=xp.float32),)

    return _make(out32, x.fmt, (x,), backward, "log_softmax")


@_quiet
def softmax(x: Tensor, axis=-1) -> Tensor:
    (x,) = _autocast("softmax", x)
    xp = x.backend.xp
    x32 = x.f32()
    e = xp.exp(x32 - x32.max(axis=axis, keepdims=True))

    def backward(g, out):
        y = out.f32()
        return (y * (g - (g * y).sum(axis=axis, keepdims=True, dtype=xp.float32)),)

    return _make(e / e.sum(axis=axis, keepdims=True, dtype=xp.float32), x.fmt, (x,), backward, "softmax")


# ------------------------------------------------------------------------------- losses


@_quiet
def mse_loss(pred: Tensor, target) -> Tensor:
    """mean((pred - target)**2) as one fused op, like PyTorch's: the difference and the mean
    in float32, one rounding.  Its gradient 2 (pred - target) / N is rounded once into pred's
    gradient format - with N = 2**20 outputs that is a number near 1e-8."""
    weak = not isinstance(target, Tensor)
    if weak:
        target = _const(target, pred)
    if target.shape != pred.shape:
        raise ValueError(f"mse_loss: prediction shape {pred.shape} and target shape {target.shape} differ")
    pred, target = _autocast("mse_loss", pred, target)
    xp = pred.backend.xp
    d = pred.f32() - target.f32()
    n = d.size
    out32 = (d * d).sum(dtype=xp.float32) / xp.float32(n)
    scale = xp.float32(2.0 / n)
    return _make(out32, pred.fmt if weak else promote(pred.fmt, target.fmt), (pred, target),
                 lambda g, out: (g * scale * d, -(g * scale * d)), "mse_loss")
