"""Flash-style attention with the softmax probabilities cast to fp8 before the product with V,
as FP8 attention kernels (FlashAttention-3's e4m3 path) run it: the keys and values arrive in
blocks, a running row maximum ``m`` and row sum ``l`` are kept in float32 (online softmax), and
each block's ``P = exp(S - m)`` is multiplied by a static scale, rounded into e4m3 (to nearest,
saturating) and multiplied with the block of V; the output is divided by the scale and, at the
end, by ``l`` (summed from the unrounded P, as the kernels sum it before the cast).

Every step is fpsim's arithmetic, the same bits on every machine: the scores and the products
with V are exact sums rounded once to float32 (:func:`fpsim.numerics.matmul_f32`), ``exp`` is
correctly rounded (:func:`fpsim.numerics.exp_f32`), the row sums exact (:func:`fpsim.numerics.sum_f32`),
the rest single IEEE float32 operations.  ``order="reverse"`` takes the blocks last to first.

Why the order matters (arXiv 2606.06521): a sink key (a score far above the others) in the
first block sets ``m`` at once, so every later block's P is ``exp(score - sink score)``, below
e4m3's smallest subnormal for a sink ``Delta`` above about 6.93 + ln(scale) nats, and is flushed
to zero; in reverse order each block is cast at its own maximum and only the float32 rescaling
``exp(m_old - m_new)`` shrinks it afterwards, which no cast follows.
"""

from __future__ import annotations

import numpy as np

from ..checks import check_integer
from ..formats import cast, get_format
from ..numerics import exp_f32, matmul_f32, sum_f32

__all__ = ["KV_ORDERS", "online_attention", "reference_attention"]

KV_ORDERS = ("forward", "reverse")


def _check(q, k, v, block: int, order: str, p_scale: float) -> None:
    if q.ndim != 2 or k.ndim != 2 or v.ndim != 2 or q.shape[1] != k.shape[1] or k.shape[0] != v.shape[0]:
        raise ValueError(f"online_attention: shapes q {q.shape}, k {k.shape}, v {v.shape} do not fit "
                         "(tq, d), (tk, d), (tk, dv)")
    check_integer(block, "online_attention: block", 1)
    if order not in KV_ORDERS:
        raise ValueError(f"online_attention: order must be one of {', '.join(KV_ORDERS)}, got {order!r}")
    if not (p_scale > 0 and np.isfinite(p_scale)):
        raise ValueError(f"online_attention: p_scale must be a finite number > 0, got {p_scale!r}")


def online_attention(q, k, v, *, block: int = 64, order: str = "forward", p_scale: float = 1.0,
                     p_format: str | None = "float8_e4m3fn", scale: float | None = None) -> dict:
    """softmax(q k^T * scale) v of float32 ``q`` (tq, d), ``k`` (tk, d), ``v`` (tk, dv) in blocks of
    ``block`` keys, in ``order``, each block's P times ``p_scale`` rounded into ``p_format`` (None:
    kept in float32) before its product with V (module docstring).  ``scale`` None: 1/sqrt(d),
    rounded to float32.

    Returns ``out`` (tq, dv) float32 and ``flushed`` (tq, tk) bool: the P values that were
    positive in float32 and became 0 in the cast."""
    q, k, v = (np.asarray(a, np.float32) for a in (q, k, v))
    _check(q, k, v, block, order, p_scale)
    sc = np.float32(1.0 / np.sqrt(q.shape[1]) if scale is None else scale)
    ps, inv = np.float32(p_scale), np.float32(1.0 / p_scale)
    fmt = None if p_format is None else get_format(p_format)
    tq, tk = q.shape[0], k.shape[0]
    m = np.full((tq, 1), -np.inf, np.float32)
    l_sum = np.zeros((tq, 1), np.float32)
    out = np.zeros((tq, v.shape[1]), np.float32)
    flushed = np.zeros((tq, tk), bool)
    starts = list(range(0, tk, block))
    for j0 in (starts if order == "forward" else starts[::-1]):
        j1 = min(j0 + block, tk)
        s = matmul_f32(q, k[j0:j1].T) * sc
        m_new = np.maximum(m, s.max(axis=1, keepdims=True))
        alpha = exp_f32(m - m_new)  # 0 for the first block (m = -inf)
        p = exp_f32(s - m_new)
        l_sum = l_sum * alpha + sum_f32(p, axis=1, keepdims=True)
        p8 = p if fmt is None else cast(p * ps, fmt, saturate=True).astype(np.float32)
        flushed[:, j0:j1] = (p > 0) & (p8 == 0)
        out = out * alpha + matmul_f32(p8, v[j0:j1]) * inv
        m = m_new
    return {"out": out / l_sum, "flushed": flushed}


def reference_attention(q, k, v, scale: float | None = None) -> np.ndarray:
    """The same attention in one pass in float32 with no cast: fpsim's exact scores, the row max
    subtracted, correctly rounded exp, exact row sums and products (the baseline the fp8 outputs
    are measured against; its own error, a few float32 ulps, is far below e4m3's)."""
    q, k, v = (np.asarray(a, np.float32) for a in (q, k, v))
    sc = np.float32(1.0 / np.sqrt(q.shape[1]) if scale is None else scale)
    s = matmul_f32(q, k.T) * sc
    p = exp_f32(s - s.max(axis=1, keepdims=True))
    return matmul_f32(p, v) / sum_f32(p, axis=1, keepdims=True)
