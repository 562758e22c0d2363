"""Deterministic tiny data sets, generated from a seed (nothing is downloaded)."""

from __future__ import annotations

import numpy as np

from .state import blas_call

__all__ = ["lowrank_autoencoder", "classification_blobs"]


def lowrank_autoencoder(n: int = 16384, dim: int = 64, rank: int = 4, seed: int = 0,
                        amplitude: float = 0.5) -> np.ndarray:
    """Samples on a curved ``rank``-dimensional manifold in ``dim`` dimensions (float32, (n, dim)).

    x = amplitude * tanh(z @ B.T) with z ~ N(0, I_rank) and a fixed random (dim, rank) basis B with
    entries N(0, 1/4).  An autoencoder learns to reproduce x; every one of the n * dim
    coordinates is an output, as every pixel is in dense prediction.
    """
    if n < 1 or dim < 1 or rank < 1:
        raise ValueError(f"n, dim and rank must be >= 1, got {n}, {dim}, {rank}")
    rng = np.random.default_rng(seed)
    basis = rng.standard_normal((dim, rank)) / 2
    z = rng.standard_normal((n, rank))
    return (amplitude * np.tanh(blas_call(np.matmul, z, basis.T))).astype(np.float32)


def classification_blobs(n: int = 1024, dim: int = 16, classes: int = 4, seed: int = 0):
    """Gaussian blobs, one per class: (x float32 (n, dim), y int64 (n,)).  A small classifier on
    them trains as well in float16 without loss scaling - the usual case where no cure is needed -
    although most of its activation gradients are subnormal in float16 (lab 05 measures it)."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((classes, dim)) * 2
    y = rng.integers(0, classes, n)
    x = centers[y] + rng.standard_normal((n, dim))
    return x.astype(np.float32), y.astype(np.int64)
