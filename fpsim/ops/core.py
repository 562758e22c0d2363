"""The machinery every op shares: the one way an op makes its output node (``_make``, which
rounds once, or ``_view`` for ops that only move values), autocast's policy table, and the
handling of constants and broadcasting.

Every op is written the same way: compute in float32 from the inputs' exact values, then ``_make``
rounds the result once into the output format and records the graph node.  The backward is a
function ``backward(g, out)`` of the output's gradient ``g`` (float32) and the output tensor
``out`` (ops whose derivative is written in their output - exp, tanh, softmax - read
``out.f32()``, the rounded value, as PyTorch's kernels do); it returns one float32 gradient (or
None) per input.
"""

from __future__ import annotations

import functools
import inspect
import numbers

from numpy import broadcast_shapes as _broadcast_shapes  # shape arithmetic only (CuPy may lack it)
from numpy import errstate as _np_errstate  # only the warning switch; arrays go through the backend

from .. import state
from ..checks import is_integer
from ..formats import F32, Format
from ..tensor import Tensor, make_node, promote, storage_format

__all__ = ['AUTOCAST_POLICY', 'to_format', 'broadcast_to']


# Autocast, as one table: PyTorch's CUDA float16 policy.  "low": the inputs are narrowed to the
# autocast format and so is the result (matmul-like ops); "float32": the inputs are widened to
# float32 first, so the op computes and rounds in float32 (reductions, exp/log, softmax, norms,
# losses).  An op not listed runs in the format of its inputs.
AUTOCAST_POLICY = {
    "matmul": "low",
    "linear": "low",
    "pow": "float32",
    "exp": "float32",
    "log": "float32",
    "sum": "float32",
    "mean": "float32",
    "softmax": "float32",
    "log_softmax": "float32",
    "mse_loss": "float32",
    "layer_norm": "float32",
}
# Not listed, so in their inputs' format: add, mul, relu, gelu, masked_fill, embedding, ...  The
# composites follow from their parts: scaled_dot_product_attention runs its two products in the
# low format and its softmax in float32; cross_entropy is log_softmax, indexing and a mean.


def _op(*tensor_params: str, quiet: bool = True):
    """Declare an op: the parameters named in ``tensor_params`` must be Tensors (``"name?"``: a
    Tensor or None), else one TypeError naming the op and the parameter; every Tensor among the
    arguments (in a list or tuple too) must be on one backend, else one ValueError naming both -
    the ONE backend rule of every op.  ``quiet``: numpy's floating-point warnings off, since inf
    and NaN are results the emulated hardware produces silently (the monitor counts them)."""

    def wrap(fn):
        names = list(inspect.signature(fn).parameters)
        specs = tuple((p.rstrip("?"), names.index(p.rstrip("?")), p.endswith("?")) for p in tensor_params)
        name = fn.__name__

        @functools.wraps(fn)
        def op(*args, **kwargs):
            for param, i, optional in specs:
                v = args[i] if i < len(args) else kwargs.get(param)
                if not isinstance(v, Tensor):
                    _require(name, param, v, optional)
            if len(args) + len(kwargs) > 1:  # (one argument is on one backend)
                _one_backend(name, args)
                if kwargs:
                    _one_backend(name, (*args, *kwargs.values()))
            if not quiet:
                return fn(*args, **kwargs)
            with _np_errstate(all="ignore"):
                return fn(*args, **kwargs)

        return op

    return wrap


def _require(op: str, name: str, value, optional: bool = False) -> None:
    """TypeError naming ``op`` and ``name`` unless ``value`` is a Tensor (or None, if optional)."""
    if not (isinstance(value, Tensor) or optional and value is None):
        raise TypeError(f"{op}: {name} must be a Tensor{' or None' if optional else ''}, got {type(value).__name__} "
                        "(fpsim.tensor(...) makes one)")


def _one_backend(op: str, values) -> None:
    """ValueError unless every Tensor in ``values`` (or in a list / tuple among them) shares one backend."""
    be = None
    for v in values:
        if isinstance(v, Tensor):
            if be is None:
                be = v.backend
            elif v.backend is not be:
                _mixed(op, be, v.backend)
        elif isinstance(v, _SEQUENCES):
            for t in v:
                if isinstance(t, Tensor):
                    if be is None:
                        be = t.backend
                    elif t.backend is not be:
                        _mixed(op, be, t.backend)


_SEQUENCES = (list, tuple)


def _mixed(op: str, a, b):
    raise ValueError(f"{op}: tensors on different backends: {a.name} and {b.name} (move one with .to(backend=...))")


_make = make_node  # round once into fmt and make the output node: fpsim.tensor.make_node


def _view(data, fmt: Format, parents: tuple, backward, op: str) -> Tensor:
    """An op that moves values without computing new ones: nothing to round."""
    return Tensor._from_op(data, fmt, parents, backward, op, parents[0].backend)


def _autocast(op: str, *ts: Tensor) -> tuple:
    """The inputs of ``op`` as autocast's policy table has them (unchanged outside autocast)."""
    low = state.autocast_format()
    rule = AUTOCAST_POLICY.get(op)
    if low is None or rule is None:
        return ts
    want = low if rule == "low" else F32
    return tuple(to_format(t, want) if t.fmt != want else t for t in ts)


def _const(x, like: Tensor) -> Tensor:
    be = like.backend
    if isinstance(x, bool) or not isinstance(x, numbers.Real | list | tuple) and not hasattr(x, "dtype"):
        raise TypeError(f"cannot combine a Tensor with {type(x).__name__}")
    arr = be.asarray(x, dtype=be.xp.float32)
    return Tensor(arr, F32, backend=be)


def _pair(a, b, op: str):
    """Both operands as Tensors, and the result format (constants do not promote).  The backends
    were checked by ``_op``; one operand must be a Tensor."""
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        return a, b, promote(a.fmt, b.fmt)
    if isinstance(a, Tensor):
        return a, _const(b, a), a.fmt
    if not isinstance(b, Tensor):
        raise TypeError(f"{op}: one operand must be a Tensor, got {type(a).__name__} and {type(b).__name__}")
    return _const(a, b), b, b.fmt


def _broadcast_pair(a: Tensor, b: Tensor, op: str):
    if a.shape == b.shape:
        return a, b
    try:
        shape = tuple(_broadcast_shapes(a.shape, b.shape))
    except ValueError:
        raise ValueError(f"{op}: shapes {a.shape} and {b.shape} do not broadcast") from None
    return broadcast_to(a, shape), broadcast_to(b, shape)


def _unbroadcast(g, shape, be):
    """Sum g (float32) down to ``shape`` over the axes broadcasting added or stretched (the
    backend's sum: on the CPU, exact and rounded once)."""
    if tuple(g.shape) == tuple(shape):
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(i + lead for i, n in enumerate(shape) if n == 1 and g.shape[i + lead] != 1)
    return be.sum(g, axes).reshape(shape)


# --------------------------------------------------------------------------------- casting


@_op("x")
def to_format(x: Tensor, fmt) -> Tensor:
    """Round into ``fmt`` (``Tensor.to``); the gradient is rounded back into x's gradient format."""
    fmt = storage_format(fmt, "Tensor.to")
    return _make(x.f32(), fmt, (x,), lambda g, out: (g,), "cast")


@_op("x", quiet=False)
def broadcast_to(x: Tensor, shape) -> Tensor:
    shape = tuple(shape)
    if x.shape == shape:
        return x
    xp = x.backend.xp
    try:
        data = xp.broadcast_to(x.data, shape)
    except ValueError:
        raise ValueError(f"cannot broadcast shape {x.shape} to {shape}") from None
    return _view(data, x.fmt, (x,), lambda g, out: (_unbroadcast(g, x.shape, x.backend),), "broadcast")


def _norm_axes(axis, ndim, op: str = ""):
    """``axis`` (None, an integer or a sequence of integers, numpy's) as sorted non-negative axes;
    anything else, or an axis out of range, one error saying so (naming ``op`` where given)."""
    if axis is None:
        return tuple(range(ndim))
    axes = tuple(axis) if hasattr(axis, "__iter__") and not isinstance(axis, str) else (axis,)
    out = []
    n = max(ndim, 1)  # a 0-d tensor takes axis 0 / -1
    for a in axes:
        if not is_integer(a):  # 'a' was "'<=' not supported between 'int' and 'str'", 1.5 "not iterable"
            raise TypeError(f"{op + ': ' if op else ''}axis must be an integer, a tuple of integers or None, "
                            f"got {axis!r}")
        if not -n <= a < n:
            raise ValueError(f"axis {a} is out of range for a tensor with {ndim} dimensions")
        if ndim:
            out.append(a % ndim)
    return tuple(sorted(set(out)))


def _expand_back(g, x_shape, axes, keepdims, xp):
    """Broadcast a reduced gradient back over the reduced axes (float32)."""
    if not keepdims:
        for a in axes:
            g = xp.expand_dims(g, a)
    return xp.broadcast_to(g, x_shape)
