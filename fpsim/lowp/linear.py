"""The fp8 linear layer, as Transformer Engine's ``te.Linear`` computes it, and
:func:`swap_fp8_linears`, which swaps it into a model (``lowp.convert`` with a per-tensor recipe).

- forward: ``x`` and ``W`` are cast to e4m3fn with their own scales; the matmul multiplies the
  fp8 numbers exactly in float32, accumulates in float32 and multiplies the sum by
  ``(1/s_x) * (1/s_W)`` (exact for power-of-two scales; otherwise that product is rounded once
  to float32, and the multiplication rounds); the bias is added in float32 and the sum rounded
  once into the output format (that of an ordinary ``linear`` on the unquantized inputs).  With
  the recipe's ``tensor_core`` (an architecture) each fp8 x fp8 GEMM accumulates as that tensor
  core does instead (:mod:`fpsim.tensorcore`, e8m13 on Hopper), before the scales; the hooks see
  that accumulation as one rounding, op ``fp8.linear.accumulate``.
- backward: the incoming gradient ``g`` is cast to e5m2 with its own delayed scale; then
  ``dx = (g8 @ W8) / (s_g s_W)`` and ``dW = (g8.T @ x8) / (s_g s_x)``, float32 accumulation
  again; ``db`` is summed in float32 from the unquantized ``g`` (TE computes it in the same pass
  as the cast, from the high-precision gradient).
- the parameters stay in their own (float32) format: they are the master weights, and the
  optimizer updates them as usual.  The fp8 weight is a fresh cast each step.
"""

from __future__ import annotations

import numpy as np

from .. import nn
from ..formats import get_format
from ..ops.arith import tensor_core_gemm
from ..tensor import Tensor, make_node, promote
from .handlers import LAYER_HANDLERS
from .quant import quantize_fp8
from .recipes import CurrentScaling, DelayedScaling
from .scaling import ScalingGroup, ScalingState
from .swap import check_linear_args, linears_to_swap, share_linear

__all__ = ["LinearScaling", "fp8_linear", "Fp8Linear", "swap_fp8_linears"]


class LinearScaling:
    """The three scaling states of one fp8 linear layer: ``input`` and ``weight`` (forward
    format) and ``grad_output`` (backward format), named ``<layer>.input`` etc."""

    def __init__(self, name: str, recipe: DelayedScaling):
        self.name = name
        self.recipe = recipe
        self.input = ScalingState(f"{name}.input" if name else "input", recipe.fwd_format, recipe)
        self.weight = ScalingState(f"{name}.weight" if name else "weight", recipe.fwd_format, recipe)
        self.grad_output = ScalingState(f"{name}.grad_output" if name else "grad_output", recipe.bwd_format, recipe)

    def states(self) -> tuple[ScalingState, ScalingState, ScalingState]:
        return (self.input, self.weight, self.grad_output)


def fp8_linear(x: Tensor, weight: Tensor, bias: Tensor | None, meta: LinearScaling) -> Tensor:
    """``x @ weight.T + bias`` with fp8 inputs (see the module docstring for every rounding).

    In: Tensors of any format (their exact float32 values are cast).  Out: rounded once into
    ``promote(x.fmt, weight.fmt[, bias.fmt])``.  Gradients for ``x``, ``weight``, ``bias``
    come back as float32 sums and are rounded into their gradient formats by the graph walk.
    """
    check_linear_args("fp8_linear", x, weight, bias)
    be = x.backend
    xp = be.xp
    ins = (x, weight) if bias is None else (x, weight, bias)
    fmt = promote(*(t.fmt for t in ins))
    xq = quantize_fp8(x, meta.input, target="input")
    wq = quantize_fp8(weight, meta.weight, target="weight")
    # The fp8 numbers widened to float32 (exact).  The hardware keeps only xq and wq (one byte a
    # value) for the backward pass; the emulator keeps these widened copies too, to save time.
    x8, w8 = xq.codes_f32(), wq.codes_f32()
    tc = (meta.recipe.tensor_core, None) if meta.recipe.tensor_core else None
    f_fwd, f_bwd = get_format(meta.recipe.fwd_format), get_format(meta.recipe.bwd_format)
    with np.errstate(over="ignore", invalid="ignore"):
        out32 = tensor_core_gemm(x8, w8.T, f_fwd, f_fwd, be, tc, "fp8.linear", "forward")  # products exact
        out32 *= xp.float32(float(xq.scale_inv) * float(wq.scale_inv))
        if bias is not None:
            out32 += bias.f32()

    def backward(g, out):
        gq = meta.grad_output.to_fp8(g, be, direction="backward", target="grad_output")
        g8 = gq.codes_f32()
        g2 = g8.reshape(-1, g8.shape[-1])
        with np.errstate(over="ignore", invalid="ignore"):
            gx = None
            if x.requires_grad:
                gx = tensor_core_gemm(g8, w8, f_bwd, f_fwd, be, tc, "fp8.linear", "backward")
                gx *= xp.float32(float(gq.scale_inv) * float(wq.scale_inv))  # gx is the GEMM's own new array
            gw = tensor_core_gemm(g2.T, x8.reshape(-1, x8.shape[-1]), f_bwd, f_fwd, be, tc, "fp8.linear", "backward")
            gw *= xp.float32(float(gq.scale_inv) * float(xq.scale_inv))
            gb = be.sum(g.reshape(-1, g.shape[-1]), 0) if bias is not None else None
        return (gx, gw) if bias is None else (gx, gw, gb)

    return make_node(out32, fmt, ins, backward, "fp8.linear")


class Fp8Linear(nn.Module):
    """An ``nn.Linear`` whose matmuls run in fp8 with delayed scaling.  It shares the weight and
    bias tensors of the layer it was made from, so an optimizer holding them keeps working."""

    def __init__(self, layer: nn.Linear, recipe: DelayedScaling | None = None, name: str = ""):
        super().__init__()
        share_linear(self, layer, "Fp8Linear")
        object.__setattr__(self, "meta", LinearScaling(name, recipe if recipe is not None else DelayedScaling()))

    def forward(self, x: Tensor) -> Tensor:
        return fp8_linear(x, self.weight, self.bias, self.meta)

    def __repr__(self) -> str:
        return (f"Fp8Linear({self.in_features}, {self.out_features}, {self.meta.recipe.fwd_format}/"
                f"{self.meta.recipe.bwd_format})")


@LAYER_HANDLERS.register(None, CurrentScaling)
@LAYER_HANDLERS.register(None, DelayedScaling)  # FixedScaling too: a DelayedScaling
def swap_fp8_linears(model: nn.Module, recipe: DelayedScaling | None = None, skip=()) -> ScalingGroup:
    """Swap every ``nn.Linear`` inside ``model`` for an :class:`Fp8Linear` (in place,
    sharing the parameters) and return the :class:`ScalingGroup` of their scaling states.

    ``skip`` names Linear layers to leave in the model's own format: module names as
    ``model.named_modules()`` gives them (``"0"``, ``"6"``, ``"encoder.1"``), or ``"first"`` /
    ``"last"`` for the first and last Linear in module order (unless a Linear has that name) - the layers fp8 recipes commonly
    keep in higher precision (Megatron-LM's ``--first-last-layers-bf16``; DeepSeek-V3 keeps its
    embedding and output head out of fp8).  A name that is not a Linear of ``model`` raises
    ValueError and the model is left as it was.
    """
    recipe = recipe if recipe is not None else DelayedScaling()
    if not isinstance(recipe, DelayedScaling):
        raise TypeError(f"recipe must be an fp8.DelayedScaling, got {type(recipe).__name__}")
    states: dict[str, ScalingState] = {}
    for parent, cname, name in linears_to_swap(model, skip, "convert"):
        layer = Fp8Linear(getattr(parent, cname), recipe, name)
        setattr(parent, cname, layer)
        for s in layer.meta.states():
            states[s.name] = s
    return ScalingGroup(recipe, states)
