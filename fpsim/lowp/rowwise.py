"""Row-wise fp8 scaling (torchao's ``Float8LinearConfig`` / ``Float8DynamicActivationFloat8WeightConfig``
with ``granularity=PerRow()``): every row of a GEMM operand along that GEMM's reduction axis K gets
its own float32 scale ``fmt.max / max(amax_row, amax_floor)``, taken from the row itself (current
scaling); the operand times its scales is rounded with saturation into e4m3 (forward) or e5m2
(gradients), and the GEMM's float32 result is multiplied by the two operands' inverse scales.

With Y = X W^T (X: tokens x in, W: out x in), as for block scaling each GEMM scales its operands
along its own K: forward X per token and W per output row (along in-features); dgrad dY per
token and W per input column (along out-features); wgrad dY per output column and X per input
column (along the tokens).  The bias gradient is summed in float32 from the unquantized dY.

The floor matters for a row that is all zeros - a zero-initialised LoRA adapter's weight, a
padding token's activations, a dead unit's gradient: its amax is 0, ``fmt.max / 0`` is inf, and
``0 * inf`` is NaN, so the whole GEMM output goes NaN (pytorch/ao#3356: NaN losses from the first
step of LoRA + fp8 row-wise training).  ``amax_floor`` (default 1e-12, torchao's ``EPS``) keeps
the scale finite; ``amax_floor=0`` reproduces the bug.  Each scale computation is one rounding the
hooks see (op ``fp8.rowwise.scale``, its input the row amax), so ``fpsim.trace_nonfinite`` names
it as the origin of the inf; each cast is op ``fp8.rowwise.cast``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import nn
from ..checks import is_real
from ..formats import F32, FP8_FORMATS, get_format
from ..ops.arith import tensor_core_gemm
from ..tensor import Tensor, make_node, promote, round_result
from .handlers import LAYER_HANDLERS
from .swap import check_linear_args, linears_to_swap, share_linear

__all__ = ["RowwiseScaling", "RowwiseLinear", "rowwise_linear", "rowwise_quantize", "swap_rowwise_linears",
           "AMAX_FLOOR"]

AMAX_FLOOR = 1e-12  # torchao.float8.float8_utils.EPS: the amax clamp before fmt.max / amax


@dataclass(frozen=True)
class RowwiseScaling:
    """The recipe of a :class:`RowwiseLinear`: ``fwd_format`` for X and W, ``bwd_format`` for dY
    (fp8 formats; torchao's defaults e4m3fn and e5m2), and ``amax_floor``, the lower bound on each
    row's amax before the scale ``fmt.max / amax`` is taken (a finite number >= 0; 0 lets an
    all-zero row make an infinite scale and NaN, as pytorch/ao#3356 reported)."""

    fwd_format: str = "float8_e4m3fn"
    bwd_format: str = "float8_e5m2"
    amax_floor: float = AMAX_FLOOR

    def __post_init__(self):
        for which in ("fwd_format", "bwd_format"):
            name = get_format(getattr(self, which)).name  # an unknown name raises, listing the valid ones
            if name not in FP8_FORMATS:
                raise ValueError(f"RowwiseScaling: {which} must be an fp8 format ({', '.join(FP8_FORMATS)}), "
                                 f"got {name}")
            object.__setattr__(self, which, name)
        f = self.amax_floor
        if not (is_real(f) and math.isfinite(f) and f >= 0):
            raise ValueError(f"RowwiseScaling: amax_floor must be a finite number >= 0, got {f!r}")
        object.__setattr__(self, "amax_floor", float(f))

    def __str__(self) -> str:
        return (f"row-wise current scaling: {self.fwd_format} forward, {self.bwd_format} gradients, amax floor "
                f"{self.amax_floor:g}")


@np.errstate(divide="ignore", over="ignore", invalid="ignore")  # an inf scale and 0 * inf are results here
def rowwise_quantize(x32, axis: int, fmt, amax_floor: float, be, direction: str = "forward", target: str = ""):
    """Cast ``x32`` to fp8 with one scale per slice along ``axis`` (row-wise, not per-tensor), as float32 values.

    ``x32`` (float32, 2-D) scaled along ``axis`` (each slice along it one "row" with its own
    scale) and rounded with saturation into ``fmt``.  Returns (the fp8 values widened to float32,
    the inverse scales, shaped to broadcast against ``x32``).  The scale is
    ``float32(fmt.max) / max(amax, float32(amax_floor))``, one float32 division, seen by the hooks
    as op ``fp8.rowwise.scale``; the cast as op ``fp8.rowwise.cast``."""
    f = get_format(fmt)
    xp = be.xp
    amax = xp.abs(x32).max(axis=axis, keepdims=True)  # exact: a max
    scale32 = xp.float32(f.max) / xp.maximum(amax, xp.float32(amax_floor))
    scale = be.to_f32(round_result(scale32, F32, be, "fp8.rowwise.scale", direction, target, inputs=(amax,)))
    codes = round_result(x32 * scale, f, be, "fp8.rowwise.cast", direction, target, saturate=True, inputs=(x32,))
    return be.to_f32(codes), xp.float32(1) / scale


def rowwise_linear(x: Tensor, weight: Tensor, bias: Tensor | None, config: RowwiseScaling) -> Tensor:
    """``x @ weight.T + bias`` with every GEMM operand scaled row-wise along its own K into fp8
    (module docstring): the products exact, their sums rounded once to float32, times the two
    inverse scales (each a float32 multiplication), the bias added in float32, one rounding into
    ``promote(x.fmt, weight.fmt[, bias.fmt])``."""
    check_linear_args("rowwise_linear", x, weight, bias)
    be = x.backend
    ins = (x, weight) if bias is None else (x, weight, bias)
    fmt = promote(*(t.fmt for t in ins))
    f_fwd, f_bwd = get_format(config.fwd_format), get_format(config.bwd_format)
    lead = x.shape[:-1]
    x2 = x.f32().reshape(-1, x.shape[-1])
    w32 = weight.f32()
    floor = config.amax_floor
    x8, ix = rowwise_quantize(x2, 1, f_fwd, floor, be, target="input")
    w8, iw = rowwise_quantize(w32, 1, f_fwd, floor, be, target="weight")
    with np.errstate(over="ignore", invalid="ignore"):
        out32 = tensor_core_gemm(x8, w8.T, f_fwd, f_fwd, be, None, "fp8.rowwise.linear", "forward") * ix * iw.T
        if bias is not None:
            out32 = out32 + bias.f32()

    def backward(g, out):
        g2 = g.reshape(-1, g.shape[-1])
        gx = None
        if x.requires_grad:  # dX = dY W: K is out-features - dY per token, W per input column
            g8, ig = rowwise_quantize(g2, 1, f_bwd, floor, be, "backward", "grad_output")
            wc8, iwc = rowwise_quantize(w32, 0, f_fwd, floor, be, "backward", "weight")
            with np.errstate(over="ignore", invalid="ignore"):
                gx = (tensor_core_gemm(g8, wc8, f_bwd, f_fwd, be, None, "fp8.rowwise.linear", "backward")
                      * ig * iwc).reshape(*lead, -1)
        # dW = dY^T X: K is the tokens - dY per output column, X per input column
        gc8, igc = rowwise_quantize(g2, 0, f_bwd, floor, be, "backward", "grad_output")
        xc8, ixc = rowwise_quantize(x2, 0, f_fwd, floor, be, "backward", "input")
        with np.errstate(over="ignore", invalid="ignore"):
            gw = tensor_core_gemm(gc8.T, xc8, f_bwd, f_fwd, be, None, "fp8.rowwise.linear", "backward") * igc.T * ixc
        gb = be.sum(g2, 0) if bias is not None else None
        return (gx, gw) if bias is None else (gx, gw, gb)

    return make_node(out32.reshape(*lead, -1), fmt, ins, backward, "fp8.rowwise.linear")


class RowwiseLinear(nn.Module):
    """An ``nn.Linear`` whose GEMMs run on row-wise scaled fp8 operands (:func:`rowwise_linear`);
    it shares the weight and bias tensors of the layer it was made from."""

    def __init__(self, layer: nn.Linear, config: RowwiseScaling | None = None):
        super().__init__()
        share_linear(self, layer, "RowwiseLinear")
        object.__setattr__(self, "config", config if config is not None else RowwiseScaling())

    def forward(self, x: Tensor) -> Tensor:
        return rowwise_linear(x, self.weight, self.bias, self.config)

    def __repr__(self) -> str:
        c = self.config
        return (f"RowwiseLinear({self.in_features}, {self.out_features}, {c.fwd_format}/{c.bwd_format}, "
                f"amax_floor={c.amax_floor:g})")


@LAYER_HANDLERS.register(None, RowwiseScaling)
def swap_rowwise_linears(model: nn.Module, config: RowwiseScaling | None = None, skip=()) -> list:
    """Swap every ``nn.Linear`` inside ``model`` for a :class:`RowwiseLinear` (in place, sharing the
    parameters; ``skip`` as :func:`fpsim.lowp.convert` takes it) and return the names swapped
    (row-wise current scaling keeps no state from step to step)."""
    config = config if config is not None else RowwiseScaling()
    names = []
    for parent, cname, name in linears_to_swap(model, skip, "convert"):
        setattr(parent, cname, RowwiseLinear(getattr(parent, cname), config))
        names.append(name)
    return names
