"""Lab 17 (TF32): float32 matmuls on a tensor core that reads 10 fraction bits.

``torch.backends.cuda.matmul.allow_tf32 = True`` (or ``torch.set_float32_matmul_precision("high")``)
lets cuBLAS run a float32 matmul on the tensor core's TF32 instruction: each float32 operand is
read as TF32 - 1 sign, 8 exponent and 10 fraction bits, float32's range with float16's
precision - the products are exact and the sum is accumulated at the tensor core's float32-like
width (:mod:`fpsim.tensorcore`, Ampere: F = 24, rounded toward zero).  The instruction itself
reads the top 19 bits of each float32 (the low 13 are ignored: truncation toward zero, as
MMA-Sim measured); a kernel may round the operands first (PTX's ``cvt.rna.tf32.f32``: to nearest,
ties away from zero), and then the instruction's truncation changes nothing.

- :data:`TF32`: the format (``Format("tf32", float32, 8, 10)``), held in float32 arrays, so that
  :func:`fpsim.round_to` rounds into it in every mode;
- :func:`to_tf32`: float32 values onto TF32's grid, truncated (``"toward_zero"``, what the
  instruction reads) or rounded (``"nearest_away"``, ``cvt.rna``; ``"nearest"``, ties to even);
- :func:`tf32_matmul`: ``a @ b`` as the tensor core computes it from float32 operands;
- :func:`dot_errors`: the relative error of TF32 (or float32) dot products against the exact ones;
- :class:`TF32Linear`, :func:`swap_tf32_linears`: every Linear of a model with its three GEMMs
  (forward, both gradients) on the TF32 tensor core, as ``allow_tf32`` does to a PyTorch model;
- :class:`TF32Classifier`: lab 05's blob classifier with those Linears, a task of the pipeline,
  so ``fpsim.experiments.train`` runs it beside the float32 one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import nn, tensorcore
from ..checks import check_integer
from ..formats import Format
from ..lowp.swap import check_linear_args, linears_to_swap, share_linear
from ..numerics import fsum64, matmul_f32
from ..tensor import Tensor, make_node, promote
from .classifier import BlobClassifier

__all__ = ["TF32", "TF32_ROUNDINGS", "to_tf32", "tf32_matmul", "dot_errors", "tf32_linear", "TF32Linear", "swap_tf32_linears",
           "TF32Classifier"]

TF32 = Format("tf32", np.dtype(np.float32), 8, 10)
# how the operands reach the instruction: as it reads them (truncated), or rounded by a kernel first
TF32_ROUNDINGS = ("toward_zero", "nearest_away", "nearest")
_TF32_GRID = (10, 2.0**-136)  # 10 fraction bits; every TF32 value a multiple of 2^-136 (matmul_f32's speed hint)


def _check_rounding(rounding: str) -> str:
    if rounding not in TF32_ROUNDINGS:
        raise ValueError(f"rounding must be one of {', '.join(TF32_ROUNDINGS)}, got {rounding!r}")
    return rounding


def to_tf32(x, rounding: str = "toward_zero") -> np.ndarray:
    """``x`` (float32 values; other floats are rounded to float32 first) onto TF32's grid, in
    ``rounding`` (:data:`TF32_ROUNDINGS`), returned as float32.  ``toward_zero`` keeps the top 19
    bits - what the tensor core's instruction reads; ``nearest_away`` is ``cvt.rna.tf32.f32``;
    ``nearest`` ties to even.  On the bit patterns (add half of the dropped 13 bits' weight, or a
    bit less for ties to even, then clear them); the same values as :func:`fpsim.round_to` into
    :data:`TF32` (the tests hold them together): overflow to inf, -0 kept, inf and NaN as they are."""
    _check_rounding(rounding)
    x = np.asarray(x, dtype=np.float32)
    bits = x.view(np.uint32)
    with np.errstate(over="ignore"):  # only a negative NaN's bits wrap around, and NaN is put back
        if rounding == "nearest_away":
            bits = bits + np.uint32(0x1000)
        elif rounding == "nearest":
            bits = bits + (np.uint32(0xFFF) + ((bits >> np.uint32(13)) & np.uint32(1)))
    out = (bits & np.uint32(0xFFFFE000)).view(np.float32)
    special = ~np.isfinite(x)  # inf stays inf; a NaN's payload could carry past the sign
    return np.where(special, x, out) if special.any() else out


def tf32_matmul(a, b, *, arch: str | None = "ampere", rounding: str = "toward_zero") -> np.ndarray:
    """``a @ b`` of float32 arrays with TF32 operands: each rounded to TF32 in ``rounding``
    (``toward_zero`` is the instruction's own reading), the products exact, and summed as
    ``arch``'s tensor core sums them (:func:`fpsim.tensorcore.matmul`) - or, with ``arch=None``,
    exactly and rounded once to float32 (:func:`fpsim.numerics.matmul_f32`: the operand rounding
    alone, and many times faster).  Returns float32."""
    _check_rounding(rounding)
    a, b = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
    if arch is not None and rounding == "toward_zero":  # the instruction truncates them itself
        return tensorcore.matmul(a, b, arch=arch)
    a, b = to_tf32(a, rounding), to_tf32(b, rounding)
    if arch is not None:  # rounded first: the instruction's truncation then changes nothing
        return tensorcore.matmul(a, b, arch=arch)
    return matmul_f32(a, b, _TF32_GRID, _TF32_GRID)


def tf32_linear(x: Tensor, weight: Tensor, bias: Tensor | None, *, arch: str | None = None,
                rounding: str = "toward_zero") -> Tensor:
    """``x @ weight.T + bias`` with the three GEMMs on TF32 operands (:func:`tf32_matmul`, ``arch``
    and ``rounding`` as there; ``arch=None``, the default, sums exactly): the forward product,
    ``dx = g @ W`` and ``dW = g.T @ x``; the bias added and its gradient summed in float32 (the
    backend's sum).  The result is rounded once into the inputs' format."""
    check_linear_args("tf32_linear", x, weight, bias)
    be = x.backend
    ins = (x, weight) if bias is None else (x, weight, bias)
    fmt = promote(*(t.fmt for t in ins))
    x32, w32 = be.to_numpy(x.f32()), be.to_numpy(weight.f32())
    x2 = x32.reshape(-1, x32.shape[-1])
    out = tf32_matmul(x2, w32.T, arch=arch, rounding=rounding).reshape(*x32.shape[:-1], w32.shape[0])
    if bias is not None:
        out = out + be.to_numpy(bias.f32())

    def backward(g, node):
        g2 = be.to_numpy(g).reshape(-1, w32.shape[0])
        gx = be.asarray(tf32_matmul(g2, w32, arch=arch, rounding=rounding).reshape(x32.shape))
        gw = be.asarray(tf32_matmul(g2.T, x2, arch=arch, rounding=rounding))
        gb = be.sum(be.asarray(g2), axis=0) if bias is not None else None
        return (gx, gw) if bias is None else (gx, gw, gb)

    return make_node(be.asarray(out.astype(np.float32)), fmt, ins, backward, "tf32.linear")


def dot_errors(k: int, *, n: int = 64, positive: bool = False, rounding: str | None = "toward_zero",
               arch: str | None = "ampere", seed: int = 0) -> np.ndarray:
    """The relative errors (float64) of ``n`` float32 dot products of length ``k`` - inputs drawn
    from N(0, 1) (``positive``: |N(0, 1)|) in float64 and rounded to float32 - computed with TF32
    operands by :func:`tf32_matmul` (``rounding``, ``arch``), or with ``rounding=None`` as fpsim's
    float32 matmul (the exact sum rounded once), each against the exact dot product of the float32
    inputs (:func:`fpsim.numerics.fsum64` of the float64 products, which are exact)."""
    check_integer(k, "k", 1)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, n, k))
    a, b = (np.abs(x) if positive else x).astype(np.float32)
    exact = fsum64(a.astype(np.float64) * b.astype(np.float64), axis=1)
    rows, cols = a[:, None, :], b[:, :, None]  # n separate (1, k) @ (k, 1) products
    got = (matmul_f32(rows, cols) if rounding is None else tf32_matmul(rows, cols, arch=arch, rounding=rounding))
    return got[:, 0, 0].astype(np.float64) / exact - 1


class TF32Linear(nn.Module):
    """An ``nn.Linear`` whose GEMMs run on the TF32 tensor core (:func:`tf32_linear`); it holds
    the very weight and bias of the layer it wraps."""

    def __init__(self, layer: nn.Linear, *, arch: str | None = None, rounding: str = "toward_zero"):
        super().__init__()
        share_linear(self, layer, "TF32Linear")
        if arch is not None:
            tensorcore.instruction(arch, "tf32", "tf32")  # an architecture without TF32 fails here
        self.arch, self.rounding = arch, _check_rounding(rounding)

    def forward(self, x: Tensor) -> Tensor:
        return tf32_linear(x, self.weight, self.bias, arch=self.arch, rounding=self.rounding)

    def __repr__(self) -> str:
        return f"TF32Linear({self.in_features}, {self.out_features}, arch={self.arch!r}, rounding={self.rounding!r})"


def swap_tf32_linears(model: nn.Module, *, arch: str | None = None, rounding: str = "toward_zero") -> nn.Module:
    """Replace every ``nn.Linear`` in ``model`` by a :class:`TF32Linear` (in place, the parameters
    shared) - what ``allow_tf32 = True`` does to a PyTorch model's float32 matmuls. Returns ``model``."""
    for parent, cname, _ in linears_to_swap(model, (), "swap_tf32_linears"):
        setattr(parent, cname, TF32Linear(parent._modules[cname], arch=arch, rounding=rounding))
    return model


@dataclass(frozen=True)
class TF32Classifier(BlobClassifier):
    """Lab 05's blob classifier (16-64-64-4, full batch) with every Linear on the TF32 tensor
    core, its operands reaching it in ``rounding``, summed by ``arch`` (None: exactly, see
    :func:`tf32_matmul`); train it with the ``fp32`` recipe (float32 parameters, activations and
    gradients) beside :class:`BlobClassifier`."""

    arch: str | None = None
    rounding: str = "toward_zero"

    def model(self, seed: int = 0):
        return swap_tf32_linears(super().model(seed), arch=self.arch, rounding=self.rounding)
