"""Layer normalisation as one op: statistics, normalisation, weight and bias in float32,
rounded once - what PyTorch's CPU kernel does in the forward pass.

The statistics (mean and biased variance over the normalised axes) accumulate in float32 by
default, so activations in the hundreds are harmless in float16: the squares (300^2 = 90,000 >
65,504) live only in float32.  ``acc=`` is the teaching option that keeps them in a low
format instead - the naive kernel, E[x^2] - E[x]^2 with every square, every running-sum step
and every quotient rounded into that format: in float16 a row of values near 300 gives
inf - inf = NaN.  ``acc="input"`` means the format of x as the op sees it, so under autocast
(layer_norm is on the float32 list) the same model accumulates in float32 again.
"""

from __future__ import annotations

import numbers

from ..checks import check_finite
from ..formats import F32, TENSOR_FORMATS, tensor_format
from ..tensor import Tensor, block_format_named, promote, round_result
from .core import _autocast, _make, _op

__all__ = ["layer_norm", "check_acc"]


def check_acc(acc, owner: str = "layer_norm", name: str = "acc"):
    """``acc`` as layer_norm takes it - None, ``"input"`` or a tensor format (its Format) - or one
    ValueError naming ``owner`` and the argument ``name`` (``nn.LayerNorm`` checks at construction)."""
    if acc is None or isinstance(acc, str) and acc == "input":
        return acc
    try:
        return tensor_format(acc)
    except ValueError as e:
        block = block_format_named(acc)
        if block is None:
            raise ValueError(f"{owner}: {name} must be None, 'input' or a format name; {e}") from None
        raise ValueError(f"{owner}: {name} {acc!r} is the block-scaled format {block}: the statistics accumulate "
                         f"in a tensor format ({', '.join(TENSOR_FORMATS)}); block scaling goes onto a model's Linear "
                         f"layers: fpsim.lowp.convert(model, fpsim.lowp.BlockScaling({block!r}))") from None


def _normalized_axes(x: Tensor, normalized_shape) -> tuple:
    shape = (normalized_shape,) if isinstance(normalized_shape, numbers.Integral) else tuple(normalized_shape)
    k = len(shape)
    if k == 0 or k > x.ndim or x.shape[x.ndim - k:] != shape:
        raise ValueError(f"layer_norm: normalized_shape {shape} does not match the last dimensions of input "
                         f"shape {x.shape}")
    return shape, tuple(range(x.ndim - k, x.ndim))


def _check_affine(t, name: str, shape: tuple) -> None:
    if t is not None and (not isinstance(t, Tensor) or t.shape != shape):
        raise ValueError(f"layer_norm: {name} shape {getattr(t, 'shape', type(t).__name__)} does not match "
                         f"normalized_shape {shape}")


def _low_moments(x32, axes, fmt, eps: float, be):
    """Mean and 1/sqrt(var + eps) the naive way, every step rounded into ``fmt``: running sums of
    x and of x*x (one element at a time), E[x^2] - E[x]^2 (clamped at 0, as kernels do)."""
    xp = be.xp
    n = 1
    for a in axes:
        n *= x32.shape[a]
    rnd = lambda v: be.to_f32(round_result(v, fmt, be, "layer_norm", "forward", "accumulator"))  # noqa: E731  (hooks see it)
    rows = xp.moveaxis(x32, axes, tuple(range(x32.ndim - len(axes), x32.ndim))).reshape(
        tuple(d for i, d in enumerate(x32.shape) if i not in axes) + (n,))
    s = xp.zeros(rows.shape[:-1], dtype=xp.float32)
    s2 = xp.zeros(rows.shape[:-1], dtype=xp.float32)
    for j in range(n):
        v = rows[..., j]
        s = rnd(s + v)
        s2 = rnd(s2 + rnd(v * v))
    nf = xp.float32(n)
    mean = rnd(s / nf)
    var = rnd(rnd(s2 / nf) - rnd(mean * mean))
    var = xp.maximum(var, xp.float32(0))  # NaN stays NaN
    rstd = rnd(xp.float32(1) / xp.sqrt(rnd(var + xp.float32(eps))))
    keep = tuple(d if i not in axes else 1 for i, d in enumerate(x32.shape))
    return mean.reshape(keep), rstd.reshape(keep)


def _moments(x32, axes, eps: float, be):
    """Mean, 1/sqrt(var + eps) and x - mean over ``axes`` in float32 (two passes: the mean, then
    the mean of squared deviations; each sum exact, rounded once to float32, then divided).  The
    deviations come back for the normalisation to reuse."""
    xp = be.xp
    mean = be.mean(x32, axes, True)
    d = x32 - mean
    sq = d * d
    var = be.mean(sq, axes, True)
    return mean, xp.float32(1) / xp.sqrt(var + xp.float32(eps)), d


@_op("x", "weight?", "bias?")
def layer_norm(x: Tensor, normalized_shape, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5, *, acc=None) -> Tensor:
    """PyTorch's ``F.layer_norm``: normalise over the last ``len(normalized_shape)`` axes,
    ``(x - mean) / sqrt(var + eps) * weight + bias`` (biased variance), computed in float32
    from the inputs' exact values and rounded once into the inputs' (promoted) format.

    ``acc``: where the mean and variance accumulate - None (float32, the default), a format, or
    ``"input"`` for x's own format (see the module docstring); float32 either way means the
    ordinary two-pass float32 statistics.  The normalisation itself is always float32.  Under
    autocast x, weight and bias are widened to float32 first.

    The backward is the fused formula in float32 from the saved mean and 1/std:
    dx = rstd (g w - mean(g w) - xhat mean(g w xhat)), dw = sum(g xhat), db = sum(g), the sums
    over every non-normalised axis in float32; each gradient rounded once.
    """
    acc = check_acc(acc)
    eps = check_finite(eps, "layer_norm: eps", minimum=0)
    shape, axes = _normalized_axes(x, normalized_shape)
    _check_affine(weight, "weight", shape)
    _check_affine(bias, "bias", shape)
    ins = _autocast("layer_norm", *(t for t in (x, weight, bias) if t is not None))
    x = ins[0]
    weight = ins[1] if weight is not None else None
    bias = ins[-1] if bias is not None else None
    fmt = promote(*(t.fmt for t in ins))
    be = x.backend
    x32 = x.f32()
    acc_fmt = x.fmt if acc == "input" else acc
    if acc_fmt is None or acc_fmt == F32:  # float32 statistics: the ordinary kernel
        mean, rstd, xhat = _moments(x32, axes, eps, be)  # xhat holds x - mean here
    else:
        mean, rstd = _low_moments(x32, axes, acc_fmt, eps, be)
        xhat = x32 - mean
    xhat *= rstd  # (x - mean) * rstd, in the array the op owns
    w32 = weight.f32() if weight is not None else None
    if w32 is not None:
        out32 = xhat * w32
        if bias is not None:
            out32 += bias.f32()
    else:
        out32 = xhat + bias.f32() if bias is not None else xhat
    return _make(out32, fmt, ins, _layer_norm_backward(xhat, rstd, w32, axes, weight is not None,
                                                       bias is not None, be), "layer_norm")


def _layer_norm_backward(xhat, rstd, w32, axes: tuple, dw: bool, db: bool, be):
    """The fused backward of layer_norm, in float32 with the formula's operations in its order:
    gw = g w, dx = rstd ((gw - mean(gw)) - xhat mean(gw xhat)), dw = sum(g xhat), db = sum(g) -
    four reductions, and two temporaries the passes write into (never into g or what the
    forward saved: a retained graph runs its backward again)."""
    lead = tuple(range(xhat.ndim - len(axes)))
    xp = be.xp

    def backward(g, out):
        gw = g * w32 if w32 is not None else g  # (g itself is never written into)
        m1 = be.mean(gw, axes, True)
        tmp = gw * xhat
        m2 = be.mean(tmp, axes, True)
        grads = []
        if dw:
            xp.multiply(g, xhat, out=tmp)
            grads.append(be.sum(tmp, lead))
        if db:
            grads.append(be.sum(g, lead))
        if w32 is None:
            gx = gw - m1
        else:
            gx = gw
            gx -= m1
        xp.multiply(xhat, m2, out=tmp)
        gx -= tmp
        gx *= rstd
        return (gx, *grads)

    return backward
