"""Ops that move values without computing new ones (reshape, transpose, indexing, embedding) - nothing to
round - and concat, which may promote formats (exactly).  Broadcasting (``core.broadcast_to``) is
the only place gradients are summed over broadcast axes.
"""

from __future__ import annotations

import numpy as np

from ..checks import is_integer
from ..tensor import Exact, Tensor, promote
from .core import _make, _one_backend, _op, _require, _view

__all__ = ['reshape', 'transpose', 'getitem', 'concat', 'embedding']


@_op("x", quiet=False)
def reshape(x: Tensor, shape) -> Tensor:
    """``x`` in ``shape`` (a tuple of integers, or one integer as numpy takes it; -1 once for the rest)."""
    given = shape
    shape = (shape,) if is_integer(shape) else tuple(shape) if hasattr(shape, "__iter__") else None
    if shape is None or isinstance(given, str) or not all(is_integer(n) for n in shape):
        raise TypeError(f"reshape: shape must be an integer or a tuple of integers, got {given!r}")
    try:
        data = x.data.reshape(shape)
    except ValueError:
        raise ValueError(f"cannot reshape shape {x.shape} into {shape}") from None
    return _view(data, x.fmt, (x,), lambda g, out: (Exact(lambda gs: gs.reshape(x.shape)),), "reshape")


@_op("x", quiet=False)
def transpose(x: Tensor, axes=None) -> Tensor:
    xp = x.backend.xp
    if axes is None:
        axes = tuple(reversed(range(x.ndim)))
    axes = tuple(axes)
    if sorted(a % x.ndim if -x.ndim <= a < x.ndim else x.ndim for a in axes) != list(range(x.ndim)):
        raise ValueError(f"transpose: {axes} is not a permutation of the axes of shape {x.shape}")
    axes = tuple(a % x.ndim for a in axes)  # the inverse permutation below needs them non-negative
    inv = tuple(sorted(range(len(axes)), key=axes.__getitem__))  # on the host: no device round trip
    return _view(xp.transpose(x.data, axes), x.fmt, (x,), lambda g, out: (Exact(lambda gs: xp.transpose(gs, inv)),),
                 "transpose")


@_op("x", quiet=False)
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


@_op()
def concat(tensors, axis=0) -> Tensor:
    """Join along ``axis``; mixed formats promote (exactly) to the wider one."""
    ts = list(tensors)
    if not ts:
        raise ValueError("concat needs at least one tensor")
    for i, t in enumerate(ts):
        _require("concat", f"tensors[{i}]", t)
    _one_backend("concat", ts)
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


@_op("weight", quiet=False)
def embedding(ids, weight: Tensor) -> Tensor:
    """Rows of ``weight`` (num_embeddings, dim) picked by the integer array ``ids`` (any shape):
    the result has shape ``ids.shape + (dim,)`` and weight's format; the values are copied, so
    nothing is rounded (PyTorch's ``F.embedding(ids, weight)``).

    The backward adds the gradients of repeated ids in float32 and rounds each row of the
    weight's gradient once.  (PyTorch CPU adds them in the weight's own dtype, rounding after
    every addition, so its float16 / bfloat16 embedding gradients differ where an id repeats.)
    Ids that are not integers, or lie outside ``[0, num_embeddings)``, raise.
    """
    if not isinstance(weight, Tensor) or weight.ndim != 2:
        raise ValueError(f"embedding: weight must be a 2-d Tensor (num_embeddings, dim), got "
                         f"{getattr(weight, 'shape', type(weight).__name__)}")
    be = weight.backend
    xp = be.xp
    raw = ids.data if isinstance(ids, Tensor) else ids
    idx = xp.asarray(raw)
    if idx.dtype.kind not in "iu":
        raise TypeError(f"embedding: ids must be integers, got dtype {idx.dtype} (shape {tuple(idx.shape)})")
    n = weight.shape[0]
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= n):
        raise ValueError(f"embedding: ids of shape {tuple(idx.shape)} must lie in [0, {n}) for weight shape "
                         f"{weight.shape}, got {int(idx.min())}..{int(idx.max())}")
    flat = idx.reshape(-1)

    def backward(g, out):
        return (_rows_added(flat, g.reshape(-1, weight.shape[1]), weight.shape, be),)

    return _view(weight.data[idx], weight.fmt, (weight,), backward, "embedding")


def _rows_added(flat, g2, shape: tuple, be):
    """float32 zeros of ``shape`` with row ``g2[i]`` added into row ``flat[i]``, for i in order:
    numpy's ``add.at`` (z = 0 + g_first + ... + g_last per row, one float32 addition at a time).

    The same sums faster on numpy: the rows of each id are laid out by their order along a new
    outer axis, after a row of +0 and before +0 padding, and added along it (a reduction over
    the outer axis adds whole rows one after another: the same sequence of float32 additions;
    +0 padding leaves every sum as it is, -0 included, since a sum from +0 is never -0).  Where
    the padding would outgrow the gradient (an id repeated far more often than the others),
    ``add.at`` itself."""
    n = flat.shape[0]
    if be.xp is not np or n == 0:
        z = be.xp.zeros(shape, dtype=be.xp.float32)
        be.index_add(z, flat, g2)
        return z
    ids, inv, counts = np.unique(flat, return_inverse=True, return_counts=True)
    depth = int(counts.max()) + 1
    z = np.zeros(shape, dtype=np.float32)
    if depth * ids.size > 4 * n + 64:
        np.add.at(z, flat, g2)
        return z
    order = np.argsort(inv, kind="stable")
    slot = inv[order]
    rank = np.arange(1, n + 1) - (np.cumsum(counts) - counts)[slot]  # 1, 2, ... within each id
    pad = np.zeros((depth, ids.size, shape[1]), dtype=np.float32)
    pad[rank, slot] = g2[order]
    z[ids] = np.add.reduce(pad, axis=0)
    return z
