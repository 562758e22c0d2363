"""Scaled dot-product attention, written as the composite a model runs in eager mode:
``softmax(mask(q @ k^T * scale)) @ v``.

It is a composite on purpose.  Each step is an ordinary op that rounds its result into the
format it runs in, so in float16 the scores ``q @ k^T`` are rounded into float16 BEFORE the
scale and the softmax see them: a product past 65,504 is inf already, and the softmax of a row
holding inf is NaN (what PyTorch #60939 reports).  A fused kernel (flash attention, PyTorch's
CPU SDPA) keeps the scores in float32 and never shows this - so the composite is the honest
model of where float16 overflows, and the one the lab needs.  The scale is applied after the
product, as the formula is written and as GPT-2's eager attention does (PyTorch's math path
scales q and k by sqrt(scale) each before the product instead, which delays the overflow).

Under autocast the two products are on the low list (float16) and the softmax on the float32
list, exactly as for the ops called one by one.

Masks.  ``attn_mask`` is boolean, True where a query may attend to a key (PyTorch's
convention), broadcastable to the scores' shape (..., Tq, Tk); ``is_causal`` allows key j for
query i when j <= i (top-left aligned, as PyTorch).  Both may be given; they combine.

- Default (``mask_value=None``): masked scores are set to -inf (``masked_fill``) before a
  stable softmax; a row with no key allowed gives zeros, as PyTorch's SDPA (not NaN).
- ``mask_value=v`` (e.g. ``float(np.finfo(np.float16).min)``): the additive masks many models
  build - each mask becomes a tensor of 0 / v in the scores' format, the masks are added to
  each other and then to the scores, all in that format.  In float16, v + v and a negative
  score + v round to -inf; a row that is all -inf gives NaN (transformers #17306).
"""

from __future__ import annotations

import math

import numpy as np

from ..tensor import Tensor, tensor
from .arith import add, matmul, mul
from .core import _op
from .elementwise import masked_fill
from .shape import transpose
from .softmax import softmax

__all__ = ["scaled_dot_product_attention", "causal_mask"]


def causal_mask(tq: int, tk: int | None = None) -> np.ndarray:
    """Boolean (tq, tk): True where key j <= query i (``tril`` of ones, PyTorch's ``is_causal``)."""
    tk = tq if tk is None else tk
    return np.tril(np.ones((tq, tk), dtype=bool))


def _check_shapes(q, k, v, attn_mask) -> tuple:
    """The scores' shape (..., Tq, Tk), or a ValueError naming every shape involved."""
    shapes = f"q {getattr(q, 'shape', None)}, k {getattr(k, 'shape', None)}, v {getattr(v, 'shape', None)}"
    if not all(isinstance(t, Tensor) for t in (q, k, v)):
        raise TypeError(f"scaled_dot_product_attention: q, k and v must be Tensors ({shapes})")
    if min(q.ndim, k.ndim, v.ndim) < 2 or q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(f"scaled_dot_product_attention: {shapes} do not fit (need (..., Tq, d), (..., Tk, d), "
                         "(..., Tk, dv))")
    try:
        batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ValueError:
        raise ValueError(f"scaled_dot_product_attention: the batch dimensions of {shapes} do not broadcast") from None
    scores = tuple(batch) + (q.shape[-2], k.shape[-2])
    if attn_mask is not None:
        m = np.asarray(attn_mask)
        if m.dtype != bool:
            raise TypeError(f"scaled_dot_product_attention: attn_mask must be boolean (True = attend), got dtype "
                            f"{m.dtype}")
        try:
            ok = tuple(np.broadcast_shapes(m.shape, scores)) == scores
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"scaled_dot_product_attention: attn_mask shape {m.shape} does not broadcast to the "
                             f"scores' shape {scores} ({shapes})")
    return scores


def _masks(attn_mask, is_causal: bool, tq: int, tk: int) -> list:
    """The boolean masks in play (True = attend), as numpy arrays."""
    out = []
    if is_causal:
        out.append(causal_mask(tq, tk))
    if attn_mask is not None:
        out.append(np.asarray(attn_mask))
    return out


@_op("q", "k", "v")
def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, attn_mask=None, *, is_causal: bool = False,
                                 scale: float | None = None, mask_value: float | None = None,
                                 stable: bool = True) -> Tensor:
    """``softmax(mask(q @ k^T * scale)) @ v`` as a composite of matmul, mul, masking, softmax
    and matmul, each rounding once into the format it runs in (module docstring).

    q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv) -> (..., Tq, dv).  ``scale`` defaults to
    1/sqrt(d); ``scale=1.0`` leaves the scores unscaled.  ``attn_mask`` / ``is_causal`` /
    ``mask_value``: see the module docstring.  ``stable=False`` uses the naive softmax
    (``softmax(stable=False)``: exp without subtracting the row maximum).  Shapes that do not fit
    raise ValueError naming them, before anything is computed.
    """
    scores_shape = _check_shapes(q, k, v, attn_mask)
    masks = _masks(attn_mask, is_causal, scores_shape[-2], scores_shape[-1])
    if mask_value is not None and not masks:
        raise ValueError("scaled_dot_product_attention: mask_value given but no mask (attn_mask or is_causal)")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    s = matmul(q, transpose(k, tuple(range(k.ndim - 2)) + (k.ndim - 1, k.ndim - 2)))
    if scale != 1.0:
        s = mul(s, scale)
    be = s.backend
    if mask_value is not None:
        bias = None
        for m in masks:
            b = tensor(np.where(m, 0.0, float(mask_value)), s.fmt, backend=be)  # mask_value rounded into s's format
            bias = b if bias is None else add(bias, b)
        p = softmax(add(s, bias), axis=-1, stable=stable)
    elif masks:
        allowed = masks[0]
        for m in masks[1:]:
            allowed = allowed & m
        p = softmax(masked_fill(s, be.asarray(~allowed), -math.inf), axis=-1, stable=stable)
        empty = ~allowed.any(axis=-1, keepdims=True)
        if empty.any():  # a row with no key to attend to: zeros, as PyTorch's SDPA
            p = masked_fill(p, be.asarray(empty), 0.0)
    else:
        p = softmax(s, axis=-1, stable=stable)
    return matmul(p, v)
