"""The one training loop: :func:`train` trains a task under a recipe and measures what went wrong.

Every task (:class:`~fpsim.experiments.task.Task`: the reference autoencoder, the tiny GPT, the
lab classifier) trains here: :meth:`Recipe.prepare` builds the run, :meth:`Run.step` steps it,
and step by step the loop records the loss, the loss scale, skipped steps, the share of backward
gradients flushed to zero (a rounding hook, :class:`FlushCounter`) and of parameter entries the
update left unchanged, into one :class:`RunResult`.

Steps are numbered from 0 everywhere: ``losses[k]`` is the loss the forward pass of step k
computed (before step k's update), and a run that died at step k (:attr:`RunResult.died_at`)
has ``k + 1`` losses - its last is the one step k computed.
"""

from __future__ import annotations

import contextlib
import time
import warnings

from .. import state
from ..checks import check_integer, check_positive
from ..trace import FORWARD, NonFiniteTracer
from .measure import FlushCounter, diagnose, measured_steps
from .recipes import get_recipe
from .result import RunResult
from .task import get_task
from .tasks import ReferenceTask

__all__ = ["train", "run_recipe"]


def train(task, recipe="fp32", seed: int = 0, *, steps: int | None = None, lr: float | None = None,
          measure_at=None, progress=None, backend=None) -> RunResult:
    """Train ``task`` under ``recipe`` from the initial weights of ``seed`` and measure what
    happened (module docstring): the one training loop, and the one public way to train once
    (``task``: a Task, or a name in :data:`~fpsim.experiments.TASKS` built with its defaults;
    ``recipe``: a Recipe, or a name in :data:`~fpsim.experiments.RECIPES`).

    ``steps`` / ``lr``: the task's defaults unless given (the task may schedule the rate:
    ``task.lr_at``).  ``measure_at``: ``"all"`` (every step), or the steps (negative counts from
    the end) at which the fractions of backward gradients flushed to zero and of stalled updates
    are measured; the task's ``measure_at`` unless given.  ``progress`` is called with no
    arguments after every step (tqdm's ``update``).  Stochastic rounding inside the run draws
    from ``seed``'s own generator.  A run stops at the step after which it is dead
    (:func:`~fpsim.experiments.measure.diagnose`)."""
    r = get_recipe(recipe)
    task = get_task(task)
    steps = task.steps if steps is None else steps
    lr = task.lr if lr is None else lr
    steps = check_integer(steps, "steps", 1)  # 2.7 steps is no number of steps (int() would run 2)
    check_positive(lr, "learning rate")
    check_integer(seed, "seed", 0)
    measure = measured_steps(task.measure_at if measure_at is None else measure_at, steps)
    run = r.prepare(task.model(seed), lr=lr, seed=seed, optimizer=task.optimizer, backend=backend)
    batch_at = task.batches(r, backend)
    start = [a.copy() for a in run.masters()]
    out = RunResult(r.name, scaler=r.scaler)
    tracer = NonFiniteTracer() if task.trace_nonfinite else None
    t0 = time.perf_counter()
    with state.seeded(seed), state.hooked(tracer) if tracer is not None else contextlib.nullcontext():
        pending = _train_loop(task, run, out, batch_at, steps, lr, measure, progress, tracer)
    out.seconds = time.perf_counter() - t0
    if tracer is not None:
        _traced(out, tracer)
    if run.scaling is not None:
        out.fp8 = run.scaling.summary()
    for step, (act, weight, same, total) in sorted(pending.items()):
        out.act_grad_flushed[step] = FlushCounter.fraction(act)
        out.weight_grad_flushed[step] = FlushCounter.fraction(weight)
        out.stalled[step] = int(same) / total
    with state.no_grad():
        final = run.masters()
        out.frozen_fraction = 1 - sum(int((a != b).sum()) for a, b in zip(start, final)) / sum(a.size for a in start)
        out.metrics = dict(task.metrics(run.model, r))
    out.columns, out.legend = tuple(task.table_columns), task.table_legend
    return out


def _train_loop(task, run, out: RunResult, batch_at, steps: int, lr: float, measure: set, progress, tracer) -> dict:
    """The steps of :func:`train`; returns the measured steps' counts (read once, after the run:
    on cupy they stay on the device until then)."""
    pending = {}
    for step in range(steps):
        if tracer is not None:
            tracer.set_step(step)
        run.opt.lr = task.lr_at(step, steps, lr)
        counter = FlushCounter() if step in measure else None
        batch = batch_at(step)
        s = run.step(lambda model, batch=batch: task.loss(model, batch, run.recipe), hook=counter,
                     count_unchanged=counter is not None)
        lval = s.loss.item()
        out.losses.append(lval)
        out.scales.append(s.scale)
        out.skipped.append(s.skipped)
        if counter is not None:
            pending[step] = (counter.act, counter.weight, *s.unchanged)
        if progress is not None:
            progress()
        out.failure = diagnose(run.model, run.opt, step, lval, task.loss_kills)
        if out.failure:
            out.died_at = step  # the run is dead: say where, and stop spending time on NaNs
            if progress is not None:
                for _ in range(steps - step - 1):
                    progress()
            break
    return pending


def _traced(out: RunResult, tracer) -> None:
    """What the NonFiniteTracer saw: the first op that made an inf / NaN (scaler overflows
    aside), the scaler's overflows, and a note when the forward pass overflowed in a live run."""
    out.traced = True
    out.nonfinite = tracer.first_nonfinite(include_scaler=False)
    out.scaler_overflows = tracer.counts["loss-scaler overflow"]
    if out.nonfinite is not None and out.nonfinite.kind == FORWARD and not out.failure:
        out.notes.append(f"forward overflow at step {out.nonfinite.step}; the scaler skipped "
                         f"{out.steps_skipped} of {len(out.skipped)} steps")


def run_recipe(recipe="fp32", task=None, *, steps: int | None = None, seed: int = 0, lr: float | None = None,
               measure_at="all", progress=None, backend=None) -> RunResult:
    """Deprecated (removed 2027-06-01): ``train(task, recipe, seed, ...)`` - the one way to train
    once.  This alias keeps its old defaults: the reference task, every step measured."""
    warnings.warn("fpsim.experiments.run_recipe is deprecated (removed 2027-06-01): use "
                  "train(task, recipe, seed, ...)", DeprecationWarning, stacklevel=2)
    return train(task or ReferenceTask(), recipe, seed, steps=steps, lr=lr, measure_at=measure_at,
                 progress=progress, backend=backend)
