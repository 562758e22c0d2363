"""The values the block-format findings quantize: Gaussian and Student-t samples, and the real
gradients of the reference task and the tiny GPT (one float32 forward + backward at the
initial weights, every weight and activation gradient, flattened and concatenated)."""

from __future__ import annotations

import numpy as np

from ... import nn, ops
from ...capture import capture_gradients
from ...numerics.random import normal
from ..tasks import ReferenceTask
from ..tinygpt import TinyGPTTask

__all__ = ["SAMPLES", "sample"]

SAMPLES = ("gaussian", "student_t3", "reference_grads", "tinygpt_grads")


def sample(kind: str, n: int, seed: int = 0) -> np.ndarray:
    """float32 values of ``kind`` (one of :data:`SAMPLES`): ``n`` draws for the two distributions,
    from fpsim's float32 normal draws (:func:`fpsim.numerics.random.normal`; numpy's normal and
    Student-t draws call the C library's exp and log); for the gradients, every value of one
    capture (``n`` ignored; the model's initial weights drawn from ``seed``)."""
    rng = np.random.default_rng(seed)
    if kind == "gaussian":
        return normal(rng, n)
    if kind == "student_t3":
        return _student_t3(rng, n)
    if kind == "reference_grads":
        task = ReferenceTask(n=2048)
        x = task.data()
        cap = capture_gradients(task.model(seed), ops.mse_loss, x, x)
        return cap.values()
    if kind == "tinygpt_grads":
        task = TinyGPTTask()
        seq = task.batch_at(0)
        k = task.n_digits

        def loss(logits, target):
            return nn.cross_entropy(logits[:, k:].reshape(-1, task.vocab_size).to("float32"), target)

        cap = capture_gradients(task.model(seed), loss, seq[:, :-1], seq[:, k + 1:].reshape(-1))
        return cap.values()
    raise ValueError(f"unknown sample {kind!r}; known: {', '.join(SAMPLES)}")


def _student_t3(rng, n: int) -> np.ndarray:
    """``n`` Student-t draws with 3 degrees of freedom, by definition: z0 / sqrt((z1^2 + z2^2 + z3^2) / 3)
    with four independent standard normals (fpsim's float32 draws), computed in float64 - each step one
    IEEE operation - and rounded once to float32."""
    z = normal(rng, (4, n)).astype(np.float64)
    chi2 = z[1] * z[1] + z[2] * z[2] + z[3] * z[3]  # in this order: no library's reduction
    return (z[0] / np.sqrt(chi2 / 3)).astype(np.float32)
