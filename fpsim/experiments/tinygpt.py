"""The tiny-transformer task: a 2-layer GPT learns to sort digits, and the recipes run on it.

Each sequence is ``n_digits`` random digits, a separator, and the same digits sorted::

    3 1 4 1 5 9 2 6 5 3 5 8 9 7 9 3 | 1 1 2 3 3 3 4 5 5 5 6 7 8 9 9 9

The model reads the sequence without its last token (``2 * n_digits`` positions: its context)
and is trained with cross-entropy on the answer tokens only - the sorted digits, each predicted
from everything before it.  Accuracy is the share of answer tokens predicted exactly (argmax),
on a fixed evaluation batch.  Every batch is drawn from a generator seeded by (``data_seed``,
step), so every recipe sees the same data in the same order, and nothing is downloaded.

The loss is computed in float32 (the logits are cast first), as autocast does for every loss.
Adam with a linear warm-up and a cosine decay to 0.

The knobs ``emb_std``, ``ln_acc``, ``attn_stable``, ``qk_scale`` and ``mask_value`` are
``TinyGPT``'s; :data:`OVERFLOW` is the setting that makes float16 overflow in the forward pass
on purpose (its docstring says how).
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field, replace

import numpy as np

from .. import fp8, lowp, nn, state
from ..optim import Adam
from ..trace import FORWARD, NonFiniteTracer
from .recipes import Recipe, get_recipe
from .train import FlushCounter, RunResult, _make_scaler, measured_steps, optimizer_step

__all__ = ["TinyGPTTask", "TinyGPTResult", "OVERFLOW", "TINYGPT_RECIPES", "run_tinygpt", "training_step"]

SEP = 10  # the separator token; digits are 0-9
# What ``fpsim compare --task tinygpt`` runs by default.
TINYGPT_RECIPES = ("fp32", "fp16-pure", "fp16-master", "fp16-dynamic", "fp16-amp", "bf16-pure", "bf16-master",
                   "fp8-delayed")


@dataclass
class TinyGPTResult(RunResult):
    """A :class:`~fpsim.experiments.RunResult` with what the transformer task adds: answer
    accuracy and loss on the evaluation batch, and the first op that made an inf / NaN."""

    accuracy: float = float("nan")  # share of answer tokens predicted exactly, final model
    eval_loss: float = float("nan")  # cross-entropy on the evaluation batch, final model
    nonfinite: object = None  # fpsim.trace.NonFinite: the first op that made inf/NaN (scaler overflows aside)
    scaler_overflows: int = 0  # backward passes where the loss-scaled gradients overflowed (normal)
    notes: list = field(default_factory=list)

    @property
    def final_loss(self) -> float:
        return float("nan") if self.failure else self.eval_loss


@dataclass(frozen=True)
class TinyGPTTask:
    """Sorting ``n_digits`` digits with a ``n_layers``-layer GPT (see the module docstring)."""

    n_digits: int = 16
    batch: int = 32
    steps: int = 250
    lr: float = 5e-3
    warmup: int = 20
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    mlp_ratio: int = 2
    data_seed: int = 0
    eval_size: int = 256
    emb_std: float = 1.0
    ln_acc: str | None = None
    attn_stable: bool = True
    qk_scale: float | None = None
    mask_value: float | None = None

    @property
    def vocab_size(self) -> int:
        return SEP + 1

    @property
    def context(self) -> int:
        return 2 * self.n_digits

    def sequences(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` sequences (n, 2 * n_digits + 1): digits, separator, the digits sorted."""
        x = rng.integers(0, 10, (n, self.n_digits))
        return np.concatenate([x, np.full((n, 1), SEP), np.sort(x, axis=1)], axis=1)

    def batch_at(self, step: int) -> np.ndarray:
        return self.sequences(self.batch, np.random.default_rng([self.data_seed, step]))

    def eval_batch(self) -> np.ndarray:
        return self.sequences(self.eval_size, np.random.default_rng([self.data_seed, 1 << 30]))

    def model(self, seed: int = 0) -> nn.TinyGPT:
        return nn.TinyGPT(self.vocab_size, self.context, self.d_model, self.n_layers, self.n_heads, seed=seed,
                          mlp_ratio=self.mlp_ratio, emb_std=self.emb_std, ln_acc=self.ln_acc, qk_scale=self.qk_scale,
                          attn_stable=self.attn_stable, mask_value=self.mask_value)

    def logits_and_targets(self, model, seq: np.ndarray):
        """The answer positions' logits (N, vocab) and their targets (N,)."""
        n = self.n_digits
        logits = model(seq[:, :-1])[:, n:]  # position n + i predicts sorted digit i
        return logits.reshape(-1, self.vocab_size), seq[:, n + 1:].reshape(-1)

    def loss(self, model, seq: np.ndarray, autocast: str | None = None):
        """Cross-entropy on the answer tokens, in float32 (under ``autocast`` if given)."""
        from ..amp import autocast as _autocast

        with _autocast(autocast) if autocast else contextlib.nullcontext():
            logits, target = self.logits_and_targets(model, seq)
            return nn.cross_entropy(logits.to("float32"), target)

    def evaluate(self, model, autocast: str | None = None) -> tuple[float, float]:
        """(cross-entropy, answer-token accuracy) of ``model`` on the evaluation batch."""
        from ..amp import autocast as _autocast

        seq = self.eval_batch()
        with state.no_grad(), _autocast(autocast) if autocast else contextlib.nullcontext():
            logits, target = self.logits_and_targets(model, seq)
            loss = nn.cross_entropy(logits.to("float32"), target).item()
            pred = np.asarray(logits.backend.to_numpy(logits.f32())).argmax(axis=-1)
        return loss, float((pred == np.asarray(target)).mean())

    def lr_at(self, step: int, steps: int, lr: float) -> float:
        """Linear warm-up over ``warmup`` steps, then a cosine decay to 0 at ``steps``."""
        f = 0.5 * (1 + math.cos(math.pi * step / steps))
        return lr * f * min(1.0, (step + 1) / self.warmup) if self.warmup else lr * f

    def describe(self) -> str:
        knobs = [f"{k}={getattr(self, k)!r}" for k in ("emb_std", "ln_acc", "attn_stable", "qk_scale", "mask_value")
                 if getattr(self, k) != getattr(type(self), k)]
        return (f"tiny GPT: sort {self.n_digits} digits; {self.n_layers} layers, d_model {self.d_model}, "
                f"{self.n_heads} heads, context {self.context}, vocab {self.vocab_size}; batch {self.batch}, "
                f"Adam lr {self.lr:g} (warm-up {self.warmup}, cosine)" + (f"; {', '.join(knobs)}" if knobs else ""))

    def run_recipe(self, recipe, *, steps=None, seed=0, lr=None, measure_at="all", progress=None,
                   backend=None) -> TinyGPTResult:
        """Train under ``recipe``; see :func:`run_tinygpt`."""
        return run_tinygpt(recipe, self, steps=steps, seed=seed, lr=lr, measure_at=measure_at, progress=progress,
                           backend=backend)


# The forward-overflow setting: attention whose softmax exponentiates the scores without
# subtracting the row maximum (``attn_stable=False``), as hand-written attention code does.
# exp(x) passes float16's max at x = 11.09; the scores pass that once training sharpens the
# attention (about step 30 in float32), so in float16 exp returns inf, the row becomes
# inf / inf = NaN, and so does the loss.  Under autocast exp and sum run in float32 (fine up to
# x = 88.7); bfloat16's range holds exp(88) as well.
OVERFLOW = TinyGPTTask(attn_stable=False)


@dataclass
class _GPTRun:
    recipe: Recipe
    task: TinyGPTTask
    model: object
    opt: Adam
    scaler: object
    scaling: object  # fp8 recipes: the ScalingGroup

    @classmethod
    def build(cls, r: Recipe, task: TinyGPTTask, seed: int, lr: float, backend) -> _GPTRun:
        model = task.model(seed)
        if backend is not None:
            model.to(backend=backend)
        model.to(r.params)
        scaling = fp8.convert(model, r.fp8, skip=r.fp8_skip) if r.fp8 is not None else None
        if r.block is not None:
            lowp.convert_blocks(model, r.block, skip=r.block_skip)  # the block recipes: every nn.Linear
        opt = Adam(model.parameters(), lr=lr, master_weights=r.master, update_rounding=r.update_rounding, seed=seed)
        return cls(r, task, model, opt, _make_scaler(r), scaling)

    def step(self, seq) -> tuple[float, float, bool]:
        """One training step: (loss, loss scale used, whether the update was skipped)."""
        self.opt.zero_grad()
        loss = self.task.loss(self.model, seq, self.recipe.autocast)
        scale = self.scaler.get_scale() if self.scaler is not None else 1.0
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
        skipped = optimizer_step(self.opt, self.scaler, self.scaling)
        return loss.item(), float(scale), skipped


def training_step(recipe="fp32", task: TinyGPTTask | None = None, *, step: int = 0, seed: int = 0, backend=None):
    """A callable doing one training step of :func:`run_tinygpt` (the same model, Adam, loss
    and loss scaler, built the same way) on the batch of ``step`` at that step's learning rate;
    each call trains on it again.  ``fpsim bench`` times it; it returns (loss, scale, skipped)."""
    task = task or TinyGPTTask()
    run = _GPTRun.build(get_recipe(recipe), task, seed, task.lr, backend)
    run.opt.lr = task.lr_at(step, task.steps, task.lr)
    seq = task.batch_at(step)
    return lambda: run.step(seq)


def _dead(model) -> list[str]:
    """Names of the parameters holding inf / NaN."""
    return [n for n, p in model.named_parameters() if not bool(p.backend.xp.isfinite(p.f32()).all())]


def run_tinygpt(recipe="fp32", task: TinyGPTTask | None = None, *, steps: int | None = None, seed: int = 0,
                lr: float | None = None, measure_at=(0, -1), progress=None, backend=None) -> TinyGPTResult:
    """Train the tiny GPT under ``recipe`` and measure what happened: the training loss, scale
    and skips per step, the share of backward gradients flushed to zero at ``measure_at``, the
    first op that made an inf / NaN (a :class:`~fpsim.trace.NonFiniteTracer` runs throughout),
    and the evaluation loss and answer accuracy of the final model.  Training stops when a
    parameter turns non-finite; a NaN loss alone does not stop a run with a loss scaler (it
    skips the step), which is how ``skipped`` can reach every step."""
    r = get_recipe(recipe)
    task = task or TinyGPTTask()
    steps = task.steps if steps is None else int(steps)
    lr = task.lr if lr is None else float(lr)
    if steps < 1 or not lr > 0:
        raise ValueError(f"steps must be >= 1 and the learning rate > 0, got {steps} and {lr}")
    measure = measured_steps(measure_at, steps)
    run = _GPTRun.build(r, task, seed, lr, backend)
    out = TinyGPTResult(r.name)
    tracer = NonFiniteTracer()
    t0 = time.perf_counter()
    with state.hooked(tracer), state.seeded(seed):  # stochastic rounding in the run is the seed's own
        for step in range(steps):
            tracer.set_step(step)
            run.opt.lr = task.lr_at(step, steps, lr)
            counter = FlushCounter() if step in measure else None
            with state.hooked(counter) if counter is not None else contextlib.nullcontext():
                loss, scale, skipped = run.step(task.batch_at(step))
            out.losses.append(loss)
            out.scales.append(scale)
            out.skipped.append(skipped)
            if counter is not None:
                out.act_grad_flushed[step] = FlushCounter.fraction(counter.act)
                out.weight_grad_flushed[step] = FlushCounter.fraction(counter.weight)
            if progress is not None:
                progress()
            dead = _dead(run.model)
            if dead:
                out.failure = f"step {step}: parameters {', '.join(dead[:3])} became non-finite"
                out.died_at = step
                for _ in range(steps - step - 1 if progress is not None else 0):
                    progress()
                break
    out.seconds = time.perf_counter() - t0
    out.nonfinite = tracer.first_nonfinite(include_scaler=False)
    out.scaler_overflows = tracer.counts["loss-scaler overflow"]
    if out.nonfinite is not None and out.nonfinite.kind == FORWARD and not out.failure:
        out.notes.append(f"forward overflow at step {out.nonfinite.step}; the scaler skipped "
                         f"{out.steps_skipped} of {len(out.skipped)} steps")
    if run.scaling is not None:
        out.fp8 = run.scaling.summary()
    out.eval_loss, out.accuracy = task.evaluate(run.model, r.autocast)
    return out


def with_overrides(task: TinyGPTTask, **kw) -> TinyGPTTask:
    """``task`` with some fields changed (None values ignored)."""
    return replace(task, **{k: v for k, v in kw.items() if v is not None})
