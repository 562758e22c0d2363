"""Elementwise functions: exp, log, sqrt, tanh, sigmoid, relu, gelu, abs, masked_fill - each
computed in float32 from the input's exact values and rounded once.  exp, log and tanh are the
backend's: on the CPU backends correctly rounded to float32 (:mod:`fpsim.numerics.elementary`),
the same bits on every machine; sigmoid and gelu are their float32 formulas around them.
"""

from __future__ import annotations

from numpy import broadcast_shapes as _broadcast_shapes  # shape arithmetic only

from .. import state
from ..checks import is_real
from ..tensor import Exact, Tensor
from .core import _autocast, _make, _op

__all__ = ['exp', 'log', 'sqrt', 'tanh', 'sigmoid', 'relu', 'gelu', 'abs', 'masked_fill']


@_op("x")
def exp(x: Tensor) -> Tensor:
    (x,) = _autocast("exp", x)
    return _make(x.backend.exp(x.f32()), x.fmt, (x,), lambda g, out: (g * out.f32(),), "exp")


@_op("x")
def log(x: Tensor) -> Tensor:
    (x,) = _autocast("log", x)
    x32 = x.f32()
    return _make(x.backend.log(x32), x.fmt, (x,), lambda g, out: (g / x32,), "log")


@_op("x")
def sqrt(x: Tensor) -> Tensor:
    return _make(x.backend.xp.sqrt(x.f32()), x.fmt, (x,), lambda g, out: (g / (2 * out.f32()),), "sqrt")


@_op("x")
def tanh(x: Tensor) -> Tensor:
    """tanh; like PyTorch, the backward uses the stored (rounded) output: g (1 - y^2)."""

    def backward(g, out):
        y = out.f32()
        return (g * (1 - y * y),)

    return _make(x.backend.tanh(x.f32()), x.fmt, (x,), backward, "tanh")


@_op("x")
def sigmoid(x: Tensor) -> Tensor:
    xp = x.backend.xp
    x32 = x.f32()
    e = x.backend.exp(-xp.abs(x32))  # exp of a non-positive number only: no overflow for large |x|
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


@_op("x")
def relu(x: Tensor) -> Tensor:
    """max(x, 0): -0 and NaN pass through, as in PyTorch.  Exact in every format, so the
    output is selected straight from x's storage and nothing is rounded."""
    x32 = x.f32()
    pos = x32 > 0
    keep = x32 < 0
    keep ^= True  # not below 0: -0 and NaN stay
    # exact: monitors are shown only the stored result (RoundingEvent.exact32 is None)
    return _make(None, x.fmt, (x,), lambda g, out: (Exact(lambda gs: _select(gs, pos)),), "relu",
                 stored=_select(x.data, keep))


_GELU_C = 0.7978845608028654  # sqrt(2 / pi)


@_op("x")
def gelu(x: Tensor) -> Tensor:
    """GELU, tanh approximation (PyTorch's ``gelu(approximate="tanh")``), in float32:
    0.5 x (1 + tanh(u)), u = c (x + 0.044715 x^3), c = sqrt(2 / pi).  The cube is x * x * x, as
    PyTorch's kernel writes it (numpy's ``x**3`` calls pow per element and is some twenty times
    slower).  The backward, g (0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 0.044715 x^2)), reuses
    the forward's t = tanh(u) (the one array saved besides x).  Each float32 operation is the
    formula's, in its order; the passes write into arrays the op owns (``out=``), which changes
    no bit (each step is one correctly rounded float32 operation) and keeps the op's fresh
    arrays to three in the forward and two in the backward."""
    be = x.backend
    xp = be.xp
    x32 = x.f32()
    c = xp.float32(_GELU_C)
    t = x32 * x32
    t *= x32
    t *= xp.float32(0.044715)  # 0.044715 * x^3
    t += x32  # x + 0.044715 x^3
    t *= c  # u
    t = be.tanh(t)
    out32 = t + 1
    out32 *= xp.float32(0.5) * x32  # (0.5 x) (1 + t)

    def backward(g, out):
        if not t.ndim:  # a 0-d tensor: numpy scalars, nothing to write into
            du = c * (1 + xp.float32(3 * 0.044715) * x32 * x32)
            return (g * (xp.float32(0.5) * (1 + t) + xp.float32(0.5) * x32 * (1 - t * t) * du),)
        s = t * t
        xp.subtract(1, s, out=s)  # 1 - t^2
        a = xp.multiply(x32, xp.float32(0.5))
        s *= a  # (0.5 x) (1 - t^2)
        xp.multiply(x32, xp.float32(3 * 0.044715), out=a)
        a *= x32
        a += 1
        a *= c  # du = c (1 + (3 0.044715 x) x)
        s *= a  # ((0.5 x) (1 - t^2)) du
        xp.add(t, 1, out=a)
        a *= xp.float32(0.5)
        a += s  # 0.5 (1 + t) + ...
        a *= g
        return (a,)

    return _make(out32, x.fmt, (x,), backward, "gelu")


@_op("x")
def abs(x: Tensor) -> Tensor:  # noqa: A001 - the numpy/PyTorch name
    xp = x.backend.xp
    x32 = x.f32()
    return _make(xp.abs(x32), x.fmt, (x,), lambda g, out: (g * xp.sign(x32),), "abs")


@_op("x")
def masked_fill(x: Tensor, mask, value) -> Tensor:
    """x where ``mask`` is False, ``value`` where it is True (PyTorch's ``masked_fill``).

    ``mask``: a boolean array (or boolean Tensor data) broadcastable to x's shape - only x's
    shape, never the other way.  ``value`` (a real number: None or a string is a TypeError, as in
    PyTorch, and so is a bool) is rounded once into x's format:
    -inf stays -inf, ``finfo(float16).min`` = -65504 becomes -65536 in bfloat16.  Everything
    else is x's own stored value, so nothing else is rounded.  The gradient is g where the
    mask is False and 0 where it is True.
    """
    if not is_real(value):
        raise TypeError(f"masked_fill: value must be a real number, got {type(value).__name__}")
    xp = x.backend.xp
    m = mask.data if isinstance(mask, Tensor) else mask
    m = xp.asarray(m)
    if m.dtype != bool:
        raise TypeError(f"masked_fill: the mask must be boolean, got dtype {m.dtype}")
    try:
        if tuple(_broadcast_shapes(m.shape, x.shape)) != x.shape:
            raise ValueError
    except ValueError:
        raise ValueError(f"masked_fill: mask shape {tuple(m.shape)} does not broadcast to the tensor's shape "
                         f"{x.shape}") from None
    keep = ~m
    v32 = xp.float32(value)
    stored = None
    if not state.ENGINE_ROUNDING:  # x's stored values are exact, the fill value rounds alike everywhere:
        # selected straight from the storage, nothing widened or rounded but the one value (the same bits)
        stored = xp.where(m, x.backend.round(xp.asarray(v32), x.fmt), x.data)
    out32 = xp.where(m, v32, x.f32()) if stored is None or state.HOOKS else None  # what the hooks see
    # the fill value is an input too: a -inf written on purpose is not an overflow (fpsim.trace)
    # backward: the stored gradient where the mask is False, +0 (even where it is inf) where True
    return _make(out32, x.fmt, (x,), lambda g, out: (Exact(lambda gs: _select(gs, keep)),), "masked_fill",
                 stored=stored, inputs=(x, v32))
