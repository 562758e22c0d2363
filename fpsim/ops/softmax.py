"""The softmax family and the losses, computed in float32 (under autocast they are on the
float32 list): log_softmax, softmax, mse_loss.

``softmax`` and ``log_softmax`` subtract the row maximum before exponentiating, inside one op
that computes in float32 and rounds once - no intermediate can overflow.  ``stable=False`` is
the naive formula a user writes out of ops, ``exp(x) / sum(exp(x))``: a composite of ``exp``,
``sum`` and ``div`` (``log`` and ``sub`` for log_softmax), each rounding into the tensor's
format, so in float16 ``exp`` overflows to inf for x > 11.09 and the row becomes inf / inf =
NaN.  Under autocast exp and sum are on the float32 list, so the naive form lives up to x = 88.7.
"""

from __future__ import annotations

from ..checks import is_integer
from ..tensor import Tensor, promote
from .arith import div, sub
from .core import _autocast, _const, _make, _op
from .elementwise import exp, log
from .reduce import sum as _sum

__all__ = ['log_softmax', 'softmax', 'mse_loss']


@_op("x")
def log_softmax(x: Tensor, axis=-1, stable: bool = True) -> Tensor:
    """log(softmax(x)) computed stably in float32 (x - max - log sum exp), rounded once.
    ``stable=False``: ``x - log(sum(exp(x)))`` as a composite of ops, each rounding (see above)."""
    if not stable:
        return sub(x, log(_sum(exp(x), axis=axis, keepdims=True)))
    (x,) = _autocast("log_softmax", x)
    be = x.backend
    xp = be.xp
    x32 = x.f32()
    z = _less_max(x32, axis, x.shape, "log_softmax")
    out32 = z - be.log(be.sum(be.exp(z), axis, True))

    def backward(g, out):
        d = be.exp(out.f32())
        d *= be.sum(g, axis, True)
        return (xp.subtract(g, d, out=d),)  # g - exp(y) sum(g)

    return _make(out32, x.fmt, (x,), backward, "log_softmax")


@_op("x")
def softmax(x: Tensor, axis=-1, stable: bool = True) -> Tensor:
    """exp(x - max) / sum(exp(x - max)) along ``axis`` in float32, rounded once; the backward
    reads the rounded output.  ``stable=False``: ``exp(x) / sum(exp(x))`` as a composite of
    ops, each rounding into x's format (see above)."""
    if not stable:
        e = exp(x)
        return div(e, _sum(e, axis=axis, keepdims=True))
    (x,) = _autocast("softmax", x)
    be = x.backend
    xp = be.xp
    x32 = x.f32()
    e = be.exp(_less_max(x32, axis, x.shape, "softmax"))
    e /= be.sum(e, axis, True)  # e is the op's own array

    def backward(g, out):
        y = out.f32()
        d = g * y
        s = be.sum(d, axis, True)
        xp.subtract(g, s, out=d)
        d *= y
        return (d,)  # y (g - sum(g y)), one temporary

    return _make(e, x.fmt, (x,), backward, "softmax")


def _less_max(x32, axis, shape: tuple, op: str):
    """x32 minus its maximum along ``axis`` (float32, exact where it matters: the largest becomes
    0).  An empty axis has no maximum and needs none: the result is empty too, as PyTorch's."""
    if not is_integer(axis) or not -len(shape) <= axis < len(shape):
        raise ValueError(f"{op}: axis {axis!r} does not exist for a tensor of shape {shape}")
    if shape[axis] == 0:
        return x32
    return x32 - x32.max(axis=axis, keepdims=True)


# ------------------------------------------------------------------------------- losses


@_op("pred")
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
    be = pred.backend
    xp = be.xp
    d = pred.f32() - target.f32()
    n = d.size
    out32 = be.mean(d * d)
    scale = xp.float32(2.0 / n)
    return _make(out32, pred.fmt if weak else promote(pred.fmt, target.fmt), (pred, target),
                 lambda g, out: (g * scale * d, -(g * scale * d)), "mse_loss")
