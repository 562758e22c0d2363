"""Lab 05: a typical small classifier trained under the recipes of the reference task.

The blob classifier (16-64-64-4, ReLU, mean cross-entropy over a full batch of Gaussian blobs)
is the counter-example to the reference task: its gradients sit far higher, mostly in
float16's subnormal band rather than below it.  :class:`BlobClassifier` is it as a task of the
experiment pipeline; :func:`train_classifier` trains it under a named recipe (``fp32``,
``fp16-pure``, ``fp16-master``, ``fp16-static``, ``fp16-dynamic``, ``fp16-amp``, ``bf16-pure``,
``bf16-master``: the same meanings as in :mod:`fpsim.experiments`) with
:func:`fpsim.experiments.train`, which counts at every step the share of the backward pass's
non-zero gradients the low format flushed to zero - so that whether the cures matter here is
measured, not assumed.  ``fpsim.experiments.format_table`` prints the runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import nn
from ..checks import check_integer
from ..data import classification_blobs
from ..experiments import RunResult, Task, get_recipe, train
from ..tensor import tensor

__all__ = ["BlobClassifier", "train_classifier"]


@dataclass(frozen=True)
class BlobClassifier(Task):
    """The 16-64-64-4 ReLU classifier on ``classification_blobs(n, dim=16, classes=4,
    seed=data_seed)``, full batch, plain SGD (or Adam), the loss in float32."""

    n: int = 1024
    steps: int = 100
    lr: float = 0.1
    optimizer: str = "sgd"
    data_seed: int = 0

    def model(self, seed: int = 0):
        return nn.MLP([16, 64, 64, 4], activation="relu", seed=seed)

    def batches(self, recipe, backend):
        """The whole data set every step: the inputs rounded into the recipe's parameter
        format, the integer labels."""
        x, y = classification_blobs(n=self.n, dim=16, classes=4, seed=self.data_seed)
        batch = (tensor(x, recipe.params, backend=backend), y)
        return lambda step: batch

    def loss(self, model, batch, recipe):
        """Mean cross-entropy in float32 of the logits (computed under the recipe's autocast)."""
        x, y = batch
        with recipe.forward_context():
            logits = model(x)
        return nn.cross_entropy(logits.to("float32"), y)


def train_classifier(recipe="fp32", steps: int = 100, *, n: int = 1024, lr: float = 0.1, optimizer: str = "sgd",
                     seed: int = 0) -> RunResult:
    """Train the blob classifier full batch for ``steps`` steps under ``recipe``
    (:func:`fpsim.experiments.train`; a dynamic scaler starts at 2^16 with the recipe's growth
    interval, a static one uses the recipe's scale).  ``optimizer``: ``"sgd"`` (plain, default lr
    0.1) or ``"adam"``.  The same data and initial weights for every recipe (``seed``).  The
    share of activation gradients flushed at each step is ``act_grad_flushed[step]``."""
    r = get_recipe(recipe)
    if r.layers is not None or r.update_rounding != "nearest":
        raise ValueError(f"train_classifier runs the float16 / bfloat16 recipes, not {r.name}")
    if optimizer not in ("sgd", "adam"):
        raise ValueError(f"optimizer must be 'sgd' or 'adam', got {optimizer!r}")
    check_integer(steps, "steps", 1)
    return train(BlobClassifier(n=n, lr=lr, optimizer=optimizer, data_seed=seed), r, seed, steps=steps)
