"""Primitive ops: each a forward and a backward side by side, on raw float32 arrays.

- ``core.py``         how every op makes its node; autocast's policy table; casts and broadcasting;
- ``arith.py``        + - * / neg pow, matmul, linear;
- ``elementwise.py``  exp log sqrt tanh sigmoid relu gelu abs masked_fill;
- ``reduce.py``       sum mean max;
- ``shape.py``        reshape transpose getitem concat embedding;
- ``softmax.py``      softmax, log_softmax (stable, or the naive composite) and the losses;
- ``norm.py``         layer_norm (float32 statistics, or a low-precision accumulator for the lab);
- ``attention.py``    scaled_dot_product_attention, a composite of the ops above, and causal_mask.

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

from ..backend import get_backend
from ..tensor import Tensor, storage_format, to_backend
from .arith import add, div, linear, matmul, mul, neg, pow, sub
from .attention import causal_mask, scaled_dot_product_attention
from .core import AUTOCAST_POLICY, broadcast_to, to_format
from .elementwise import abs, exp, gelu, log, masked_fill, relu, sigmoid, sqrt, tanh
from .norm import layer_norm
from .reduce import max, mean, sum
from .shape import concat, embedding, getitem, reshape, transpose
from .softmax import log_softmax, mse_loss, softmax

__all__ = ["AUTOCAST_POLICY", "to_format", "broadcast_to", "add", "sub", "mul", "div", "neg", "pow", "matmul",
           "linear", "exp", "log", "sqrt", "tanh", "sigmoid", "relu", "gelu", "abs", "sum", "mean", "max",
           "reshape", "transpose", "getitem", "concat", "log_softmax", "softmax", "mse_loss", "masked_fill",
           "embedding", "layer_norm", "scaled_dot_product_attention", "causal_mask"]


# --------------------------------------------------------------------------------- Tensor methods
# Bound here, once the ops exist: tensor.py never imports this module, so the two form no loop.


def _to(self: Tensor, fmt=None, *, backend=None) -> Tensor:
    """A differentiable cast into ``fmt`` (forward rounds once; backward rounds the gradient
    into this tensor's gradient format), and/or a differentiable move to another backend (the
    same values; the gradient moves back)."""
    out = self
    if backend is not None and get_backend(backend) is not self.backend:
        out = to_backend(out, get_backend(backend))
    if fmt is not None and storage_format(fmt, "Tensor.to") != out.fmt:
        out = to_format(out, storage_format(fmt, "Tensor.to"))
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
