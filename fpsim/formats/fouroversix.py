"""NVFP4's Four Over Six scale rule (arXiv 2512.02010; NVIDIA/TransformerEngine#3068), on blocked
float32 arrays as :mod:`fpsim.formats.block_scales` works: each block's scale maps its amax to 6
(TE's rule) or to 4, whichever quantizes the block with the smaller error.  ``fpsim.quantize(x,
"nvfp4", scale_rounding="four_over_six")`` (alias ``"4/6"``) runs it.
"""

from __future__ import annotations

import numpy as np

from .block_scales import nvfp4_scales
from .kernels import fp8_to_f32, narrow_cast
from .table import Format

__all__ = ["NVFP4_SCALE_RULES", "nvfp4_four_over_six", "FOUR_OVER_SIX_SCALE_MAX"]

NVFP4_SCALE_RULES = ("six", "four_over_six")  # NVFP4: amax to 6 (TE), or to 6 or 4 per block
FOUR_OVER_SIX_SCALE_MAX = 256.0  # the tensor scale's e4m3 target: 256 * 6 / 4 = 384 stays below 448


def nvfp4_four_over_six(xb: np.ndarray, amax: np.ndarray, s_enc: np.float32, expand, axes, elem: Format):
    """Four Over Six (arXiv 2512.02010): each block's scale maps its amax to 6 (as
    :func:`nvfp4_scales`) or to 4, whichever quantizes the block - nearest even, saturating, in
    float32 - with the smaller sum of squared errors (in float64, added in the block's element
    order, so that no library's summation order picks the scale; a tie keeps 6).
    ``s_enc`` should come from ``block_scales.nvfp4_tensor_scale(amax, 256)``, so that the
    map-to-4 scale, 1.5 times the other, stays below e4m3's 448.  ``expand`` broadcasts a per-block array against ``xb``,
    ``axes`` are the block axes.  Returns :func:`nvfp4_scales`' three arrays, chosen per block,
    and a boolean per block: True where 4 was chosen."""
    cands = [nvfp4_scales(amax, s_enc, top) for top in (6.0, 4.0)]
    errs = []
    with np.errstate(invalid="ignore", over="ignore"):
        for _, enc, dec in cands:
            q = fp8_to_f32(narrow_cast(xb * expand(enc), elem, saturate=True)) * expand(dec)
            errs.append(_sum_in_order((q.astype(np.float64) - xb) ** 2, axes))
    four = errs[1] < errs[0]
    return (*(np.where(four, c4, c6).astype(c6.dtype) for c6, c4 in zip(*cands)), four)


def _sum_in_order(a: np.ndarray, axes) -> np.ndarray:
    """The float64 sum over ``axes``, one element after the other in C order (``np.cumsum`` adds
    sequentially by definition): the same bits whatever numpy's reduction loops do."""
    axes = (axes,) if np.isscalar(axes) else tuple(axes)
    axes = tuple(x % a.ndim for x in axes)
    moved = np.moveaxis(a, axes, tuple(range(a.ndim - len(axes), a.ndim)))
    flat = moved.reshape(moved.shape[: a.ndim - len(axes)] + (-1,))
    if flat.shape[-1] == 0:
        return np.zeros(flat.shape[:-1])
    return np.cumsum(flat, axis=-1)[..., -1]
