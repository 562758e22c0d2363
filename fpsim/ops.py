"""Primitive ops: each a forward and a backward side by side, on raw float32 arrays.

Every forward computes in float32 and rounds its result ONCE into the output format
(``tensor.round_result``); every backward returns float32 gradients, which the graph walk
rounds once into each input's gradient format.  For + - * / and sqrt this is bit-identical
to native float16 / bfloat16 hardware, since float32 carries more than 2p+2 bits.

Matmul multiplies the low-precision inputs exactly and accumulates in float32 (BLAS sgemm on
the widened inputs - what tensor cores and PyTorch CPU do), then rounds once.  Reductions
accumulate in float32 unless a low-precision accumulator is asked for (``acc=``), a teaching
option that rounds after every addition.

Broadcasting is an explicit op (``broadcast_to``); its backward is the only place gradients
are summed over broadcast axes.  Shape-only ops (reshape, transpose, broadcast, indexing)
move values without rounding them.

Non-tensor operands (Python numbers, numpy arrays) are constants: they enter the float32
computation as float32 and do not change the result's format - a float16 tensor times 1e-8
is float16, computed as float32(x) * float32(1e-8) and rounded once, as PyTorch does.
"""

from __future__ import annotations

import builtins
import functools
import numbers

from numpy import broadcast_shapes as _broadcast_shapes  # shape arithmetic only (CuPy may lack it)
from numpy import errstate as _np_errstate  # only the warning switch; arrays go through the backend

from . import state
from .formats import Format, get_format
from .state import HOOKS
from .tensor import Tensor, move, promote, round_result

F32 = get_format("float32")

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
}


# --------------------------------------------------------------------------------- helpers
# Every op is written the same way: compute in float32 from the inputs' exact values, then
# ``_make`` rounds the result once into the output format and records the graph node.  The
# backward is a function ``backward(g, out)`` of the output's gradient ``g`` (float32) and the
# output tensor ``out`` (ops whose derivative is written in their output - exp, tanh, softmax -
# read ``out.f32()``, the rounded value, as PyTorch's kernels do); it returns one float32
# gradient (or None) per input.  Ops that only move values (reshape, indexing) use ``_view``:
# nothing is computed, so nothing is rounded.


def _quiet(fn):
    """Run an op with numpy's floating-point warnings off: inf and NaN are results the
    emulated hardware produces silently (and the monitor counts), not accidents."""

    @functools.wraps(fn)
    def op(*args, **kwargs):
        with _np_errstate(all="ignore"):
            return fn(*args, **kwargs)

    return op


def _make(out32, fmt: Format, parents: tuple, backward, op: str, *, stored=None) -> Tensor:
    """Round ``out32`` once into ``fmt`` (or take ``stored``, a result that is exact in fmt
    already) and make the output node."""
    be = parents[0].backend
    return Tensor._from_op(round_result(out32, fmt, be, op, "forward", stored=stored), fmt, parents, backward, op, be)


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


def _pair(a, b):
    """Both operands as Tensors, and the result format (constants do not promote)."""
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        if a.backend is not b.backend:
            raise ValueError(f"tensors on different backends: {a.backend.name} and {b.backend.name}")
        return a, b, promote(a.fmt, b.fmt)
    if isinstance(a, Tensor):
        return a, _const(b, a), a.fmt
    return _const(a, b), b, b.fmt


def _broadcast_pair(a: Tensor, b: Tensor, op: str):
    if a.shape == b.shape:
        return a, b
    try:
        shape = tuple(_broadcast_shapes(a.shape, b.shape))
    except ValueError:
        raise ValueError(f"{op}: shapes {a.shape} and {b.shape} do not broadcast") from None
    return broadcast_to(a, shape), broadcast_to(b, shape)


def _unbroadcast(g, shape, xp):
    """Sum g (float32) down to ``shape`` over the axes broadcasting added or stretched."""
    if tuple(g.shape) == tuple(shape):
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(i + lead for i, n in enumerate(shape) if n == 1 and g.shape[i + lead] != 1)
    return g.sum(axis=axes, dtype=xp.float32).reshape(shape)


# --------------------------------------------------------------------------------- casting


@_quiet
def to_format(x: Tensor, fmt) -> Tensor:
    """Round into ``fmt`` (``Tensor.to``); the gradient is rounded back into x's gradient format."""
    fmt = get_format(fmt)
    return _make(x.f32(), fmt, (x,), lambda g, out: (g,), "cast")


def broadcast_to(x: Tensor, shape) -> Tensor:
    shape = tuple(shape)
    if x.shape == shape:
        return x
    xp = x.backend.xp
    try:
        data = xp.broadcast_to(x.data, shape)
    except ValueError:
        raise ValueError(f"cannot broadcast shape {x.shape} to {shape}") from None
    return _view(data, x.fmt, (x,), lambda g, out: (_unbroadcast(g, x.shape, xp),), "broadcast")


# --------------------------------------------------------------------------------- arithmetic


@_quiet
def add(a, b) -> Tensor:
    a, b, fmt = _pair(a, b)
    a, b = _broadcast_pair(a, b, "add")
    return _make(a.f32() + b.f32(), fmt, (a, b), lambda g, out: (g, g), "add")


@_quiet
def sub(a, b) -> Tensor:
    a, b, fmt = _pair(a, b)
    a, b = _broadcast_pair(a, b, "sub")
    return _make(a.f32() - b.f32(), fmt, (a, b), lambda g, out: (g, -g), "sub")


@_quiet
def mul(a, b) -> Tensor:
    a, b, fmt = _pair(a, b)
    a, b = _broadcast_pair(a, b, "mul")
    a32, b32 = a.f32(), b.f32()
    return _make(a32 * b32, fmt, (a, b), lambda g, out: (g * b32, g * a32), "mul")


@_quiet
def div(a, b) -> Tensor:
    a, b, fmt = _pair(a, b)
    a, b = _broadcast_pair(a, b, "div")
    a32, b32 = a.f32(), b.f32()
    return _make(a32 / b32, fmt, (a, b), lambda g, out: (g / b32, -g * a32 / (b32 * b32)), "div")


@_quiet
def neg(x: Tensor) -> Tensor:
    return _make(-x.f32(), x.fmt, (x,), lambda g, out: (-g,), "neg")


@_quiet
def pow(x: Tensor, p) -> Tensor:
    if isinstance(p, Tensor) or not isinstance(p, numbers.Real):
        raise TypeError(f"pow takes a scalar exponent, got {type(p).__name__}")
    (x,) = _autocast("pow", x)
    xp = x.backend.xp
    x32 = x.f32()
    p32 = xp.float32(p)
    return _make(x32**p32, x.fmt, (x,), lambda g, out: (g * p32 * x32 ** (p32 - 1),), "pow")


# --------------------------------------------------------------------------------- matmul


@_quiet
def matmul(a, b, acc=None) -> Tensor:
    """a @ b for 2-d and batched (..., n, k) @ (..., k, m) operands.

    Products of the low-precision inputs are exact in float32; they are summed in float32
    (BLAS) and the result is rounded once.  ``acc="float16"`` (or any format) instead keeps
    a running sum in that format, rounding after every one of the k additions - swamping.
    """
    a, b, fmt = _pair(a, b)
    if state.autocast_format() is not None:
        a, b = _autocast("matmul", a, b)
        fmt = state.autocast_format()
    be = a.backend
    xp = be.xp
    try:
        if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
            raise ValueError
        _broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} do not fit (need (..., n, k) @ (..., k, m) "
                         "with broadcastable batch dimensions)") from None
    a32, b32 = a.f32(), b.f32()
    out32 = be.matmul(a32, b32) if acc is None else _matmul_low_acc(a32, b32, get_format(acc), be)

    def backward(g, out):
        ga = be.matmul(g, xp.swapaxes(b32, -1, -2))
        gb = be.matmul(xp.swapaxes(a32, -1, -2), g)
        return _unbroadcast(ga, a.shape, xp), _unbroadcast(gb, b.shape, xp)

    return _make(out32, fmt, (a, b), backward, "matmul")


@_quiet
def linear(x, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x @ weight.T + bias as ONE op, like PyTorch's ``linear`` (addmm): float32 products and
    accumulation, the bias added in float32, one rounding.  Under autocast all three inputs
    are narrowed to the autocast format, as PyTorch does for ``linear``."""
    if not isinstance(x, Tensor):
        x = _const(x, weight)
    ins = _autocast("linear", *((x, weight) if bias is None else (x, weight, bias)))
    x, weight = ins[0], ins[1]
    bias = ins[2] if bias is not None else None
    fmt = promote(*(t.fmt for t in ins))
    if weight.ndim != 2 or x.ndim < 1 or x.shape[-1] != weight.shape[1]:
        raise ValueError(f"linear: input shape {x.shape} does not fit weight shape {weight.shape} "
                         f"(need (..., {weight.shape[-1] if weight.ndim else '?'}))")
    if bias is not None and bias.shape != (weight.shape[0],):
        raise ValueError(f"linear: bias shape {bias.shape} does not fit weight shape {weight.shape}")
    be = x.backend
    xp = be.xp
    x32, w32 = x.f32(), weight.f32()
    out32 = be.matmul(x32, w32.T)
    if bias is not None:
        out32 += bias.f32()

    def backward(g, out):
        g2 = g.reshape(-1, g.shape[-1])
        gx = be.matmul(g, w32) if x.requires_grad else None
        gw = be.matmul(g2.T, x32.reshape(-1, x32.shape[-1]))
        gb = g2.sum(axis=0, dtype=xp.float32) if bias is not None else None
        return (gx, gw) if bias is None else (gx, gw, gb)

    return _make(out32, fmt, ins, backward, "linear")


def _matmul_low_acc(a32, b32, acc: Format, be):
    xp = be.xp
    shape = _broadcast_shapes(a32.shape[:-2], b32.shape[:-2]) + (a32.shape[-2], b32.shape[-1])
    s = xp.zeros(shape, dtype=xp.float32)
    for k in range(a32.shape[-1]):
        s = be.to_f32(be.round(s + a32[..., :, k : k + 1] * b32[..., k : k + 1, :], acc))
    return s


# --------------------------------------------------------------------------------- elementwise


@_quiet
def exp(x: Tensor) -> Tensor:
    (x,) = _autocast("exp", x)
    return _make(x.backend.xp.exp(x.f32()), x.fmt, (x,), lambda g, out: (g * out.f32(),), "exp")


@_quiet
def log(x: Tensor) -> Tensor:
    (x,) = _autocast("log", x)
    x32 = x.f32()
    return _make(x.backend.xp.log(x32), x.fmt, (x,), lambda g, out: (g / x32,), "log")


@_quiet
def sqrt(x: Tensor) -> Tensor:
    return _make(x.backend.xp.sqrt(x.f32()), x.fmt, (x,), lambda g, out: (g / (2 * out.f32()),), "sqrt")


@_quiet
def tanh(x: Tensor) -> Tensor:
    """tanh; like PyTorch, the backward uses the stored (rounded) output: g (1 - y^2)."""

    def backward(g, out):
        y = out.f32()
        return (g * (1 - y * y),)

    return _make(x.backend.xp.tanh(x.f32()), x.fmt, (x,), backward, "tanh")


@_quiet
def sigmoid(x: Tensor) -> Tensor:
    xp = x.backend.xp
    x32 = x.f32()
    e = xp.exp(-xp.abs(x32))  # exp of a non-positive number only: no overflow for large |x|
    s32 = xp.where(x32 >= 0, 1 / (1 + e), e / (1 + e))

    def backward(g, out):
        y = out.f32()
        return (g * y * (1 - y),)

    return _make(s32, x.fmt, (x,), backward, "sigmoid")


def _select(a, keep):
    """a where keep, else +0, on the bit patterns (an integer multiply by 0 or 1): exact for
    every value, inf and NaN included (a float ``a * keep`` would make inf * 0 = NaN), and
    several times faster than ``where`` on an unpredictable mask."""
    return (a.view(f"uint{8 * a.dtype.itemsize}") * keep).view(a.dtype)


@_quiet
def relu(x: Tensor) -> Tensor:
    """max(x, 0): -0 and NaN pass through, as in PyTorch.  Exact in every format, so the
    output is selected straight from x's storage and nothing is rounded."""
    x32 = x.f32()
    pos = x32 > 0
    keep = x32 < 0
    keep ^= True  # not below 0: -0 and NaN stay
    out32 = _select(x32, keep) if HOOKS else None  # monitors are shown the (exact) float32 result
    return _make(out32, x.fmt, (x,), lambda g, out: (_select(g, pos),), "relu", stored=_select(x.data, keep))


_GELU_C = 0.7978845608028654  # sqrt(2 / pi)


@_quiet
def gelu(x: Tensor) -> Tensor:
    """GELU, tanh approximation (PyTorch's ``gelu(approximate="tanh")``), in float32."""
    xp = x.backend.xp
    x32 = x.f32()
    c = xp.float32(_GELU_C)
    u = c * (x32 + xp.float32(0.044715) * x32**3)
    t = xp.tanh(u)
    out32 = xp.float32(0.5) * x32 * (1 + t)

    def backward(g, out):
        du = c * (1 + xp.float32(3 * 0.044715) * x32 * x32)
        return (g * (xp.float32(0.5) * (1 + t) + xp.float32(0.5) * x32 * (1 - t * t) * du),)

    return _make(out32, x.fmt, (x,), backward, "gelu")


@_quiet
def abs(x: Tensor) -> Tensor:  # noqa: A001 - the numpy/PyTorch name
    xp = x.backend.xp
    x32 = x.f32()
    return _make(xp.abs(x32), x.fmt, (x,), lambda g, out: (g * xp.sign(x32),), "abs")


# --------------------------------------------------------------------------------- reductions


def _norm_axes(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = []
    n = builtins.max(ndim, 1)  # builtins: this module's max is the op; a 0-d tensor takes axis 0 / -1
    for a in axes:
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


@_quiet
def sum(x: Tensor, axis=None, keepdims=False, acc=None) -> Tensor:  # noqa: A001
    """Sum over ``axis``, accumulating in float32 - or, with ``acc=fmt``, in a running sum
    rounded into ``fmt`` after every addition (to show swamping: counting by 1 stalls at
    2048 in float16, 256 in bfloat16)."""
    (x,) = _autocast("sum", x)
    be = x.backend
    xp = be.xp
    axes = _norm_axes(axis, x.ndim)
    x32 = x.f32()
    if acc is None:
        out32 = x32.sum(axis=axes, dtype=xp.float32, keepdims=keepdims)
    else:
        accf = get_format(acc)
        moved = xp.moveaxis(x32, axes, tuple(range(len(axes))))
        flat = moved.reshape((-1,) + moved.shape[len(axes):])
        s = xp.zeros(flat.shape[1:], dtype=xp.float32)
        for row in flat:
            s = be.to_f32(be.round(s + row, accf))
        out32 = s.reshape(tuple(1 if i in axes else n for i, n in enumerate(x.shape))) if keepdims else s
    return _make(out32, x.fmt, (x,), lambda g, out: (_expand_back(g, x.shape, axes, keepdims, xp),), "sum")


@_quiet
def mean(x: Tensor, axis=None, keepdims=False) -> Tensor:
    """Mean with a float32 sum and one float32 division, rounded once.  Its gradient is
    g / N: with N in the millions (dense prediction) that is where gradients get tiny."""
    (x,) = _autocast("mean", x)
    xp = x.backend.xp
    axes = _norm_axes(axis, x.ndim)
    n = 1
    for a in axes:
        n *= x.shape[a]
    inv = xp.float32(1.0 / n)
    out32 = x.f32().sum(axis=axes, dtype=xp.float32, keepdims=keepdims) / xp.float32(n)
    return _make(out32, x.fmt, (x,), lambda g, out: (_expand_back(g * inv, x.shape, axes, keepdims, xp),), "mean")


@_quiet
def max(x: Tensor, axis=None, keepdims=False) -> Tensor:  # noqa: A001
    """Maximum over ``axis``; the gradient is shared equally among tied maxima."""
    xp = x.backend.xp
    axes = _norm_axes(axis, x.ndim)
    x32 = x.f32()
    m = x32.max(axis=axes, keepdims=True)

    def backward(g, out):
        hit = (x32 == m).astype(xp.float32)
        share = hit / hit.sum(axis=axes, keepdims=True)
        return (_expand_back(g, x.shape, axes, keepdims, xp) * share,)

    out32 = m if keepdims else m.reshape(tuple(n for i, n in enumerate(x.shape) if i not in axes))
    return _make(out32, x.fmt, (x,), backward, "max")


# --------------------------------------------------------------------------------- shapes


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


# --------------------------------------------------------------------------------- softmax family


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


# --------------------------------------------------------------------------------- losses


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


# --------------------------------------------------------------------------------- Tensor methods
# Bound here, once the ops exist: tensor.py never imports this module, so the two form no loop.


def _to(self: Tensor, fmt=None, *, backend=None) -> Tensor:
    """A differentiable cast into ``fmt`` (forward rounds once; backward rounds the gradient
    into this tensor's gradient format), and/or a move to another backend."""
    from .backend import get_backend

    out = self
    if backend is not None and get_backend(backend) is not self.backend:
        out = move(out, get_backend(backend))
    if fmt is not None and get_format(fmt) != out.fmt:
        out = to_format(out, get_format(fmt))
    return out


def _shape_arg(args):
    """``reshape(2, 3)`` and ``reshape((2, 3))`` alike."""
    return args[0] if len(args) == 1 and isinstance(args[0], tuple | list) else args


_METHODS = {
    "__add__": add,
    "__radd__": lambda self, o: add(o, self),
    "__sub__": sub,
    "__rsub__": lambda self, o: sub(o, self),
    "__mul__": mul,
    "__rmul__": lambda self, o: mul(o, self),
    "__truediv__": div,
    "__rtruediv__": lambda self, o: div(o, self),
    "__neg__": neg,
    "__pow__": pow,
    "__matmul__": matmul,
    "__rmatmul__": lambda self, o: matmul(o, self),
    "__getitem__": getitem,
    "T": property(lambda self: transpose(self)),
    "to": _to,
    "float": lambda self: _to(self, "float32"),
    "half": lambda self: _to(self, "float16"),
    "bfloat16": lambda self: _to(self, "bfloat16"),
    "sum": lambda self, axis=None, keepdims=False, acc=None: sum(self, axis, keepdims, acc=acc),
    "mean": lambda self, axis=None, keepdims=False: mean(self, axis, keepdims),
    "max": lambda self, axis=None, keepdims=False: max(self, axis, keepdims),
    "reshape": lambda self, *shape: reshape(self, _shape_arg(shape)),
    "transpose": lambda self, *axes: transpose(self, _shape_arg(axes) or None),
    "exp": exp,
    "log": log,
    "sqrt": sqrt,
    "tanh": tanh,
    "sigmoid": sigmoid,
    "relu": relu,
    "gelu": gelu,
    "abs": abs,
}
for _name, _fn in _METHODS.items():
    setattr(Tensor, _name, _fn)
del _name, _fn
