"""How much of a quantized run's gradient is quantization noise: ``||g|| / ||Q(g) - g||`` per step.

``g`` is the float32 gradient of the loss at the run's current weights (a float32 twin of the
model, the same data), ``Q(g)`` the gradient the quantized run computed there (its block-scaled
or low-precision GEMMs, its stochastic rounding).  "FP4 All the Way" (arXiv 2505.19115) finds
quantized training stops helping once this ratio falls below about sqrt(3).  Norms are over
every parameter's gradient together: the exact sum of the squares (float32 values' squares are
exact in float64; the differences Q(g) - g are taken in float64), rounded once to float64
(:func:`fpsim.numerics.fsum64`).
"""

from __future__ import annotations

import math

import numpy as np

from .. import state
from ..numerics import fsum64, mean64

__all__ = ["GradientNoiseMonitor", "SQRT3"]

SQRT3 = math.sqrt(3.0)


class GradientNoiseMonitor:
    """Call after a quantized run's backward pass: ``monitor(model, loss_fn)`` loads the model's
    weights into ``twin`` (a float32 module of the same architecture and parameter names), runs
    ``loss_fn(twin)`` - the loss of a module on the step's batch, a float32 Tensor - and its
    backward in float32, and appends ||g|| / ||Q(g) - g|| to ``ratios`` (also ``grad_norms``
    ||g|| and ``noise_norms``).  ``model``'s gradients must be in place (``p.grad``); they are
    read, not changed."""

    def __init__(self, twin):
        self.twin = twin
        self.ratios: list[float] = []
        self.grad_norms: list[float] = []
        self.noise_norms: list[float] = []

    def __call__(self, model, loss_fn) -> float:
        self.twin.load_state_dict(model.state_dict())
        for p in self.twin.parameters():
            p.grad = None
        with state.autocast_as(None), state.set_grad_enabled(True):
            loss_fn(self.twin).backward()
        sq, noise = [np.zeros(0)], [np.zeros(0)]
        for (name, pq), pt in zip(model.named_parameters(), self.twin.parameters()):
            if pq.grad is None or pt.grad is None:
                raise ValueError(f"GradientNoiseMonitor: parameter {name} has no gradient (call after backward)")
            gq = np.asarray(pq.backend.to_numpy(pq.grad.f32()), dtype=np.float64).ravel()
            g = np.asarray(pt.backend.to_numpy(pt.grad.f32()), dtype=np.float64).ravel()
            sq.append(g * g)
            noise.append((gq - g) ** 2)
        g2, n2 = float(fsum64(np.concatenate(sq))), float(fsum64(np.concatenate(noise)))
        ratio = math.sqrt(g2 / n2) if n2 else math.inf
        self.ratios.append(ratio)
        self.grad_norms.append(math.sqrt(g2))
        self.noise_norms.append(math.sqrt(n2))
        return ratio

    def first_below(self, threshold: float = SQRT3, window: int = 1) -> int | None:
        """The first step from which the ratio's mean over ``window`` steps (:func:`fpsim.numerics.mean64`)
        is below ``threshold``."""
        r = np.asarray(self.ratios, dtype=np.float64)
        if r.size < window:
            return None
        mean = np.array([mean64(r[i:i + window]) for i in range(r.size - window + 1)])
        below = np.flatnonzero(mean < threshold)
        return int(below[0]) if below.size else None
