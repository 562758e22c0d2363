"""The reference task on which the recipes differ.

The reference task is a small autoencoder trained on the mean squared error over EVERY output
coordinate of a full batch: 16,384 samples x 64 dimensions = 2**20 outputs.  That mean is the
honest reason its gradients are tiny: d(loss)/d(output) = 2 (y - x) / N with N = 2**20, so a
typical reconstruction error of 0.03 gives a gradient near 6e-8, and a good share of the
errors are smaller still - at or below float16's flush-to-zero threshold (2**-25 = 2.98e-8).
Dense prediction (segmentation, depth, per-pixel or per-token losses averaged over millions of
outputs) produces gradients this small in real training; typical small classifiers do not - a
16-64-64-4 classifier trains as well in float16 without loss scaling, although most of its
activation gradients are subnormal there (lab 05 measures it).
As training goes on the errors shrink, and more gradients fall below the threshold: about 6% of
the activation gradients flush to zero at the first step and about half at the last.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .. import nn, ops
from ..data import lowrank_autoencoder
from ..numerics import mean64
from ..tensor import tensor
from .result import Column
from .task import TASKS, Task

__all__ = ["ReferenceTask"]


@TASKS.register("reference")
@dataclass(frozen=True)
class ReferenceTask(Task):
    """The autoencoder of the module docstring: sizes, data and optimizer settings (Adam, full
    batch, a constant learning rate), the gradients measured at every step."""

    summary = "the autoencoder whose loss is averaged over 2^20 outputs, so its gradients are tiny (default)"
    table_columns = (Column("r2", "R^2", "fixed4", live_only=True),)
    table_legend = ("stalled: parameter entries (masters where there are masters) that the last step left unchanged -",
                    "  their update was below half an ulp.  R^2: 1 - reconstruction error / variance of the data.")

    n: int = 16384
    dim: int = 64
    rank: int = 4
    hidden: tuple = (32, 8, 32)
    lr: float = 1e-2
    steps: int = 150
    data_seed: int = 0
    amplitude: float = 0.25

    def data(self) -> np.ndarray:
        """The data (n, dim) float32: a fresh copy of the one made for these settings."""
        return _data(self.n, self.dim, self.rank, self.data_seed, self.amplitude).copy()

    def model(self, seed: int = 0) -> nn.Module:
        return nn.MLP([self.dim, *self.hidden, self.dim], activation="tanh", seed=seed)

    def batches(self, recipe, backend):
        """Every step's batch is the whole data set: (the input rounded into the recipe's parameter
        format, the float32 target - the loss compares against the exact data)."""
        x_np = self.data()
        batch = (tensor(x_np, recipe.params, backend=backend), tensor(x_np, "float32", backend=backend))
        return lambda step: batch

    def loss(self, model, batch, recipe):
        """The mean squared error over every output, in float32 (the model's output widened
        first, as autocast runs losses); the forward pass under the recipe's autocast."""
        x, target = batch
        with recipe.forward_context():
            pred = model(x)
        return ops.mse_loss(pred.to("float32"), target)

    def title(self) -> str:
        return f"reference task ({self.n:,} x {self.dim} outputs, Adam)"

    def describe_run(self, steps: int, lr: float) -> str:
        return (f"reference task: autoencoder {self.dim}-{'-'.join(map(str, self.hidden))}-{self.dim} (tanh), "
                f"{self.n} x {self.dim} = 2^{(self.n * self.dim).bit_length() - 1} outputs, mean squared error, "
                f"Adam lr {lr:g}, {steps} full-batch steps")

    def metrics(self, model, recipe) -> dict:
        """``r2``: 1 - the final model's mean squared error / the variance of the data (float64 on
        the host, every mean the exact sum rounded once over the count - :func:`fpsim.numerics.mean64`;
        the forward pass in the model's formats, without autocast)."""
        x_np = self.data()
        be = model.parameters()[0].backend
        pred = be.to_numpy(model(tensor(x_np, recipe.params, backend=be)).f32()).astype(np.float64)
        err = float(mean64((pred - x_np.astype(np.float64)) ** 2))
        return {"r2": 1 - err / _variance(self.n, self.dim, self.rank, self.data_seed, self.amplitude)}


@functools.lru_cache(maxsize=4)
def _data(n: int, dim: int, rank: int, seed: int, amplitude: float) -> np.ndarray:
    """The reference task's data for these settings, made once a process (read-only: ``data`` copies it)."""
    x = lowrank_autoencoder(n, dim, rank, seed, amplitude)
    x.flags.writeable = False
    return x


@functools.lru_cache(maxsize=4)
def _variance(*settings) -> float:
    """numpy's var of :func:`_data` (the mean squared deviation from the mean), every mean exact (``mean64``)."""
    x64 = _data(*settings).astype(np.float64)
    return float(mean64((x64 - mean64(x64)) ** 2))
