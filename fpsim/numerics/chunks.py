"""How a long K is split into chunks: :func:`chunk_of` (the chunk length) and :func:`chunk_sums`
(the float64 product as the sum of the chunks' products), for ``matmul.py`` and its compiled path."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["chunk_of", "chunk_sums"]

_CHUNK_FROM = 2048  # K from which the sum is split into chunks (a tighter bound, fewer open sums)


def chunk_of(k: int) -> int:
    """The chunk length of a K-long sum: a power of two near sqrt(K) from K = 2048 up (the bound
    is about (chunk + K / chunk) roundings, least at sqrt(K)), else K itself (one dgemm)."""
    if k < _CHUNK_FROM:
        return k
    return 1 << round(math.log2(math.sqrt(k)))


def chunk_sums(a64, b64, kc: int):
    """(the float64 product as the sum of the products of K's chunks of kc and of the tail, a's
    chunks (..., nc, M, kc), b's chunks (..., nc, kc, N))."""
    k = a64.shape[-1]
    nc = k // kc
    main = nc * kc
    ac = np.moveaxis(a64[..., :main].reshape(a64.shape[:-1] + (nc, kc)), -2, -3)  # (..., nc, M, kc)
    bc = b64[..., :main, :].reshape(b64.shape[:-2] + (nc, kc, b64.shape[-1]))  # (..., nc, kc, N)
    c = (ac @ bc).sum(axis=-3)
    if main < k:
        c += a64[..., main:] @ b64[..., main:, :]
    return c, ac, bc
