"""Lab 05: a typical small classifier trained under the recipes of the reference task.

The blob classifier (16-64-64-4, ReLU, mean cross-entropy over a full batch of Gaussian blobs)
is the counter-example to the reference task: its gradients sit far higher, mostly in
float16's subnormal band rather than below it.  :func:`train_classifier` trains it under a named
recipe (``fp32``, ``fp16-pure``, ``fp16-master``, ``fp16-static``, ``fp16-dynamic``,
``fp16-amp``, ``bf16-pure``, ``bf16-master``: the same meanings as in
:mod:`fpsim.experiments`) and counts, at every step, the share of the backward pass's non-zero
gradients the low format flushed to zero - so that whether the cures matter here is measured,
not assumed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import nn
from ..amp import GradScaler, StaticScaler
from ..data import classification_blobs
from ..experiments import get_recipe
from ..monitor import monitor
from ..optim import SGD, Adam
from ..tensor import tensor

__all__ = ["ClassifierRun", "train_classifier", "classifier_table"]


@dataclass
class ClassifierRun:
    """Per step: the float32 loss before the step, the share of non-zero backward gradients
    flushed to zero, whether the step was skipped, the loss scale."""

    recipe: str
    losses: list = field(default_factory=list)
    flushed: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    scales: list = field(default_factory=list)


def train_classifier(recipe="fp32", steps: int = 100, *, n: int = 1024, lr: float = 0.1, optimizer: str = "sgd",
                     seed: int = 0) -> ClassifierRun:
    """Train the blob classifier full batch for ``steps`` steps under ``recipe``.

    The loss is computed in float32 from the model's output (as autocast does); a dynamic
    scaler starts at 2^16 with the recipe's growth interval, a static one uses the recipe's
    scale.  ``optimizer``: ``"sgd"`` (plain, default lr 0.1) or ``"adam"``.  The same data
    and initial weights for every recipe (``seed``)."""
    r = get_recipe(recipe)
    if r.fp8 is not None or r.update_rounding != "nearest":
        raise ValueError(f"train_classifier runs the float16 / bfloat16 recipes, not {r.name}")
    if optimizer not in ("sgd", "adam"):
        raise ValueError(f"optimizer must be 'sgd' or 'adam', got {optimizer!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, got {steps!r}")
    x, y = classification_blobs(n=n, dim=16, classes=4, seed=seed)
    model = nn.MLP([16, 64, 64, 4], activation="relu", seed=seed).to(r.params)
    xt = tensor(x, r.params)
    cls = SGD if optimizer == "sgd" else Adam
    opt = cls(model.parameters(), lr=lr, master_weights=r.master)
    scaler = None
    if r.scaler == "static":
        scaler = StaticScaler(r.static_scale)
    elif r.scaler == "dynamic":
        scaler = GradScaler(init_scale=2.0**16, growth_interval=r.growth_interval)
    low = r.gradients
    out = ClassifierRun(r.name)
    for _ in range(steps):
        opt.zero_grad()
        with r.forward_context():
            logits = model(xt)
        loss = nn.cross_entropy(logits.to("float32"), y)
        with monitor() as m:  # only the backward pass: what becomes of the gradients
            (scaler.scale(loss) if scaler is not None else loss).backward()
        t = m.totals(direction="backward", fmt=low) if low != "float32" else {"n": 0}
        out.flushed.append(t["underflow"] / t["n"] if t["n"] else 0.0)
        out.scales.append(scaler.get_scale() if scaler is not None else 1.0)
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
            out.skipped.append(scaler.last_step_skipped(opt))
        else:
            opt.step()
            out.skipped.append(False)
        out.losses.append(loss.item())
    return out


def classifier_table(runs: dict[str, ClassifierRun], baseline: str = "fp32") -> str:
    """Final loss, its ratio to the baseline's, the largest share of gradients flushed in any
    step, and the skipped steps - one row per recipe."""
    from ..textable import text_table

    base = runs[baseline].losses[-1]
    rows = []
    for name, r in runs.items():
        last = r.losses[-1]
        rows.append([name, f"{last:.4e}", f"{last / base:.4f}x", f"{100 * max(r.flushed):.2g}%",
                     str(int(sum(r.skipped)))])
    cols = ["recipe", "final loss", f"vs {baseline}", "most flushed in a step", "skipped"]
    return "\n".join(text_table(cols, rows, right=range(1, len(cols))))

