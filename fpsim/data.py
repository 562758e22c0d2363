"""Deterministic tiny data sets, generated from a seed (nothing is downloaded)."""

from __future__ import annotations

import numpy as np

from .numerics import matmul_f32, tanh_f32
from .numerics.random import normal

__all__ = ["lowrank_autoencoder", "classification_blobs"]


def lowrank_autoencoder(n: int = 16384, dim: int = 64, rank: int = 4, seed: int = 0,
                        amplitude: float = 0.5) -> np.ndarray:
    """Samples on a curved ``rank``-dimensional manifold in ``dim`` dimensions (float32, (n, dim)).

    x = amplitude * tanh(z @ B.T) with z ~ N(0, I_rank) and a fixed random (dim, rank) basis B with
    entries N(0, 1/4).  An autoencoder learns to reproduce x; every one of the n * dim
    coordinates is an output, as every pixel is in dense prediction.  Computed in float32 with
    fpsim's own normal draws, exact product sums and correctly rounded tanh: the same bits on
    every machine.
    """
    if n < 1 or dim < 1 or rank < 1:
        raise ValueError(f"n, dim and rank must be >= 1, got {n}, {dim}, {rank}")
    rng = np.random.default_rng(seed)
    basis = normal(rng, (dim, rank), 0.5)
    z = normal(rng, (n, rank))
    return np.float32(amplitude) * tanh_f32(matmul_f32(z, basis.T))


def classification_blobs(n: int = 1024, dim: int = 16, classes: int = 4, seed: int = 0):
    """Gaussian blobs, one per class: (x float32 (n, dim), y int64 (n,)).  A small classifier on
    them trains as well in float16 without loss scaling - the usual case where no cure is needed -
    although most of its activation gradients are subnormal in float16 (lab 05 measures it)."""
    rng = np.random.default_rng(seed)
    centers = normal(rng, (classes, dim), 2.0)
    y = rng.integers(0, classes, n)
    x = centers[y] + normal(rng, (n, dim))
    return x, y.astype(np.int64)
