"""Ops that move values without computing new ones (reshape, transpose, indexing) - nothing to
round - and concat, which may promote formats (exactly).  Broadcasting (``core.broadcast_to``) is
the only place gradients are summed over broadcast axes.
"""

from __future__ import annotations

from ..tensor import Tensor, promote
from .core import _make, _quiet, _view

__all__ = ['reshape', 'transpose', 'getitem', 'concat']


def reshape(x: Tensor, shape) -> Tensor:
    shape = tuple(shape)
    try:
        data = x.data.reshape(shape)
    except ValueError:
        raise ValueError(f"cannot reshape shape {x.shape} into {shape}") from None
    return _view(data, x.fmt, (x,), lambda g, out: (g.reshape(x.shape),), "reshape")


def transpose(x: Tensor, axes=None) -> Tensor:
    xp = x.backend.xp
    if axes is None:
        axes = tuple(reversed(range(x.ndim)))
    axes = tuple(axes)
    if sorted(a % x.ndim if -x.ndim <= a < x.ndim else x.ndim for a in axes) != list(range(x.ndim)):
        raise ValueError(f"transpose: {axes} is not a permutation of the axes of shape {x.shape}")
    axes = tuple(a % x.ndim for a in axes)  # the inverse permutation below needs them non-negative
    inv = tuple(sorted(range(len(axes)), key=axes.__getitem__))  # on the host: no device round trip
    return _view(xp.transpose(x.data, axes), x.fmt, (x,), lambda g, out: (xp.transpose(g, inv),), "transpose")


def getitem(x: Tensor, idx) -> Tensor:
    """Indexing (basic and integer-array, as cross-entropy needs); the backward scatters
    gradients back, adding where an index repeats."""
    be = x.backend
    xp = be.xp
    if isinstance(idx, Tensor):
        idx = idx.data.astype(xp.int64)

    def backward(g, out):
        z = xp.zeros(x.shape, dtype=xp.float32)
        be.index_add(z, idx, g)
        return (z,)

    try:
        data = x.data[idx]
    except IndexError as e:
        raise IndexError(f"index {idx!r} does not fit shape {x.shape}: {e}") from None
    return _view(data, x.fmt, (x,), backward, "getitem")


@_quiet
def concat(tensors, axis=0) -> Tensor:
    """Join along ``axis``; mixed formats promote (exactly) to the wider one."""
    ts = list(tensors)
    if not ts:
        raise ValueError("concat needs at least one tensor")
    fmt = promote(*(t.fmt for t in ts))
    xp = ts[0].backend.xp
    try:
        out32 = xp.concatenate([t.f32() for t in ts], axis=axis)
    except ValueError:
        raise ValueError(f"concat along axis {axis}: shapes {[t.shape for t in ts]} do not fit") from None
    bounds = []
    pos = 0
    for t in ts:
        pos += t.shape[axis]
        bounds.append(pos)

    def backward(g, out):
        return tuple(xp.split(g, bounds[:-1], axis=axis))

    return _make(out32, fmt, tuple(ts), backward, "concat")
