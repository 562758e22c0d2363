"""The values the block-format findings quantize: Gaussian and Student-t samples, and the real
gradients of the reference task and the tiny GPT (one float32 forward + backward at the
initial weights, every weight and activation gradient, flattened and concatenated)."""

from __future__ import annotations

import numpy as np

from ... import nn, ops
from ...capture import capture_gradients
from ..tasks import ReferenceTask
from ..tinygpt import TinyGPTTask

__all__ = ["SAMPLES", "sample"]

SAMPLES = ("gaussian", "student_t3", "reference_grads", "tinygpt_grads")


def sample(kind: str, n: int, seed: int = 0) -> np.ndarray:
    """float32 values of ``kind`` (one of :data:`SAMPLES`): ``n`` draws for the two distributions
    (float64 draws rounded once to float32); for the gradients, every value of one capture
    (``n`` ignored; the model's initial weights drawn from ``seed``)."""
    rng = np.random.default_rng(seed)
    if kind == "gaussian":
        return rng.standard_normal(n).astype(np.float32)
    if kind == "student_t3":
        return rng.standard_t(3, n).astype(np.float32)
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
