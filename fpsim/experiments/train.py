"""The named training recipes and the reference task on which they differ.

The reference task is a small autoencoder trained on the mean squared error over EVERY output
coordinate of a full batch: 16,384 samples x 64 dimensions = 2**20 outputs.  That mean is the
honest reason its gradients are tiny: d(loss)/d(output) = 2 (y - x) / N with N = 2**20, so a
typical reconstruction error of 0.03 gives a gradient near 6e-8, and a good share of the
errors are smaller still - at or below float16's flush-to-zero threshold (2**-25 = 2.98e-8).
Dense prediction (segmentation, depth, per-pixel or per-token losses averaged over millions of
outputs) produces gradients this small in real training; typical small classifiers do not -
their gradients stay within float16's range (shared/reference/reference-task.md measured it).
As training goes on the errors shrink, and more gradients fall below the threshold: about 6% of
the activation gradients flush to zero at the first step and about half at the last.

A recipe names the formats of parameters, activations and gradients, whether the optimizer
keeps float32 master weights, and which loss scaler runs:

- ``fp32``          float32 throughout.
- ``fp16-pure``     float16 parameters, activations, gradients AND optimizer state; no cure.
- ``fp16-master``   float16 model, float32 master weights (Apex O2 without loss scaling).
- ``fp16-static``   ... plus a static loss scale (1024).
- ``fp16-dynamic``  ... plus PyTorch's dynamic GradScaler (2**16 start, growth interval 100).
- ``fp16-amp``      float32 parameters under ``autocast("float16")`` with GradScaler: PyTorch's
                    usual AMP (matmuls in float16, losses and reductions in float32).
- ``bf16-pure``     bfloat16 parameters, activations, gradients and optimizer state.
- ``bf16-master``   bfloat16 model with float32 master weights; no scaler (none is needed).

Beyond float16 (``EXTENDED_RECIPES``; ``fpsim compare --recipes ...`` runs them):

- ``fp8-delayed``     float32 parameters (the master weights); every Linear runs in fp8
                      (``fpsim.fp8``): weights and inputs cast to e4m3fn, the gradients to e5m2,
                      each with its own per-tensor scale from an amax history (Transformer
                      Engine's DelayedScaling: history 16, margin 0), saturating casts, float32
                      accumulation; activations between layers and the loss stay float32.  The
                      first step's scales come from its own amaxes (``amax_init=True``, as in
                      torchao's float8), not 1 as in TE: see ``fpsim.fp8``, "The first step".
- ``fp8-delayed-inner`` the same for the inner Linears only: the first and the last stay float32,
                      as fp8 recipes at scale commonly keep them in higher precision.
- ``fp8-current``     ``fp8-delayed`` with current scaling instead (TE's Float8CurrentScaling:
                      every cast scaled by its own amax, no history, no delay) - the control
                      for what the delay costs (not in ``EXTENDED_RECIPES``; name it).
- ``bf16-kahan``      ``bf16-pure`` with Kahan-compensated weight updates (a bfloat16
                      compensation buffer; Zamirai et al. 2020).
- ``bf16-stochastic`` ``bf16-pure`` with the updated weights rounded stochastically into
                      bfloat16 (seeded by the run's seed).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from . import fp8, nn, ops
from .data import lowrank_autoencoder
from .optim import Adam
from .tensor import HOOKS, no_grad, tensor
from .textable import text_table

__all__ = ["Recipe", "RECIPES", "get_recipe", "RunResult", "ReferenceTask", "run_recipe", "compare",
           "compare_seeds", "format_seed_table", "format_table", "DEFAULT_RECIPES", "EXTENDED_RECIPES"]


@dataclass(frozen=True)
class Recipe:
    """How one training run stores and protects its numbers."""

    name: str
    params: str  # format of the model's parameters (and so of its activations)
    master: bool = False  # float32 master weights in the optimizer
    scaler: str | None = None  # None, "static" or "dynamic"
    static_scale: float = 1024.0
    autocast: str | None = None  # run matmuls under autocast(fmt), params stay as they are
    growth_interval: int = 100
    update_rounding: str = "nearest"  # how the optimizer writes updated weights (optim.UPDATE_ROUNDINGS)
    fp8: fp8.DelayedScaling | None = None  # run the Linears in fp8 with this scaling recipe
    fp8_skip: tuple = ()  # Linears left out of fp8 (fp8.convert's skip: names, "first", "last")
    description: str = ""

    @property
    def activations(self) -> str:
        return self.autocast or self.params

    @property
    def gradients(self) -> str:
        """Format of the gradients flowing between layers (fp8: cast to the backward format
        inside each Linear; they flow between layers in float32)."""
        return self.activations


RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe("fp32", "float32", description="float32 throughout"),
    Recipe("fp16-pure", "float16", description="float16 weights, activations, gradients and Adam state"),
    Recipe("fp16-master", "float16", master=True, description="float16 model + float32 master weights"),
    Recipe("fp16-static", "float16", master=True, scaler="static",
           description="float16 model + float32 masters + static loss scale 1024"),
    Recipe("fp16-dynamic", "float16", master=True, scaler="dynamic",
           description="float16 model + float32 masters + dynamic GradScaler"),
    Recipe("fp16-amp", "float32", scaler="dynamic", autocast="float16",
           description="float32 params, autocast float16 matmuls, GradScaler (PyTorch AMP)"),
    Recipe("bf16-pure", "bfloat16", description="bfloat16 weights, activations, gradients and Adam state"),
    Recipe("bf16-master", "bfloat16", master=True, description="bfloat16 model + float32 master weights"),
    Recipe("fp8-delayed", "float32", fp8=fp8.DelayedScaling(margin=0, amax_history_len=16, amax_init=True),
           description="fp8 matmuls: e4m3 weights/inputs, e5m2 gradients, delayed per-tensor scaling, "
                       "float32 masters"),
    Recipe("fp8-delayed-inner", "float32", fp8=fp8.DelayedScaling(margin=0, amax_history_len=16, amax_init=True),
           fp8_skip=("first", "last"),
           description="fp8-delayed for the inner Linears; the first and last stay float32"),
    Recipe("fp8-current", "float32", fp8=fp8.CurrentScaling(margin=0),
           description="fp8 matmuls with per-tensor current scaling (each cast scaled by its own amax)"),
    Recipe("bf16-kahan", "bfloat16", update_rounding="kahan",
           description="bfloat16 weights and Adam state, Kahan-compensated updates (bfloat16 buffer)"),
    Recipe("bf16-stochastic", "bfloat16", update_rounding="stochastic",
           description="bfloat16 weights and Adam state, stochastically rounded updates"),
)}
DEFAULT_RECIPES = ("fp32", "fp16-pure", "fp16-master", "fp16-static", "fp16-dynamic", "bf16-pure", "bf16-master")
EXTENDED_RECIPES = ("fp8-delayed", "fp8-delayed-inner", "bf16-kahan", "bf16-stochastic")


def get_recipe(name) -> Recipe:
    if isinstance(name, Recipe):
        return name
    if name not in RECIPES:
        raise ValueError(f"unknown recipe {name!r}; known: {', '.join(RECIPES)}")
    return RECIPES[name]


@dataclass(frozen=True)
class ReferenceTask:
    """The autoencoder of the module docstring: sizes, data and optimizer settings."""

    n: int = 16384
    dim: int = 64
    rank: int = 4
    hidden: tuple = (32, 8, 32)
    lr: float = 1e-2
    steps: int = 150
    data_seed: int = 0
    amplitude: float = 0.25

    def data(self) -> np.ndarray:
        return lowrank_autoencoder(self.n, self.dim, self.rank, self.data_seed, self.amplitude)

    def model(self, seed: int = 0) -> nn.Module:
        return nn.MLP([self.dim, *self.hidden, self.dim], activation="tanh", seed=seed)


@dataclass
class RunResult:
    """What one recipe did on the reference task, step by step and at the end."""

    recipe: str
    losses: list = field(default_factory=list)  # float32 loss (unscaled) before each step
    scales: list = field(default_factory=list)  # loss scale used at each step (1.0 without a scaler)
    skipped: list = field(default_factory=list)  # whether the optimizer step was skipped
    act_grad_flushed: dict = field(default_factory=dict)  # step -> fraction of activation gradients lost
    weight_grad_flushed: dict = field(default_factory=dict)  # step -> fraction of weight-gradient entries lost
    stalled: dict = field(default_factory=dict)  # step -> fraction of parameter entries the update left unchanged
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


class _FlushCounter:
    """A rounding hook: of the backward gradients float32 had non-zero, how many became 0."""

    def __init__(self):
        self.act = [0, 0]
        self.weight = [0, 0]

    def __call__(self, op, direction, scope, target, fmt, exact32, stored):
        if direction != "backward" or fmt.name == "float32" or op == "accumulate":
            return
        nz = exact32 != 0
        n_nz = int(nz.sum())
        if not n_nz:
            return
        lost = int((nz & (stored == 0)).sum())
        bucket = self.weight if target in ("weight", "bias") else self.act
        bucket[0] += lost
        bucket[1] += n_nz


def _make_scaler(recipe: Recipe):
    if recipe.scaler is None:
        return None
    from .amp import GradScaler, StaticScaler

    if recipe.scaler == "static":
        return StaticScaler(recipe.static_scale)
    return GradScaler(init_scale=2.0**16, growth_interval=recipe.growth_interval)


def run_recipe(recipe="fp32", task: ReferenceTask | None = None, *, steps: int | None = None, seed: int = 0,
               lr: float | None = None, measure_at=(0, -1), progress=None, backend=None) -> RunResult:
    """Train the reference task under ``recipe`` (Adam, full batch) and measure what happened.

    ``measure_at`` lists the steps (negative counts from the end) at which the fraction of
    backward gradients flushed to zero is measured; ``progress`` is called with no arguments
    after every step (tqdm's ``update``).
    """
    r = get_recipe(recipe)
    task = task or ReferenceTask()
    steps = task.steps if steps is None else int(steps)
    lr = task.lr if lr is None else lr
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if not (isinstance(lr, int | float) and lr > 0 and math.isfinite(lr)):
        raise ValueError(f"learning rate must be a finite number > 0, got {lr!r}")
    measure = {s % steps for s in measure_at}

    x_np = task.data()
    model = task.model(seed)
    if backend is not None:
        model.to(backend=backend)
    model.to(r.params)
    scaling = fp8.convert(model, r.fp8, skip=r.fp8_skip) if r.fp8 is not None else None  # -> fp8.Linear
    x = tensor(x_np, r.params, backend=backend)  # the input, rounded into the model's format
    target = tensor(x_np, "float32", backend=backend)  # the loss compares against exact data
    opt = Adam(model.parameters(), lr=lr, master_weights=r.master, update_rounding=r.update_rounding, seed=seed)
    scaler = _make_scaler(r)
    start = [p.f32().copy() for p in opt.master_params()]
    out = RunResult(r.name)
    t0 = time.perf_counter()
    for step in range(steps):
        counter = _FlushCounter() if step in measure else None
        if counter is not None:
            HOOKS.append(counter)
        try:
            opt.zero_grad()
            if r.autocast:
                from .amp import autocast

                with autocast(r.autocast):
                    pred = model(x)
            else:
                pred = model(x)
            loss = ops.mse_loss(pred.to("float32"), target)  # losses run in float32 (autocast policy)
            scale = scaler.get_scale() if scaler is not None else 1.0
            (scaler.scale(loss) if scaler is not None else loss).backward()
        finally:
            if counter is not None:
                HOOKS.remove(counter)
        lval = loss.item()
        out.losses.append(lval)
        out.scales.append(float(scale))
        if counter is not None:
            out.act_grad_flushed[step] = counter.act[0] / counter.act[1] if counter.act[1] else 0.0
            out.weight_grad_flushed[step] = counter.weight[0] / counter.weight[1] if counter.weight[1] else 0.0
        before = [p.f32().copy() for p in opt.master_params()] if step in measure else None
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
            out.skipped.append(scaler.last_step_skipped(opt))
        else:
            opt.step()
            out.skipped.append(False)
        if scaling is not None:  # delayed scaling: this step's amaxes set the next step's scales
            scaling.update()
        if before is not None:
            same = sum(int((a == p.f32()).sum()) for a, p in zip(before, opt.master_params()))
            out.stalled[step] = same / sum(a.size for a in before)
        if progress is not None:
            progress()
        out.failure = _diagnose(model, opt, step, lval)
        if out.failure:  # the run is dead: say where, and stop spending time on NaNs
            if progress is not None:
                for _ in range(steps - step - 1):
                    progress()
            break
    out.seconds = time.perf_counter() - t0
    if scaling is not None:
        out.fp8 = scaling.summary()
    with no_grad():
        final = [p.f32() for p in opt.master_params()]
        changed = sum(int((a != b).sum()) for a, b in zip(start, final))
        total = sum(a.size for a in start)
        out.frozen_fraction = 1 - changed / total
        pred = x.backend.to_numpy(model(x).f32()).astype(np.float64)  # to the host: x_np is a numpy array
        err = float(((pred - x_np) ** 2).mean())
        out.r2 = 1 - err / float(x_np.astype(np.float64).var())
    return out


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
            lr: float | None = None, progress: bool = True, backend=None, measure_at=(0, -1)) -> dict[str, RunResult]:
    """Run every recipe on the same task, seed and initial weights; results by recipe name.
    ``measure_at``: the steps at which flushed gradients and stalled updates are counted
    (:func:`run_recipe`)."""
    return compare_seeds(recipes, [seed], task, steps=steps, lr=lr, progress=progress, backend=backend,
                         measure_at=measure_at)[seed]


def compare_seeds(recipes=DEFAULT_RECIPES, seeds=(0, 1, 2, 3), task: ReferenceTask | None = None, *,
                  steps: int | None = None, lr: float | None = None, progress: bool = True,
                  backend=None, measure_at=(0, -1)) -> dict[int, dict[str, RunResult]]:
    """:func:`compare` once per seed of the initial weights (the data stay the same): results
    by seed, then by recipe.  One seed's ratio to fp32 can mislead - fp8-delayed is 1.097x at
    seed 0 and 1.116x at seed 5 - so :func:`format_seed_table` shows every seed and the mean."""
    recs = [get_recipe(r) for r in recipes]  # names or Recipe objects (your own recipes too)
    if not recs:
        raise ValueError("recipes: give at least one recipe")
    names = [r.name for r in recs]
    if len(set(names)) != len(names):
        raise ValueError(f"recipes: each name once, got {', '.join(names)}")
    seeds = list(seeds)
    if not seeds:
        raise ValueError("seeds: give at least one seed")
    bad = [s for s in seeds if isinstance(s, bool) or not isinstance(s, int | np.integer)]
    if bad or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct integers, got {seeds!r}")
    task = task or ReferenceTask()
    n_steps = task.steps if steps is None else steps
    bar = None
    if progress:
        from tqdm.auto import tqdm

        # disable=None: a bar on a terminal; elsewhere (CI, pipes) one line per finished recipe
        bar = tqdm(total=n_steps * len(names) * len(seeds), desc="fpsim compare", unit="step", leave=False,
                   disable=None)
    results: dict[int, dict[str, RunResult]] = {}
    try:
        for seed in seeds:
            results[seed] = {}
            for rec in recs:
                name = rec.name
                label = name if len(seeds) == 1 else f"{name}, seed {seed}"
                if bar is not None:
                    bar.set_postfix_str(label)
                results[seed][name] = r = run_recipe(rec, task, steps=steps, seed=int(seed), lr=lr,
                                                     progress=bar.update if bar is not None else None,
                                                     backend=backend, measure_at=measure_at)
                if bar is not None and bar.disable:
                    print(f"fpsim compare: {label} done in {r.seconds:.1f}s", file=sys.stderr, flush=True)
    finally:
        if bar is not None:
            bar.close()
    return results


def format_seed_table(by_seed: dict[int, dict[str, RunResult]], baseline: str = "fp32") -> str:
    """One row per recipe: its final loss divided by the baseline's from the same seed, for
    every seed, then the mean and the range of those ratios (``fpsim compare --seeds``)."""
    seeds = list(by_seed)
    names = list(by_seed[seeds[0]])
    cols = ["recipe", *(f"seed {s}" for s in seeds), "mean", "min - max", "mean final loss"]
    rows = []
    for name in names:
        runs = [by_seed[s][name] for s in seeds]
        ratios = []
        cells = []
        for s, r in zip(seeds, runs):
            b = by_seed[s].get(baseline)
            if r.failure or b is None or b.failure or not math.isfinite(r.final_loss):
                cells.append("failed" if r.failure else "-")
            else:
                ratios.append(r.final_loss / b.final_loss)
                cells.append(f"{ratios[-1]:.3f}x")
        ok = [r.final_loss for r in runs if not r.failure and math.isfinite(r.final_loss)]
        rows.append([name, *cells,
                     f"{np.mean(ratios):.3f}x" if len(ratios) == len(seeds) else "-",
                     f"{min(ratios):.3f} - {max(ratios):.3f}" if len(ratios) == len(seeds) else "-",
                     f"{np.mean(ok):.4e}" if len(ok) == len(seeds) else "-"])
    out = [*text_table(cols, rows, right=range(1, len(cols))), "",
           f"Each entry: the recipe's final loss / {baseline}'s final loss from the same initial weights (the",
           "seed) and the same data.  Two recipes whose ranges overlap are not told apart by these seeds."]
    failed = [f"{n} (seed {s}): {by_seed[s][n].failure}" for s in seeds for n in names if by_seed[s][n].failure]
    if failed:
        out += ["", "failed runs:", *(f"  {f}" for f in failed)]
    return "\n".join(out)


def format_table(results: dict[str, RunResult], baseline: str = "fp32") -> str:
    """The comparison table ``fpsim compare`` prints, with a legend."""
    base = results.get(baseline)
    cols = ["recipe", "final loss", f"vs {baseline}", "R^2", "skipped", "final scale",
            "act-grad 0s first->last", "weight-grad 0s", "stalled", "time"]
    rows = []

    def pct(d, k, digits=1):
        return f"{100 * d[k]:.{digits}f}%" if k in d else "-"

    for name, r in results.items():
        first = min(r.act_grad_flushed) if r.act_grad_flushed else None
        last = max(r.act_grad_flushed) if r.act_grad_flushed else None
        ok = math.isfinite(r.final_loss)
        rel = f"{r.final_loss / base.final_loss:.3f}x" if base and ok and base.final_loss > 0 else "-"
        rows.append([
            name, f"{r.final_loss:.4e}" if ok else "diverged", rel,
            f"{r.r2:.4f}" if ok and math.isfinite(r.r2) else "-",
            str(r.steps_skipped), "per tensor" if r.fp8 else f"{r.final_scale:g}",
            f"{pct(r.act_grad_flushed, first)} -> {pct(r.act_grad_flushed, last)}" if first is not None else "-",
            pct(r.weight_grad_flushed, last, 2) if last is not None else "-",
            pct(r.stalled, max(r.stalled)) if r.stalled else "-",
            f"{r.seconds:.1f}s",
        ])
    lines = text_table(cols, rows)
    notes = [f"  {n}: {r.failure}" for n, r in results.items() if r.failure]
    if notes:
        lines += ["", "where it went wrong:", *notes]
    for name, r in results.items():
        if r.fp8:
            rec = get_recipe(name).fp8 if name in RECIPES else None
            title = f"{name}: per-tensor fp8 scales after the last step" + (f" ({rec})" if rec else "")
            lines += ["", fp8.format_scaling_table(r.fp8, title)]
    if any(r.fp8 for r in results.values()):
        lines += ["  (saturated: clamped to +-max by the saturating cast; flushed to 0: non-zero values the cast "
                  "lost; for fp8 recipes act-grad 0s counts the e5m2 gradient casts)"]
    lines += [
        "",
        "act-grad 0s: gradients flowing between layers that float32 had non-zero and the low format",
        "  flushed to 0, at the first and the last step; weight-grad 0s: the same for weight gradients.",
        "stalled: parameter entries (masters where there are masters) that the last step left unchanged -",
        "  their update was below half an ulp.  R^2: 1 - reconstruction error / variance of the data.",
    ]
    carried = [n for n in results if n in RECIPES and RECIPES[n].update_rounding != "nearest"]
    if carried:
        lines += [f"  For {', '.join(carried)} a stalled update is not lost: Kahan summation keeps it in the",
                  "  compensation buffer, and stochastic rounding moves the weight by it on average."]
    return "\n".join(lines)



