"""Reductions: sum, mean, max.  Every reduction states its accumulation: by default the exact
sum rounded once to float32 (the backend's ``sum``: on the CPU backends :func:`fpsim.numerics.sum_f32`,
the same bits in every order), or, for ``sum(acc=fmt)``, a running sum rounded into ``fmt`` after every addition (the
swamping lesson: counting by 1 stalls at 2048 in float16, 256 in bfloat16).
"""

from __future__ import annotations

from ..formats import get_format
from ..tensor import Tensor, round_result
from .core import _autocast, _expand_back, _make, _norm_axes, _op

__all__ = ['sum', 'mean', 'max']


@_op("x")
def sum(x: Tensor, axis=None, keepdims=False, acc=None) -> Tensor:  # noqa: A001
    """Sum over ``axis``: the exact sum rounded once to float32 - or, with ``acc=fmt``, a running sum
    rounded into ``fmt`` after every addition (to show swamping: counting by 1 stalls at
    2048 in float16, 256 in bfloat16)."""
    (x,) = _autocast("sum", x)
    be = x.backend
    xp = be.xp
    axes = _norm_axes(axis, x.ndim, "sum")
    x32 = x.f32()
    if acc is None:
        out32 = be.sum(x32, axes, keepdims)
    else:
        accf = get_format(acc)
        moved = xp.moveaxis(x32, axes, tuple(range(len(axes))))
        flat = moved.reshape((-1,) + moved.shape[len(axes):])
        s = xp.zeros(flat.shape[1:], dtype=xp.float32)
        for row in flat:
            s = be.to_f32(round_result(s + row, accf, be, "sum", "forward", "accumulator"))  # the hooks see each
        out32 = s.reshape(tuple(1 if i in axes else n for i, n in enumerate(x.shape))) if keepdims else s
    return _make(out32, x.fmt, (x,), lambda g, out: (_expand_back(g, x.shape, axes, keepdims, xp),), "sum")


@_op("x")
def mean(x: Tensor, axis=None, keepdims=False) -> Tensor:
    """Mean: the exact sum rounded to float32, one float32 division, rounded once into x's format.  Its gradient is
    g / N: with N in the millions (dense prediction) that is where gradients get tiny.  The
    mean of nothing (N = 0) is NaN, as in PyTorch (0 / 0), with an empty gradient."""
    (x,) = _autocast("mean", x)
    be = x.backend
    xp = be.xp
    axes = _norm_axes(axis, x.ndim, "mean")
    n = 1
    for a in axes:
        n *= x.shape[a]
    inv = xp.float32(1.0 / n) if n else xp.float32(xp.nan)
    out32 = be.mean(x.f32(), axes, keepdims)
    return _make(out32, x.fmt, (x,), lambda g, out: (_expand_back(g * inv, x.shape, axes, keepdims, xp),), "mean")


@_op("x")
def max(x: Tensor, axis=None, keepdims=False) -> Tensor:  # noqa: A001
    """Maximum over ``axis``; the gradient is shared equally among tied maxima."""
    xp = x.backend.xp
    axes = _norm_axes(axis, x.ndim, "max")
    x32 = x.f32()
    m = x32.max(axis=axes, keepdims=True)

    def backward(g, out):
        hit = (x32 == m).astype(xp.float32)
        share = hit / hit.sum(axis=axes, keepdims=True)  # a count: exact in any order
        return (_expand_back(g, x.shape, axes, keepdims, xp) * share,)

    out32 = m if keepdims else m.reshape(tuple(n for i, n in enumerate(x.shape) if i not in axes))
    return _make(out32, x.fmt, (x,), backward, "max")
