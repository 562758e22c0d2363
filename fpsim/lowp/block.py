"""Block-scaled training: a Linear whose three GEMMs run on block-scaled operands (MXFP8 / MXFP6 /
MXFP4, NVFP4, DeepSeek-V3's fp8 blocks), and :func:`swap_block_linears`, which swaps it into a model.

With Y = X W^T (X: tokens x in, W: out x in), each GEMM quantizes both of its operands along its
own reduction axis K, because block-scaled hardware applies one scale per block to a partial
sum along K (pytorch/ao#1501; the MX paper, Rouhani et al. 2023, figure of the forward and
backward passes):

- forward ``Y  = X W^T``:  X and W in blocks along in-features;
- dgrad   ``dX = dY W``:   dY and W in blocks along out-features (W column-wise);
- wgrad   ``dW = dY^T X``: dY and X in blocks along the token axis.

``reuse_forward_blocks=True`` reproduces the mistake that issue reported: dY quantized once,
along out-features, and the forward's row-wise X and W reused in the backward GEMMs.  2-D weight
tiles (NVFP4's 16x16, DeepSeek-V3's 128x128) are the same along either axis, so one quantized W
serves the forward and dgrad GEMMs.

Each operand is quantized, then dequantized to float32 (exact for MX's power-of-two scales);
each GEMM is the exact sum of the exact products rounded once to float32
(:func:`fpsim.numerics.matmul_f32`, told the operands' grid where the scales are powers of two:
``blockfast.fake_quantize_on_grid``), or, with ``accumulate``, accumulated in a narrower format promoted into a float32 sum every ``promote_every``
elements along K (DeepSeek-V3, section 3.3.2: the H800's fp8 GEMMs keep about 14 bits, and
promotion every N_c = 128 restores the accuracy).  The 4-bit recipes' gradient options:
stochastic rounding of dY (NVIDIA's NVFP4 recipe, arXiv 2509.25149; Tseng et al. 2025, arXiv
2502.20586, for MXFP4), and a random Hadamard transform of size 16 applied to both wgrad operands
along the token axis before they are quantized (H is orthogonal with entries +-1/4, so it
cancels exactly in dY^T H^T H X).  The bias gradient is summed in float32 from the unquantized dY.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass, replace

import numpy as np

from .. import nn, state, tensorcore
from ..backend import get_backend
from ..checks import is_integer
from ..formats import SCALE_ROUNDINGS, Format, get_block_format, get_format, quantize
from ..formats.blockfast import fake_quantize_on_grid
from ..numerics import compiled, matmul_f32
from ..tensor import Tensor, make_node, promote, round_result
from ..tensorcore import instruction
from .handlers import LAYER_HANDLERS
from .swap import check_linear_args, linears_to_swap, share_linear

__all__ = ["BlockScaling", "BlockLinear", "block_linear", "swap_block_linears", "hadamard_matrix", "hadamard_transform",
           "accumulator_format"]

_HOST = get_backend("numpy")  # the GEMMs run on host arrays: their accumulators are rounded there


@dataclass(frozen=True)
class BlockScaling:
    """How a :class:`BlockLinear` quantizes its GEMM operands (a recipe; every field is checked).

    ``format`` for X and W, ``grad_format`` for dY (default: ``format``); ``block`` the 1-D block
    length (default: the format's); ``weight_block`` None for 1-D blocks of W along each GEMM's K,
    or a pair for 2-D tiles; ``scale_rounding`` (MX), ``pow2_scales`` (fp8_block) as in
    :func:`fpsim.quantize`; ``four_over_six`` NVFP4's scales by Four Over Six (arXiv 2512.02010:
    each block's amax to 6 or to 4, whichever errs less; quantize's ``scale_rounding=
    "four_over_six"``); ``grad_rounding`` ``"nearest"`` or ``"stochastic"`` for dY;
    ``hadamard`` the size-16 random Hadamard transform on the wgrad operands (signs drawn from
    ``hadamard_seed``); ``reuse_forward_blocks`` the pytorch/ao#1501 mistake; ``accumulate``
    None (float32), a format name, or an int number of mantissa bits (float32's exponent range)
    for the GEMM accumulator, promoted to float32 every ``promote_every`` elements along K
    (None: never).  ``tensor_core``: an architecture name (fp8_block formats only) - each GEMM
    multiplies the fp8 elements as that tensor core does (:mod:`fpsim.tensorcore`), one chain per
    block along K, and promotes at every block: the chain's float32 result times the two blocks'
    decode scales, added into a float32 total (DeepSeek-V3's N_C = 128; ``promote_every`` must
    then be None or the block length).
    """

    format: str = "mxfp8_e4m3"
    grad_format: str | None = None
    block: int | None = None
    weight_block: int | tuple[int, int] | None = None
    scale_rounding: str | None = None
    four_over_six: bool = False
    pow2_scales: bool = False
    grad_rounding: str = "nearest"
    hadamard: bool = False
    hadamard_seed: int = 0
    reuse_forward_blocks: bool = False
    accumulate: str | int | None = None
    promote_every: int | None = None
    tensor_core: str | None = None

    def __post_init__(self):
        _check_recipe(self)
        _check_four_over_six(self)

    def quantize_operand(self, a32: np.ndarray, axis: int, *, grad: bool = False, block=None):
        """:func:`~fpsim.formats.blockfast.fake_quantize` of a GEMM operand with this recipe's format, block and rules.

        ``a32`` (float32, 2-D) quantized along ``axis`` (its K) in the recipe's format (dY's with
        ``grad``), returned as the float32 values it stands for - or, with ``tensor_core``, the
        pair (fp8 elements, float32 decode factor of each element)."""
        return self._quantized(a32, axis, grad, block)[0]

    def _quantized(self, a32: np.ndarray, axis: int, grad: bool = False, block=None):
        """(:meth:`quantize_operand`'s result, the grid :func:`fpsim.numerics.matmul_f32` may be
        told its values lie on, or None: ``blockfast.fake_quantize_on_grid``'s)."""
        fmt = get_block_format(self.grad_format if grad and self.grad_format else self.format)
        block = block if block is not None else self.block if self.block is not None else fmt.block
        kw = dict(block=block, scale_rounding=_scale_rule(self, fmt),
                  pow2_scales=self.pow2_scales and fmt.scale_rule.pow2_scales,
                  rounding=self.grad_rounding if grad else "nearest")
        if self.tensor_core is None:
            return fake_quantize_on_grid(a32, fmt, axis, **kw)  # quantize(...).dequantize(), bit for bit
        q = quantize(a32, fmt, axis, **kw)
        return (q.elements, replace(q, elements=np.ones_like(q.elements)).dequantize()), None

    def q(self, a32: np.ndarray, axis: int, *, grad: bool = False, block=None):
        """Deprecated (removed 2027-06-01): :meth:`quantize_operand`."""
        warnings.warn("BlockScaling.q is deprecated (removed 2027-06-01): use BlockScaling.quantize_operand",
                      DeprecationWarning, stacklevel=2)
        return self.quantize_operand(a32, axis, grad=grad, block=block)

    def k_block(self) -> int:
        """The block length along each GEMM's K."""
        return self.block if self.block is not None else get_block_format(self.format).block


def _scale_rule(r: BlockScaling, fmt) -> str | None:
    """The ``scale_rounding`` :func:`fpsim.quantize` gets for a format of recipe ``r``: Four Over Six
    where the format's scale rule has it and the recipe asks, else the recipe's ``scale_rounding``
    where the rule takes it (the MX formats), else the rule's default."""
    rule = fmt.scale_rule
    if rule.four_over_six:
        return "four_over_six" if r.four_over_six else None
    return r.scale_rounding if r.scale_rounding in rule.roundings else None


def _check_four_over_six(r: BlockScaling) -> None:
    if not isinstance(r.four_over_six, bool):
        raise TypeError(f"four_over_six must be True or False, got {r.four_over_six!r}")
    if r.four_over_six and not any(get_block_format(f).scale_rule.four_over_six for f in (r.format, r.grad_format)
                                   if f):
        raise ValueError("four_over_six applies to nvfp4 only; no format of the recipe is nvfp4")


def _check_recipe(r: BlockScaling) -> None:
    """Every field checked at construction, each error naming the field; ``weight_block`` given
    as a list becomes a tuple.  A setting that no format of the recipe uses (``scale_rounding``
    without an MX format, ``pow2_scales`` without fp8_block) is refused, as quantize refuses it."""
    fmts = [get_block_format(r.format)] + ([get_block_format(r.grad_format)] if r.grad_format else [])
    for name in ("pow2_scales", "hadamard", "reuse_forward_blocks"):
        if not isinstance(getattr(r, name), bool | np.bool_):
            raise TypeError(f"{name} must be True or False, got {getattr(r, name)!r}")
    if r.block is not None and not (is_integer(r.block) and r.block > 0):
        raise ValueError(f"block must be a positive integer (the 1-D block length) or None, got {r.block!r}; "
                         "2-D tiles of W are weight_block=(rows, cols)")
    wb = r.weight_block
    if isinstance(wb, list | tuple) and len(wb) == 2 and all(is_integer(b) and b > 0 for b in wb):
        object.__setattr__(r, "weight_block", (int(wb[0]), int(wb[1])))
    elif wb is not None and not (is_integer(wb) and wb > 0):
        raise ValueError(f"weight_block must be a positive integer, a pair of positive integers or None, got {wb!r}")
    if r.scale_rounding is not None:
        if r.scale_rounding not in SCALE_ROUNDINGS:
            raise ValueError(f"unknown scale_rounding {r.scale_rounding!r}; known: {', '.join(SCALE_ROUNDINGS)}")
        if not any(r.scale_rounding in f.scale_rule.roundings for f in fmts):
            raise ValueError(f"scale_rounding applies to the MX formats only; {', '.join(f.name for f in fmts)} "
                             "has its own scale rule")
    if r.pow2_scales and not any(f.scale_rule.pow2_scales for f in fmts):
        raise ValueError(f"pow2_scales applies to fp8_block only, not {', '.join(f.name for f in fmts)}")
    if r.grad_rounding not in ("nearest", "stochastic"):
        raise ValueError(f"grad_rounding must be 'nearest' or 'stochastic', got {r.grad_rounding!r}")
    if not is_integer(r.hadamard_seed) or r.hadamard_seed < 0:
        raise ValueError(f"hadamard_seed must be an integer >= 0, got {r.hadamard_seed!r}")
    if r.hadamard and r.reuse_forward_blocks:
        raise ValueError("hadamard transforms the wgrad operands, which reuse_forward_blocks does not quantize anew")
    if r.promote_every is not None and not (is_integer(r.promote_every) and r.promote_every >= 1):
        raise ValueError(f"promote_every must be a positive integer or None, got {r.promote_every!r}")
    if r.promote_every is not None and r.accumulate is None and r.tensor_core is None:
        raise ValueError("promote_every needs a narrow accumulate format (float32 needs no promotion)")
    if is_integer(r.accumulate):
        if not 1 <= r.accumulate <= 23:
            raise ValueError(f"accumulate as mantissa bits must be in 1..23, got {r.accumulate}")
    elif r.accumulate is not None:
        try:
            get_format(r.accumulate)
        except ValueError as e:
            raise ValueError(f"accumulate: {e}") from None
    if r.tensor_core is not None:
        _check_tensor_core(r, fmts)


def _check_tensor_core(r: BlockScaling, fmts) -> None:
    for f in fmts:
        if not f.scale_rule.tensor_core:
            raise ValueError(f"tensor_core runs fp8_block formats (DeepSeek-V3's blocks), not {f.name}")
        instruction(r.tensor_core, f.element.name, f.element.name)  # an architecture without fp8 raises
    if r.accumulate is not None:
        raise ValueError("tensor_core is the accumulator: accumulate must be None")
    wk = r.weight_block if isinstance(r.weight_block, int) or r.weight_block is None else r.weight_block[1]
    if r.promote_every not in (None, r.k_block()) or wk not in (None, r.k_block()):
        raise ValueError(f"with tensor_core the partial sums are promoted at every block along K: promote_every "
                         f"and the weight blocks' K must be None or {r.k_block()}, got {r.promote_every!r}, "
                         f"{r.weight_block!r}")


# --------------------------------------------------------------------------------------------
# the random Hadamard transform

RHT_SIZE = 16


def hadamard_matrix(seed: int = 0, size: int = RHT_SIZE) -> np.ndarray:
    """D H / sqrt(size) as float32: H the Sylvester Hadamard matrix (entries +-1), D a diagonal of
    random signs drawn from ``seed``.  Entries are +-1/4 for size 16, exact in float32, and the
    matrix is orthogonal: its transpose times itself is the identity, exactly."""
    return _hadamard(seed, size).copy()


@functools.lru_cache(maxsize=64)
def _hadamard(seed: int, size: int) -> np.ndarray:
    """:func:`hadamard_matrix`, made once per (seed, size) for the backward passes (read-only)."""
    h = np.ones((1, 1))
    while h.shape[0] < size:
        h = np.block([[h, h], [h, -h]])
    signs = np.random.default_rng(seed).choice([-1.0, 1.0], size)
    out = (signs[:, None] * h / np.sqrt(size)).astype(np.float32)
    out.setflags(write=False)
    return out


def hadamard_transform(a32: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Apply ``h`` (size x size) to every group of ``size`` consecutive rows of ``a32`` (the token
    axis), zero-padding the last group: float32 in and out, each output the exact sum of
    +-a/sqrt(size) rounded once to float32 (:func:`fpsim.numerics.matmul_f32`; h's entries are
    one power of two in magnitude, so every float64 sum whose magnitudes span under
    2**(29 - log2 size) is exact and needs no check).  Where the compiled path runs and ``h`` is a
    signed Hadamard matrix (:func:`hadamard_matrix`, or its transpose), one compiled pass (the
    fast Walsh-Hadamard transform in float64, exact where its quanta prove it) gives the same
    bits, the few sums it cannot prove exact summed exactly by ``matmul_f32``."""
    n = h.shape[0]
    t, c = a32.shape
    pad = -t % n
    a32 = (np.pad(a32, [(0, pad), (0, 0)]) if pad else np.ascontiguousarray(a32)).reshape(-1, n, c)
    fast = compiled.rounding("block_hadamard", a32, np.float32)
    form = _signed_hadamard(h) if fast is not None else None
    if form is None:
        return matmul_f32(h, a32).reshape(t + pad, c)
    out, left = fast(a32, *form)
    if left.any():
        g, j = np.nonzero(left)
        out[g, :, j] = matmul_f32(h, np.ascontiguousarray(a32[g, :, j].T)).T
    return out.reshape(t + pad, c)


@functools.lru_cache(maxsize=16)
def _sylvester(n: int) -> np.ndarray:
    h = np.ones((1, 1))
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    h.setflags(write=False)
    return h


def _signed_hadamard(h) -> tuple[np.ndarray, np.ndarray] | None:
    """(column signs s, row factors c r) where float32 ``h`` is exactly c diag(r) H diag(s) - H the
    Sylvester Hadamard matrix of h's size (a power of two), r and s signs, c a power of two - else
    None."""
    n = h.shape[0] if getattr(h, "ndim", 0) == 2 else 0
    if h.dtype != np.float32 or h.shape != (n, n) or n < 2 or n & (n - 1):
        return None
    c = abs(float(h[0, 0]))
    if not (math.isfinite(c) and c > 0 and math.frexp(c)[0] == 0.5):
        return None
    r = np.where(h[:, 0] < 0, -1.0, 1.0)
    s = np.where(h[0] < 0, -1.0, 1.0) * r[0]
    if not np.array_equal(h, (c * r[:, None] * _sylvester(n) * s).astype(np.float32)):
        return None
    return s, c * r


# --------------------------------------------------------------------------------------------
# the GEMM and its accumulator


def gemm(a: np.ndarray, b: np.ndarray, accumulate=None, promote_every: int | None = None, *,
         direction: str = "forward", grids=(None, None)) -> np.ndarray:
    """float32 ``a @ b``: exact products, their exact sum rounded once to float32
    (:func:`fpsim.numerics.matmul_f32`, told ``grids``: what is known of a's and b's values - only
    its speed depends on them), or accumulated in
    ``accumulate`` (a format name, or mantissa bits with float32's range: :func:`accumulator_format`)
    one product at a time along K, the partial sum added into a float32 total every ``promote_every``
    products.  Each partial sum is rounded into the accumulator by :func:`fpsim.tensor.round_result`
    (op ``block.linear``, target ``accumulator``, ``direction`` as the hooks are told), as the ops'
    ``acc=`` accumulators are: the monitor counts what it flushes and overflows, NaN stays NaN, and
    inside ``fpsim.rounding_mode`` it rounds in the engine's mode."""
    if accumulate is None:
        return matmul_f32(a, b, *grids)
    fmt = accumulator_format(accumulate)
    k = a.shape[1]
    total = np.zeros((a.shape[0], b.shape[1]), np.float32)
    part = np.zeros_like(total)
    every = promote_every or k
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(k):
            part = _HOST.to_f32(round_result(part + a[:, i : i + 1] * b[i : i + 1, :], fmt, _HOST, "block.linear",
                                             direction, "accumulator"))
            if (i + 1) % every == 0 or i == k - 1:
                total += part
                part = np.zeros_like(total)  # a new array: the hooks may keep the stored one
    return total


def gemm_tensor_core(a, b, arch: str, block: int, be=None, direction: str = "forward") -> np.ndarray:
    """``a @ b`` for block-scaled operands ``a`` = (fp8 elements (M, K), decode factors (M, K))
    and ``b`` likewise (K, N), factors constant over each ``block`` of K: per block, a chain of
    ``arch``'s fp8 tensor-core steps from zero (float32 / e8m13), then, in float32 with one
    nearest-even rounding each, the two factors multiplied, the chain's result multiplied by
    that, and the product added to the total - DeepSeek-V3's promotion (DeepGEMM's order).
    The hooks see the whole GEMM as one rounding, ``block.linear.accumulate``, against the
    float64 sum of the dequantized products."""
    (ae, af), (bq, bf) = a, b
    k = ae.shape[1]
    total = np.zeros((ae.shape[0], bq.shape[1]), np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        for k0 in range(0, k, block):
            part = tensorcore.matmul(ae[:, k0:k0 + block], bq[k0:k0 + block], arch=arch)
            total += part * (af[:, k0:k0 + 1] * bf[k0:k0 + 1, :])
    if be is not None and state.HOOKS:
        exact = matmul_f32(ae.astype(np.float64) * af, bq.astype(np.float64) * bf)
        round_result(exact, get_format("float32"), be, "block.linear.accumulate", direction,
                     stored=total, inputs=(ae, af, bq, bf))
    return total


def accumulator_format(acc) -> Format:
    """The format a narrow GEMM accumulator (``BlockScaling(accumulate=...)``) holds its partial
    sums in: a format name as :func:`fpsim.get_format` reads it, or an int ``m`` (1..23): ``m``
    mantissa bits with float32's exponent range, subnormals, inf and NaN (``e8m<m>``, held in
    float32 arrays; e8m13 is about the 14 significant bits DeepSeek-V3 reports for the H800's fp8
    GEMMs, e8m23 is float32 itself)."""
    if isinstance(acc, str | Format):
        return get_format(acc)
    if not (is_integer(acc) and 1 <= acc <= 23):
        raise ValueError(f"accumulate must be a format name or mantissa bits in 1..23, got {acc!r}")
    return _e8(int(acc))


@functools.cache
def _e8(m: int) -> Format:
    """One record per width: the monitor and promotion look formats up per op."""
    return Format(f"e8m{m}", np.dtype(np.float32), 8, m)


def _t(q):
    """The transpose of a quantized operand: of float32 values a view (``matmul_f32`` reads a
    transposed operand where it lies, faster than a copy of it), of (elements, factors) contiguous
    copies (the tensor-core chain's)."""
    if isinstance(q, tuple):
        return tuple(np.ascontiguousarray(x.T) for x in q)
    return q.T


def _gemm(r: BlockScaling, a, b, be, direction: str, grids=(None, None)) -> np.ndarray:
    if r.tensor_core is not None:
        return gemm_tensor_core(a, b, r.tensor_core, r.k_block(), be, direction)
    return gemm(a, b, r.accumulate, r.promote_every, direction=direction, grids=grids)


# --------------------------------------------------------------------------------------------
# the op


def block_linear(x: Tensor, weight: Tensor, bias: Tensor | None, recipe: BlockScaling) -> Tensor:
    """``x @ weight.T + bias`` with each GEMM on block-scaled operands (see the module docstring).

    In: Tensors of any format (their float32 values are quantized).  Out: rounded once into
    ``promote(x.fmt, weight.fmt[, bias.fmt])``.  Gradients come back as float32.
    """
    check_linear_args("block_linear", x, weight, bias)
    be, r = x.backend, recipe
    ins = (x, weight) if bias is None else (x, weight, bias)
    fmt = promote(*(t.fmt for t in ins))
    x32 = be.to_numpy(x.f32()).reshape(-1, x.shape[-1]).astype(np.float32, copy=False)
    w32 = be.to_numpy(weight.f32()).astype(np.float32, copy=False)
    tiled = isinstance(r.weight_block, tuple)
    xq, x_grid = r._quantized(x32, -1)
    wq, w_grid = r._quantized(w32, -1, block=r.weight_block)
    out32 = _gemm(r, xq, _t(wq), be, "forward", (x_grid, w_grid))
    if bias is not None:
        out32 += be.to_numpy(bias.f32())
    out32 = be.asarray(out32.reshape(*x.shape[:-1], weight.shape[0]))

    def backward(g, out):
        g2 = be.to_numpy(g).reshape(-1, g.shape[-1]).astype(np.float32, copy=False)
        gq, g_grid = r._quantized(g2, -1, grad=True)  # along out-features: dgrad's K
        if tiled or r.reuse_forward_blocks:
            wq_d, wd_grid = wq, w_grid
        else:
            wq_d, wd_grid = r._quantized(w32, 0, block=r.weight_block)  # column-wise
        gx = None
        if x.requires_grad:
            gx = be.asarray(_gemm(r, gq, wq_d, be, "backward", (g_grid, wd_grid)).reshape(x.shape))
        if r.reuse_forward_blocks:
            (g_w, gw_grid), (x_w, xw_grid) = (gq, g_grid), (xq, x_grid)
        else:
            g_in, x_in = g2, x32
            if r.hadamard:
                h = _hadamard(r.hadamard_seed, RHT_SIZE)
                g_in, x_in = hadamard_transform(g2, h), hadamard_transform(x32, h)
            g_w, gw_grid = r._quantized(g_in, 0, grad=True)  # along tokens: wgrad's K
            x_w, xw_grid = r._quantized(x_in, 0)
        gw = be.asarray(_gemm(r, _t(g_w), x_w, be, "backward", (gw_grid, xw_grid)))
        gb = be.asarray(be.sum(g2, 0)) if bias is not None else None
        return (gx, gw) if bias is None else (gx, gw, gb)

    return make_node(out32, fmt, ins, backward, "block.linear", inputs=())


class BlockLinear(nn.Module):
    """An ``nn.Linear`` whose GEMMs run block-scaled.  It shares the weight and bias tensors of the
    layer it was made from (the float32 master weights), so an optimizer holding them keeps working."""

    def __init__(self, layer: nn.Linear, recipe: BlockScaling | None = None):
        super().__init__()
        recipe = recipe if recipe is not None else BlockScaling()
        if not isinstance(recipe, BlockScaling):
            raise TypeError(f"recipe must be a BlockScaling, got {type(recipe).__name__}")
        share_linear(self, layer, "BlockLinear")
        object.__setattr__(self, "recipe", recipe)

    def forward(self, x: Tensor) -> Tensor:
        return block_linear(x, self.weight, self.bias, self.recipe)

    def __repr__(self) -> str:
        r = self.recipe
        grad = f"/{r.grad_format}" if r.grad_format else ""
        return f"BlockLinear({self.in_features}, {self.out_features}, {r.format}{grad})"


@LAYER_HANDLERS.register(None, BlockScaling)
def swap_block_linears(model: nn.Module, recipe: BlockScaling | None = None, skip=()) -> list[str]:
    """Swap every ``nn.Linear`` inside ``model`` for a :class:`BlockLinear` (in place, sharing the
    parameters) and return the names of the layers swapped.

    ``skip`` as in :func:`fpsim.lowp.convert` (which calls this for a BlockScaling): module names, or ``"first"`` / ``"last"`` for the first
    and last Linear in module order - the layers NVIDIA's NVFP4 recipe and DeepSeek-V3 keep in
    higher precision.  A name that is not a Linear of ``model`` raises ValueError and the model
    is left as it was.
    """
    recipe = recipe if recipe is not None else BlockScaling()
    if not isinstance(recipe, BlockScaling):
        raise TypeError(f"recipe must be a BlockScaling, got {type(recipe).__name__}")
    done = []
    for parent, cname, name in linears_to_swap(model, skip, "convert"):
        setattr(parent, cname, BlockLinear(getattr(parent, cname), recipe))
        done.append(name)
    return done
