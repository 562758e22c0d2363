"""Lab 19 (the capstone): two float16 runs that die, and the judge_fix of a learner's fix.

Run A is the tiny GPT with hand-written attention (:class:`~fpsim.experiments.tinygpt.OverflowGPTTask`:
the softmax exponentiates the scores without subtracting their maximum), 60 steps, a float16
model with float32 master weights and a dynamic GradScaler (:data:`BROKEN_A`).  Run B is the
reference autoencoder on 4,096 samples in pure float16 (:data:`BROKEN_B`: Adam's state in float16
too).  Each dies; the learner finds why with the tracer, the scaler's record and the monitor, and
hands back a fix: a :class:`~fpsim.experiments.Recipe` and a learning rate.

:func:`judge_fix` trains the fix and says ``"fixed"`` or, in one short sentence, why not: the model
must stay float16 (the lab's premise: a GPU without bfloat16 and no memory for a float32 model),
the run must live to the end (no non-finite loss at its last step, no parameter lost) and end
within :data:`TOLERANCE` of the float32 run's final loss at the task's own learning rate.
"""

from __future__ import annotations

import math

from ..experiments import Recipe, ReferenceTask, train
from ..experiments.tinygpt import OverflowGPTTask

__all__ = ["TASK_A", "TASK_B", "BROKEN_A", "BROKEN_B", "TOLERANCE", "run", "judge_fix"]

TASK_A = OverflowGPTTask(steps=60)
TASK_B = ReferenceTask(n=4096)
BROKEN_A = Recipe("run-a", "float16", master=True, scaler="dynamic",
                  description="float16 model + float32 masters + dynamic GradScaler")
BROKEN_B = Recipe("run-b", "float16", description="float16 weights, activations, gradients and Adam state")
TOLERANCE = 0.05  # a fix ends within 5% of float32's final loss
_TASKS = {"a": TASK_A, "b": TASK_B}


def _task(which: str):
    if which not in _TASKS:
        raise ValueError(f"which must be 'a' or 'b', got {which!r}")
    return _TASKS[which]


def run(which: str, recipe, lr: float | None = None):
    """Train run ``which`` (``"a"`` or ``"b"``) under ``recipe`` (a Recipe or a recipe name) at
    ``lr`` (None: the task's own), seed 0: :func:`fpsim.experiments.train`'s RunResult."""
    return train(_task(which), recipe, 0, lr=lr)


def _rules(fix) -> tuple:
    """(recipe, lr) from a learner's fix, or a string saying what is wrong with its form."""
    if not (isinstance(fix, tuple) and len(fix) == 2):
        return f"a fix is a (Recipe, learning rate) pair, got {type(fix).__name__}"
    recipe, lr = fix
    if not isinstance(recipe, Recipe):
        return f"the first element must be a fpsim.experiments.Recipe, got {type(recipe).__name__}"
    if isinstance(lr, bool) or not isinstance(lr, int | float) or not lr > 0:
        return f"the learning rate must be a number > 0, got {lr!r}"
    if recipe.params != "float16":
        return f"the model must stay float16 (params={recipe.params!r})"
    if recipe.autocast not in (None, "float16"):
        return f"this GPU has no bfloat16 and the point is float16 compute (autocast={recipe.autocast!r})"
    if recipe.layers is not None:
        return "no fp8 or block-scaled layers: fix the float16 run"
    return recipe, float(lr)


def judge_fix(which: str, fix, fp32_loss: float) -> str:
    """``"fixed"`` when ``fix`` = (Recipe, lr) keeps run ``which``'s model in float16 (autocast, if
    any, float16; no fp8 layers), trains to the end without dying and ends within
    :data:`TOLERANCE` of ``fp32_loss`` (the float32 run's final loss); otherwise one sentence
    saying which of these failed and by how much."""
    rules = _rules(fix)
    if isinstance(rules, str):
        return rules
    recipe, lr = rules
    r = run(which, recipe, lr)
    if r.died_at is not None or not math.isfinite(r.final_loss):
        at = r.died_at if r.died_at is not None else next((i for i, v in enumerate(r.losses) if not math.isfinite(v)),
                                                         len(r.losses) - 1)
        return f"it still dies: the loss is not finite from step {at}"
    ratio = r.final_loss / fp32_loss
    if ratio > 1 + TOLERANCE:
        return f"it lives but ends at {r.final_loss:.4g}, {ratio:.2f}x float32's {fp32_loss:.4g}"
    return "fixed"
