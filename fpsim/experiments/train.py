"""Training the reference task under a recipe, and measuring what went wrong.

:func:`run_recipe` trains one recipe (Adam, full batch) and records, step by step, the loss,
the loss scale, skipped steps, the share of backward gradients flushed to zero (a rounding
hook, :class:`FlushCounter`) and of parameter entries the update left unchanged;
:func:`compare` and :func:`compare_seeds` run several recipes from the same initial weights.

Steps are numbered from 0 everywhere: ``losses[k]`` is the loss the forward pass of step k
computed (before step k's update), and a run that died at step k (:attr:`RunResult.died_at`)
has ``k + 1`` losses - its last is the one step k computed.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from .. import fp8, lowp, ops, state
from ..checks import check_at_least, check_positive, is_integer
from ..optim import Adam
from ..tensor import tensor
from .recipes import DEFAULT_RECIPES, Recipe, get_recipe
from .tasks import ReferenceTask

__all__ = ["RunResult", "FlushCounter", "run_recipe", "compare", "compare_seeds"]


@dataclass
class RunResult:
    """What one recipe did on the reference task, step by step and at the end."""

    recipe: str
    losses: list = field(default_factory=list)  # float32 loss (unscaled) of each step, before its update
    scales: list = field(default_factory=list)  # loss scale used at each step (1.0 without a scaler)
    skipped: list = field(default_factory=list)  # whether the optimizer step was skipped
    act_grad_flushed: dict = field(default_factory=dict)  # step -> fraction of activation gradients lost
    weight_grad_flushed: dict = field(default_factory=dict)  # step -> fraction of weight-gradient entries lost
    stalled: dict = field(default_factory=dict)  # step -> fraction of parameter entries the update left unchanged
    scaler: str | None = None  # the loss scaler: None, "static" or "dynamic"
    died_at: int | None = None  # the step (from 0) after which the run was non-finite; None if it lived
    frozen_fraction: float = float("nan")  # parameters (entries) that never changed
    r2: float = float("nan")  # 1 - mse / variance of the data, on the final model
    failure: str = ""  # where a NaN / inf came from, if the run died (training stops there)
    seconds: float = 0.0
    fp8: dict = field(default_factory=dict)  # fp8 recipes: tensor -> ScalingState.summary() after the last step

    @property
    def final_loss(self) -> float:
        return float("nan") if self.failure or not self.losses else self.losses[-1]

    @property
    def steps_skipped(self) -> int:
        return int(sum(self.skipped))

    @property
    def final_scale(self) -> float:
        return self.scales[-1] if self.scales else float("nan")


class FlushCounter:
    """A rounding hook (one :class:`~fpsim.state.RoundingEvent` per call): of the backward
    gradients float32 had non-zero, how many became 0 - ``act`` for the gradients flowing
    between layers, ``weight`` for weight and bias gradients, each ``[lost, non-zero]``.

    Cheap enough to run at every step: a rounding never turns 0 into anything else, so the
    lost values are the zeros stored minus the zeros float32 had, two ``count_nonzero`` per
    event (float16 / bfloat16 / fp8 zeros counted on the bit patterns, not in slow float16
    arithmetic).  The counts stay on the tensors' device (0-d arrays on cupy) until read.
    """

    def __init__(self):
        self.act = [0, 0]
        self.weight = [0, 0]

    def __call__(self, ev: state.RoundingEvent) -> None:
        if ev.direction != "backward" or ev.fmt.name == "float32" or ev.op == "accumulate":
            return
        xp = ev.backend.xp
        if ev.exact32 is None:  # a gradient moved, not rounded (tensor.Exact): nothing lost
            n_nz, lost = _count_nonzero(xp, ev.stored), 0
        else:
            n_nz = xp.count_nonzero(ev.exact32)
            lost = n_nz - _count_nonzero(xp, ev.stored)
        bucket = self.weight if ev.target in ("weight", "bias") else self.act
        bucket[0] = bucket[0] + lost
        bucket[1] = bucket[1] + n_nz

    @staticmethod
    def fraction(bucket) -> float:
        lost, n = int(bucket[0]), int(bucket[1])
        return lost / n if n else 0.0


def _count_nonzero(xp, a):
    """The non-zero entries of ``a`` (+0 and -0 are zero); 16- and 8-bit formats on their bits."""
    size = a.dtype.itemsize
    if size < 4:
        return xp.count_nonzero(a.view(xp.uint16 if size == 2 else xp.uint8) & (0x7FFF if size == 2 else 0x7F))
    return xp.count_nonzero(a)


def _make_scaler(recipe: Recipe):
    if recipe.scaler is None:
        return None
    from ..amp import GradScaler, StaticScaler

    if recipe.scaler == "static":
        return StaticScaler(recipe.static_scale)
    return GradScaler(init_scale=2.0**16, growth_interval=recipe.growth_interval)


@dataclass
class _Run:
    """One training run being set up and stepped: the model, its data and its optimizer."""

    recipe: Recipe
    x_np: np.ndarray
    model: object
    x: object  # the input, rounded into the model's format
    target: object  # the loss compares against exact data (float32)
    opt: Adam
    scaler: object = None
    scaling: object = None  # fp8 recipes: the ScalingGroup of the converted Linears
    measured: dict = field(default_factory=dict)  # step -> the counts _train_step took, not yet read

    @classmethod
    def build(cls, r: Recipe, task: ReferenceTask, seed: int, lr: float, backend) -> _Run:
        x_np = task.data()
        model = task.model(seed)
        if backend is not None:
            model.to(backend=backend)
        model.to(r.params)
        scaling = fp8.convert(model, r.fp8, skip=r.fp8_skip) if r.fp8 is not None else None  # -> fp8.Linear
        if r.block is not None:
            lowp.convert_blocks(model, r.block, skip=r.block_skip)  # -> lowp.BlockLinear
        x = tensor(x_np, r.params, backend=backend)
        target = tensor(x_np, "float32", backend=backend)
        opt = Adam(model.parameters(), lr=lr, master_weights=r.master, update_rounding=r.update_rounding, seed=seed)
        return cls(r, x_np, model, x, target, opt, _make_scaler(r), scaling)

    def masters(self) -> list:
        return [p.f32() for p in self.opt.master_params()]

    def forward_backward(self):
        """Zero the gradients, run the model and backward through the (scaled) float32 loss;
        returns (loss, loss scale used)."""
        self.opt.zero_grad()
        with self.recipe.forward_context():
            pred = self.model(self.x)
        loss = ops.mse_loss(pred.to("float32"), self.target)  # losses run in float32 (autocast policy)
        scale = self.scaler.get_scale() if self.scaler is not None else 1.0
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
        return loss, scale

    def update(self) -> bool:
        """The optimizer step (through the scaler, if any); whether it was skipped."""
        return optimizer_step(self.opt, self.scaler, self.scaling)


def optimizer_step(opt, scaler, scaling) -> bool:
    """One update: through the loss scaler when there is one (step, then update), then the fp8
    scaling states (this step's amaxes set the next step's scales).  Whether it was skipped."""
    if scaler is not None:
        scaler.step(opt)
        scaler.update()
        skipped = scaler.last_step_skipped(opt)
    else:
        opt.step()
        skipped = False
    if scaling is not None:
        scaling.update()
    return skipped


def _train_step(run: _Run, out: RunResult, step: int, measured: bool) -> float:
    """One step of ``run``, recorded in ``out``; at ``measured`` steps the flushed gradients
    and the stalled updates are counted (on the device; :func:`_read_measures` reads them
    once, after the run).  Returns the loss."""
    counter = FlushCounter() if measured else None
    if counter is not None:
        with state.hooked(counter):
            loss, scale = run.forward_backward()
    else:
        loss, scale = run.forward_backward()
    lval = loss.item()
    out.losses.append(lval)
    out.scales.append(float(scale))
    before = [a.copy() for a in run.masters()] if measured else None
    out.skipped.append(run.update())
    if counter is not None:
        xp = run.x.backend.xp
        same = sum(xp.count_nonzero(a == b) for a, b in zip(before, run.masters()))
        run.measured[step] = (counter.act, counter.weight, same, sum(a.size for a in before))
    return lval


def _read_measures(run: _Run, out: RunResult) -> None:
    """The per-step counts of :func:`_train_step`, as fractions in ``out``."""
    for step, (act, weight, same, total) in sorted(run.measured.items()):
        out.act_grad_flushed[step] = FlushCounter.fraction(act)
        out.weight_grad_flushed[step] = FlushCounter.fraction(weight)
        out.stalled[step] = int(same) / total


def _final_measures(run: _Run, out: RunResult, start: list) -> None:
    """The share of parameter entries that never changed, and R^2 of the final model."""
    with state.no_grad():
        final = run.masters()
        changed = sum(int((a != b).sum()) for a, b in zip(start, final))
        total = sum(a.size for a in start)
        out.frozen_fraction = 1 - changed / total
        pred = run.x.backend.to_numpy(run.model(run.x).f32()).astype(np.float64)  # to the host: x_np is numpy
        err = float(((pred - run.x_np) ** 2).mean())
        out.r2 = 1 - err / float(run.x_np.astype(np.float64).var())


def run_recipe(recipe="fp32", task: ReferenceTask | None = None, *, steps: int | None = None, seed: int = 0,
               lr: float | None = None, measure_at="all", progress=None, backend=None) -> RunResult:
    """Train the reference task under ``recipe`` (Adam, full batch) and measure what happened.
    A task with a ``run_recipe`` method (``experiments.tinygpt.TinyGPTTask``) trains itself.

    ``measure_at``: ``"all"`` (every step), or the steps (negative counts from the end) at which
    the fractions of backward gradients flushed to zero and of stalled updates are measured;
    ``progress`` is called with no arguments after every step (tqdm's ``update``).
    """
    r = get_recipe(recipe)
    task = task or ReferenceTask()
    if hasattr(task, "run_recipe"):  # a task with its own training loop (experiments.tinygpt)
        return task.run_recipe(r, steps=steps, seed=seed, lr=lr, measure_at=measure_at, progress=progress,
                               backend=backend)
    steps = task.steps if steps is None else int(steps)
    lr = task.lr if lr is None else lr
    check_at_least(steps, 1, "steps")
    check_positive(lr, "learning rate")
    measure = measured_steps(measure_at, steps)
    run = _Run.build(r, task, seed, lr, backend)
    start = [a.copy() for a in run.masters()]
    out = RunResult(r.name, scaler=r.scaler)
    t0 = time.perf_counter()
    with state.seeded(seed):  # stochastic rounding inside the run (block recipes) is the seed's own
        _train_loop(run, out, steps, measure, progress)
    out.seconds = time.perf_counter() - t0
    if run.scaling is not None:
        out.fp8 = run.scaling.summary()
    _read_measures(run, out)
    _final_measures(run, out, start)
    return out


def _train_loop(run: _Run, out: RunResult, steps: int, measure: set, progress) -> None:
    for step in range(steps):
        lval = _train_step(run, out, step, step in measure)
        if progress is not None:
            progress()
        out.failure = _diagnose(run.model, run.opt, step, lval)
        if out.failure:
            out.died_at = step  # the run is dead: say where, and stop spending time on NaNs
            if progress is not None:
                for _ in range(steps - step - 1):
                    progress()
            break


def measured_steps(measure_at, steps: int) -> set[int]:
    """The steps whose gradients are measured: ``"all"``, or a list of steps (negative ones count
    from the end)."""
    if isinstance(measure_at, str):
        if measure_at != "all":
            raise ValueError(f"measure_at: 'all' or a list of steps, got {measure_at!r}")
        return set(range(steps))
    return {s % steps for s in measure_at}


def _diagnose(model, opt, step: int, loss: float) -> str:
    """Where a non-finite number first appeared: the loss, or which parameters."""
    named = list(model.named_parameters())
    if not named:
        return ""
    be = named[0][1].backend  # one device -> host copy for all parameters, not one each
    finite = be.to_numpy(be.xp.stack([be.xp.isfinite(p.f32()).all() for _, p in named]))
    bad = [n for (n, _), ok in zip(named, finite) if not ok]
    if bad:
        why = ""
        if opt.master is None and isinstance(opt, Adam):
            zeros = [n for (n, _), st in zip(model.named_parameters(), opt.state)
                     if st and float((st["exp_avg_sq"].f32() == 0).mean()) > 0]
            if zeros:
                why = f"; Adam's exp_avg_sq had entries flushed to 0 in {', '.join(zeros[:3])} (denominator -> 0)"
        return f"step {step}: parameters {', '.join(bad[:4])} became non-finite in the optimizer update{why}"
    if not math.isfinite(loss):
        return f"step {step}: the loss itself was {loss} (forward overflow)"
    return ""


def compare(recipes=DEFAULT_RECIPES, task: ReferenceTask | None = None, *, steps: int | None = None, seed: int = 0,
            lr: float | None = None, progress: bool = True, backend=None, measure_at="all") -> dict[str, RunResult]:
    """Run every recipe on the same task, seed and initial weights; results by recipe name.
    ``measure_at``: the steps at which flushed gradients and stalled updates are counted, or "all"
    (:func:`run_recipe`)."""
    return compare_seeds(recipes, [seed], task, steps=steps, lr=lr, progress=progress, backend=backend,
                         measure_at=measure_at)[seed]


def _check_recipes_and_seeds(recipes, seeds) -> tuple[list[Recipe], list]:
    recs = [get_recipe(r) for r in recipes]  # names or Recipe objects (your own recipes too)
    if not recs:
        raise ValueError("recipes: give at least one recipe")
    names = [r.name for r in recs]
    if len(set(names)) != len(names):
        raise ValueError(f"recipes: each name once, got {', '.join(names)}")
    seeds = list(seeds)
    if not seeds:
        raise ValueError("seeds: give at least one seed")
    if not all(is_integer(s) for s in seeds) or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct integers, got {seeds!r}")
    return recs, seeds


def _progress_bar(total: int):
    from tqdm.auto import tqdm

    # disable=None: a bar on a terminal; elsewhere (CI, pipes) one line per finished recipe
    return tqdm(total=total, desc="fpsim compare", unit="step", leave=False, disable=None)


def compare_seeds(recipes=DEFAULT_RECIPES, seeds=(0, 1, 2, 3), task: ReferenceTask | None = None, *,
                  steps: int | None = None, lr: float | None = None, progress: bool = True,
                  backend=None, measure_at="all", jobs: int = 1) -> dict[int, dict[str, RunResult]]:
    """:func:`compare` once per seed of the initial weights (the data stay the same): results
    by seed, then by recipe.  One seed's ratio to fp32 can mislead - fp8-delayed is 1.097x at
    seed 0 and 1.116x at seed 5 - so :func:`~fpsim.experiments.format_seed_table` shows every
    seed and the mean.

    ``jobs`` > 1 runs the (seed, recipe) runs in that many worker processes; every run starts
    from its own seed and computes its products on fpsim's fixed BLAS thread count
    (:func:`fpsim.state.blas_threads`), so the results are the ones the serial sweep gives, bit
    for bit (only ``seconds`` differs).  The workers are
    spawned, so the recipes and the task must pickle (a ``Recipe`` defined in a notebook cell
    may not: run those with ``jobs=1``)."""
    recs, seeds = _check_recipes_and_seeds(recipes, seeds)
    check_at_least(jobs, 1, "jobs")
    task = task or ReferenceTask()
    n_steps = task.steps if steps is None else steps
    bar = _progress_bar(n_steps * len(recs) * len(seeds)) if progress else None
    runs = [(seed, rec) for seed in seeds for rec in recs]
    results: dict[int, dict[str, RunResult]] = {seed: {} for seed in seeds}

    def label(seed, rec):
        return rec.name if len(seeds) == 1 else f"{rec.name}, seed {seed}"

    def done(seed, rec, r):
        results[seed][rec.name] = r
        if bar is not None and bar.disable:
            print(f"fpsim compare: {label(seed, rec)} done in {r.seconds:.1f}s", file=sys.stderr, flush=True)

    try:
        if jobs > 1 and len(runs) > 1:
            _run_parallel(runs, jobs, task, steps, lr, backend, measure_at, bar, done, n_steps)
        else:
            for seed, rec in runs:
                if bar is not None:
                    bar.set_postfix_str(label(seed, rec))
                done(seed, rec, run_recipe(rec, task, steps=steps, seed=int(seed), lr=lr,
                                           progress=bar.update if bar is not None else None,
                                           backend=backend, measure_at=measure_at))
    finally:
        if bar is not None:
            bar.close()
    return {seed: {rec.name: results[seed][rec.name] for rec in recs} for seed in seeds}


def _run_parallel(runs, jobs, task, steps, lr, backend, measure_at, bar, done, n_steps) -> None:
    """The runs in ``jobs`` spawned worker processes; the bar advances a run at a time."""
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor, as_completed

    be = getattr(backend, "name", backend)  # a backend by name: its object does not cross processes
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = str(max(1, cores // jobs))
    names = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
    # fpsim's own products run on the pinned count in every process (the bits depend on it); the
    # BLAS pools are sized so that the workers do not oversubscribe the cores between them
    env = {"FPSIM_BLAS_THREADS": str(state.blas_threads()), **dict.fromkeys(names, threads)}
    with state.environment(env):  # the workers inherit it when they start
        with ProcessPoolExecutor(max_workers=min(jobs, len(runs)),
                                 mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(run_recipe, rec, task, steps=steps, seed=int(seed), lr=lr, backend=be,
                                   measure_at=measure_at): (seed, rec) for seed, rec in runs}
            if bar is not None:
                bar.set_postfix_str(f"{len(runs)} runs in {min(jobs, len(runs))} processes")
            for fut in as_completed(futures):
                seed, rec = futures[fut]
                done(seed, rec, fut.result())
                if bar is not None:
                    bar.update(n_steps)
