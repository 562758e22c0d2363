"""Arithmetic and matrix products: + - * / neg pow, matmul, and linear (addmm) as one op.

Matmul multiplies the low-precision inputs exactly and sums the products exactly, rounding the sum
once to float32 (:func:`fpsim.numerics.matmul_f32`: the same bits whatever BLAS the machine has),
then once more into the output's format.  Non-tensor operands
(Python numbers, numpy arrays) are constants: they enter the float32 computation as float32 and
do not change the result's format - a float16 tensor times 1e-8 is float16, computed as
float32(x) * float32(1e-8) and rounded once, as PyTorch does.
"""

from __future__ import annotations

import numbers

from numpy import broadcast_shapes as _broadcast_shapes

from .. import state, tensorcore
from ..formats import F32, Format, get_format
from ..numerics import matmul_f32
from ..tensor import Tensor, promote, round_result
from .core import _autocast, _broadcast_pair, _const, _make, _op, _pair, _unbroadcast

__all__ = ['add', 'sub', 'mul', 'div', 'neg', 'pow', 'matmul', 'linear', 'tensor_core_gemm']


@_op()
def add(a, b) -> Tensor:
    a, b, fmt = _pair(a, b, "add")
    a, b = _broadcast_pair(a, b, "add")
    return _make(a.f32() + b.f32(), fmt, (a, b), lambda g, out: (g, g), "add")


@_op()
def sub(a, b) -> Tensor:
    a, b, fmt = _pair(a, b, "sub")
    a, b = _broadcast_pair(a, b, "sub")
    return _make(a.f32() - b.f32(), fmt, (a, b), lambda g, out: (g, -g), "sub")


@_op()
def mul(a, b) -> Tensor:
    a, b, fmt = _pair(a, b, "mul")
    a, b = _broadcast_pair(a, b, "mul")
    a32, b32 = a.f32(), b.f32()
    # a constant (or any input outside the graph) gets no gradient: its product is never computed
    return _make(a32 * b32, fmt, (a, b), lambda g, out: (g * b32 if a.requires_grad else None,
                                                         g * a32 if b.requires_grad else None), "mul")


@_op()
def div(a, b) -> Tensor:
    a, b, fmt = _pair(a, b, "div")
    a, b = _broadcast_pair(a, b, "div")
    a32, b32 = a.f32(), b.f32()
    return _make(a32 / b32, fmt, (a, b), lambda g, out: (g / b32 if a.requires_grad else None,
                                                         -g * a32 / (b32 * b32) if b.requires_grad else None), "div")


@_op("x")
def neg(x: Tensor) -> Tensor:
    return _make(-x.f32(), x.fmt, (x,), lambda g, out: (-g,), "neg")


@_op("x")
def pow(x: Tensor, p) -> Tensor:
    if isinstance(p, Tensor) or not isinstance(p, numbers.Real):
        raise TypeError(f"pow takes a scalar exponent, got {type(p).__name__}")
    (x,) = _autocast("pow", x)
    be = x.backend
    x32 = x.f32()
    p32 = be.xp.float32(p)
    return _make(be.pow(x32, p32), x.fmt, (x,), lambda g, out: (g * p32 * be.pow(x32, p32 - 1),), "pow")


# ------------------------------------------------------------------------------- matmul


@_op()
def matmul(a, b, acc=None) -> Tensor:
    """a @ b for 2-d and batched (..., n, k) @ (..., k, m) operands.

    Products of the low-precision inputs are exact; their exact sum is rounded once to float32
    (:func:`fpsim.numerics.matmul_f32`), then into the output's format.  ``acc="float16"`` (or any format) instead keeps
    a running sum in that format, rounding after every one of the k additions - swamping.
    Inside ``fpsim.tensorcore.emulate(arch)`` the sums (forward and both gradients) are that
    architecture's tensor-core accumulation instead (:func:`tensor_core_gemm`).
    """
    a, b, fmt = _pair(a, b, "matmul")
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
    tc = state.tensor_core()
    if acc is None:
        out32 = tensor_core_gemm(a32, b32, a.fmt, b.fmt, be, tc, "matmul", "forward")
    else:
        out32 = _matmul_low_acc(a32, b32, get_format(acc), be)

    def backward(g, out):
        bt, at = xp.swapaxes(b32, -1, -2), xp.swapaxes(a32, -1, -2)
        ga = tensor_core_gemm(g, bt, out.grad_fmt, b.fmt, be, tc, "matmul", "backward")
        gb = tensor_core_gemm(at, g, a.fmt, out.grad_fmt, be, tc, "matmul", "backward")
        return _unbroadcast(ga, a.shape, be), _unbroadcast(gb, b.shape, be)

    return _make(out32, fmt, (a, b), backward, "matmul")


@_op("weight", "bias?")
def linear(x, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x @ weight.T + bias as ONE op, like PyTorch's ``linear`` (addmm): the exact product sums
    rounded to float32, the bias added in float32, one rounding into the output's format.  Under autocast all three inputs
    are narrowed to the autocast format, as PyTorch does for ``linear``.  Inside
    ``fpsim.tensorcore.emulate(arch)`` the three GEMMs accumulate as that tensor core does."""
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
    x32, w32 = x.f32(), weight.f32()
    tc = state.tensor_core()
    out32 = tensor_core_gemm(x32, w32.T, x.fmt, weight.fmt, be, tc, "linear", "forward")
    if bias is not None:
        out32 += bias.f32()

    def backward(g, out):
        g2 = g.reshape(-1, g.shape[-1])
        gx = tensor_core_gemm(g, w32, out.grad_fmt, weight.fmt, be, tc, "linear", "backward") if x.requires_grad \
            else None
        gw = tensor_core_gemm(g2.T, x32.reshape(-1, x32.shape[-1]), out.grad_fmt, x.fmt, be, tc, "linear", "backward")
        gb = be.sum(g2, axis=0) if bias is not None else None
        return (gx, gw) if bias is None else (gx, gw, gb)

    return _make(out32, fmt, ins, backward, "linear")


def tensor_core_gemm(a32, b32, fa: Format, fb: Format, be, tc, op: str, direction: str):
    """float32 ``a32 @ b32`` of values exactly in ``fa`` / ``fb``: the exact sums rounded once
    (the backend's ``matmul``) when ``tc`` is None or its architecture has no instruction for
    that pair (float32 operands, say); otherwise
    ``tc`` = (architecture, promote_every) as :func:`fpsim.tensorcore.matmul` computes it, on the
    numpy backends.  The hooks see that accumulation as ONE rounding, op ``"<op>.accumulate"``
    into float32: exact32 the exact sum rounded to float32, stored the tensor core's result."""
    if tc is None or not tensorcore.takes(tc[0], fa.name, fb.name):
        return be.matmul(a32, b32, fa, fb)
    if be.name not in ("numpy", "numpy-f32"):
        raise ValueError(f"tensor-core emulation runs on the numpy backends, not {be.name}")
    a, b = be.to_numpy(a32), be.to_numpy(b32)
    lead = a.shape[:-1]
    if a.ndim > 2 and b.ndim == 2:  # (..., k) @ (k, n): one (rows, k) @ (k, n) product
        a = a.reshape(-1, a.shape[-1])
    out = tensorcore.matmul_values(a, b, fa.name, fb.name, arch=tc[0], promote_every=tc[1])
    if a.ndim == 2 and len(lead) > 1:
        a, out = a.reshape(*lead, a.shape[-1]), out.reshape(*lead, out.shape[-1])
    if state.HOOKS:
        exact = matmul_f32(a, b)
        round_result(exact, F32, be, f"{op}.accumulate", direction, stored=be.asarray(out), inputs=(a32, b32))
    return be.asarray(out)


def _matmul_low_acc(a32, b32, acc: Format, be):
    xp = be.xp
    shape = _broadcast_shapes(a32.shape[:-2], b32.shape[:-2]) + (a32.shape[-2], b32.shape[-1])
    s = xp.zeros(shape, dtype=xp.float32)
    for k in range(a32.shape[-1]):
        # each partial sum is stored in the accumulator: rounded where the hooks see it
        s = be.to_f32(round_result(s + a32[..., :, k : k + 1] * b32[..., k : k + 1, :], acc, be, "matmul",
                                   "forward", "accumulator"))
    return s
