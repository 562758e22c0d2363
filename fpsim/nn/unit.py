"""Unit scaling (Blake et al., "Unit Scaling: Out-of-the-Box Low-Precision Training", arXiv
2303.11257): layers whose weights are drawn N(0, 1) and whose ops carry fixed scales, chosen so
that at initialisation every activation and every activation gradient has about unit variance -
so an fp8 cast at scale 1 meets numbers in the middle of its range, with no amax and no scale.

The scales are constants of the architecture, applied by one op, :func:`scaled`: forward it
multiplies by ``fwd``, backward by ``bwd`` - separate factors, as the paper's ``scale_fwd`` /
``scale_bwd`` (graphcore-research/unit-scaling) are.  The gradients are therefore not the
gradients of the loss: each parameter's is the true one times a constant of the architecture
(``sqrt(fan_in)`` for a weight), which Adam - invariant to a constant factor on a tensor's gradient,
up to its epsilon - does not see.

- :class:`UnitLinear`: ``y = (x @ W.T) / sqrt(fan_in) + b``, W ~ N(0, 1), b = 0; the gradient of x is
  ``(g @ W) / sqrt(fan_out)``; the weight's is ``g.T @ x`` (std about sqrt(batch): it reaches the
  optimizer in float32 and is never cast to fp8 here, so the paper's 1/sqrt(batch) is left out).
  The product itself is an ordinary :class:`~fpsim.nn.Linear` (``.linear``), so
  ``lowp.convert`` swaps it for an fp8 or block-scaled GEMM like any other.
- :class:`UnitActivation`: tanh or GELU divided by its root mean square over N(0, 1) inputs
  forward, its gradient divided by the root mean square of its derivative backward (both by
  Gauss-Hermite quadrature in float64).
- :class:`UnitMLP`: the two alternating, with an input scale and an output scale.
- :func:`unit_mse_loss`: the mean squared error forward; backward, ``2 (pred - target) / sqrt(8)``
  (the library's ``U.mse_loss``): unit variance for unit-variance prediction and target.
- :func:`unit_ce_logits`: logits for ``nn.cross_entropy`` whose gradient comes back as
  ``(softmax - onehot) * V / sqrt(V - 1)`` per row (``U.cross_entropy``): unit variance at a
  uniform softmax over V classes.
- :func:`unit_scale_`: an existing model (the tiny GPT) made unit-scaled in place: every
  ``nn.Linear`` replaced by a :class:`UnitLinear` of its sizes, every GELU and tanh by a
  :class:`UnitActivation`.
"""

from __future__ import annotations

import math

import numpy as np

from .. import ops
from ..checks import check_seed
from ..numerics.random import normal
from ..ops.core import _op
from ..tensor import Tensor, make_node, tensor
from .modules import GELU, Linear, Module, Sequential, Tanh, model_format, module_rng

__all__ = ["scaled", "scale_fwd", "scale_bwd", "UnitLinear", "UnitActivation", "UnitMLP", "unit_mse_loss",
           "unit_ce_logits", "unit_gain", "unit_scale_"]


def _factor(value, name: str) -> float:
    v = float(value) if isinstance(value, int | float | np.floating) and not isinstance(value, bool) else math.nan
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"scaled: {name} must be a finite number > 0, got {value!r}")
    return v


@_op("x")
def scaled(x: Tensor, fwd=1.0, bwd=1.0) -> Tensor:
    """``x * fwd`` forward (the float32 product of x's exact value and float32(fwd), rounded once
    into x's format); backward the incoming gradient times float32(bwd), rounded into x's
    gradient format by the graph walk.  ``fwd``, ``bwd``: finite numbers > 0."""
    f, b = (x.backend.xp.float32(_factor(v, n)) for v, n in ((fwd, "fwd"), (bwd, "bwd")))
    return make_node(x.f32() * f, x.fmt, (x,), lambda g, out: (g * b,), "scaled")


def scale_fwd(x: Tensor, factor) -> Tensor:
    """``x * factor`` forward; the gradient passes back unchanged."""
    return scaled(x, factor, 1.0)


def scale_bwd(x: Tensor, factor) -> Tensor:
    """``x`` unchanged forward; the gradient times ``factor`` going back."""
    return scaled(x, 1.0, factor)


class UnitLinear(Module):
    """``y = (x @ W.T) / sqrt(in_features) + b``; W (out, in) drawn N(0, 1) in float64 from ``seed``
    / ``rng`` and rounded into ``fmt``, b zeros; x's gradient ``(g @ W) / sqrt(out_features)``
    (module docstring).  The GEMM is ``self.linear``, a bias-free :class:`Linear`."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, fmt="float32", seed=None,
                 rng=None, backend=None):
        super().__init__()
        fmt = model_format(fmt, "UnitLinear")
        rng = module_rng(rng, seed, "UnitLinear")
        self.linear = Linear(in_features, out_features, False, fmt=fmt, rng=rng, backend=backend)
        w = self.linear.weight
        w.data = tensor(normal(rng, (out_features, in_features)), fmt, backend=w.backend).data
        self.in_features, self.out_features = in_features, out_features
        self.bias = (tensor(np.zeros(out_features), fmt, requires_grad=True, backend=backend, name="bias")
                     if bias else None)

    def forward(self, x: Tensor) -> Tensor:
        y = scale_fwd(self.linear(scale_bwd(x, self.out_features ** -0.5)), self.in_features ** -0.5)
        return y if self.bias is None else y + self.bias

    def __repr__(self) -> str:
        return f"UnitLinear({self.in_features}, {self.out_features}, fmt={self.linear.weight.fmt.name})"


_ACTS = {"tanh": ops.tanh, "gelu": ops.gelu}


# (1 / rms f(z), 1 / rms f'(z)) for z ~ N(0, 1): the integrals computed once with mpmath at 40
# digits (the tests recompute them), written here as the nearest floats - not a float64
# quadrature at import, whose nodes come from LAPACK and whose tanh from the machine's libm.
# gelu is ops.gelu's tanh approximation, 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))).
_GAINS = {"tanh": (1.5925374197228315, 1.467413591630795), "gelu": (1.533580521666147, 1.4811680580933506)}


def unit_gain(name: str) -> tuple[float, float]:
    """(1 / rms f(z), 1 / rms f'(z)) for z ~ N(0, 1) and f the activation ``name`` (``"tanh"`` or
    ``"gelu"``, the tanh approximation ``ops.gelu`` computes), to float64 precision.  The root
    mean square, not the std: the next layer's output variance is its input's second moment."""
    if name not in _GAINS:
        raise ValueError(f"unit_gain: unknown activation {name!r}; known: {', '.join(_GAINS)}")
    return _GAINS[name]


class UnitActivation(Module):
    """``f(x) * a`` forward with ``a = 1 / rms f(z)``; the gradient ``g * f'(x) * b`` backward with
    ``b = 1 / rms f'(z)`` (z ~ N(0, 1); :func:`unit_gain`).  ``name``: ``"tanh"`` or ``"gelu"``."""

    def __init__(self, name: str = "tanh"):
        super().__init__()
        self.fn = name
        self.fwd, self.bwd = unit_gain(name)

    def forward(self, x: Tensor) -> Tensor:
        return scale_fwd(_ACTS[self.fn](scale_bwd(x, self.bwd)), self.fwd)

    def __repr__(self) -> str:
        return f"UnitActivation({self.fn!r})"


class UnitMLP(Sequential):
    """:class:`UnitLinear` layers of the given ``sizes`` with :class:`UnitActivation` between them.
    ``input_scale`` multiplies the input first (forward only: 1 / the data's std gives the first
    layer unit-variance inputs); ``output_scale`` multiplies the output forward and divides its
    gradient backward (the data's std: the output starts at the target's scale while the
    gradient entering the last layer keeps unit scale)."""

    def __init__(self, sizes, activation="tanh", *, fmt="float32", seed=0, bias=True, backend=None,
                 input_scale: float = 1.0, output_scale: float = 1.0):
        sizes = list(sizes)
        if len(sizes) < 2:
            raise ValueError(f"UnitMLP needs at least two sizes (input and output), got {sizes}")
        rng = module_rng(None, seed, "UnitMLP")
        layers = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(UnitLinear(a, b, bias, fmt=fmt, rng=rng, backend=backend))
            if i < len(sizes) - 2:
                layers.append(UnitActivation(activation))
        super().__init__(*layers)
        object.__setattr__(self, "scales", (_factor(input_scale, "input_scale"), _factor(output_scale, "output_scale")))

    def forward(self, x: Tensor) -> Tensor:
        x_in, out = self.scales
        y = super().forward(scale_fwd(x, x_in) if x_in != 1.0 else x)
        return scaled(y, out, 1 / out) if out != 1.0 else y


def unit_mse_loss(pred: Tensor, target) -> Tensor:
    """``mean((pred - target)**2)`` forward (``ops.mse_loss``: float32, one rounding); backward,
    pred's gradient ``2 (pred - target) / sqrt(8)`` - mse_loss's ``2 (pred - target) / N`` times
    ``N / sqrt(8)`` in float32 (exact for N a power of two)."""
    return ops.mse_loss(scale_bwd(pred, pred.size / math.sqrt(8)), target)


def unit_ce_logits(logits: Tensor) -> Tensor:
    """Logits (N, V) for ``nn.cross_entropy`` (the mean over the N rows): unchanged forward;
    backward their gradient ``(softmax - onehot) / N`` times ``N * V / sqrt(V - 1)`` in float32,
    which makes the loss unit-scaled (``U.cross_entropy``)."""
    if not isinstance(logits, Tensor) or logits.ndim != 2 or logits.shape[1] < 2:
        raise ValueError(f"unit_ce_logits: logits must be a Tensor (N, V) with V >= 2, got "
                         f"{getattr(logits, 'shape', type(logits).__name__)}")
    n, v = logits.shape
    return scale_bwd(logits, n * v / math.sqrt(v - 1))


def unit_scale_(model: Module, seed: int = 0) -> Module:
    """``model`` made unit-scaled in place (and returned): every ``nn.Linear`` inside it becomes a
    :class:`UnitLinear` of the same sizes and bias (its weights drawn N(0, 1) from ``seed``, in
    module order), every ``nn.GELU`` / ``nn.Tanh`` a :class:`UnitActivation`.  The old layers'
    parameters are dropped: call it on a fresh model, before an optimizer holds them.

    Idempotent: the ``Linear`` a :class:`UnitLinear` computes with is part of it, not a layer to
    swap, so a second call leaves a unit-scaled model as it is.  A bare ``Linear`` cannot be
    swapped in place (it is no one's child here): build a :class:`UnitLinear` instead."""
    if not isinstance(model, Module):
        raise TypeError(f"unit_scale_: model must be an fpsim Module (fpsim.nn.Module), got {type(model).__name__}")
    if type(model) is Linear:
        raise ValueError("unit_scale_: a bare Linear cannot be made unit-scaled in place; build "
                         "UnitLinear(in_features, out_features) instead, or call it on the model holding the Linear")
    check_seed(seed)
    rng = np.random.default_rng(seed)
    swaps = [(parent, name, child) for _, parent in list(model.named_modules()) if not isinstance(parent, UnitLinear)
             for name, child in list(parent._modules.items()) if type(child) in (Linear, GELU, Tanh)]
    for parent, name, child in swaps:
        if type(child) is Linear:
            new = UnitLinear(child.in_features, child.out_features, child.bias is not None,
                             fmt=child.weight.fmt, rng=rng, backend=child.weight.backend)
        else:
            new = UnitActivation("gelu" if type(child) is GELU else "tanh")
        setattr(parent, name, new)
    return model
