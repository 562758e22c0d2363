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

The knobs ``emb_std``, ``ln_acc``, ``attn_stable``, ``qk_scale``, ``mask_value`` and
``qk_norm`` are ``TinyGPT``'s; :data:`OVERFLOW` is the setting that makes float16 overflow in
the forward pass on purpose (its docstring says how).  ``z_loss`` adds ``z_loss * mean(log^2 Z)``
to the loss (:func:`z_loss`; Wortsman et al. use 1e-4), ``record_logits`` keeps the largest
attention logit of every step (``RunResult.metrics["attn_logits"]``), and ``bos`` starts every
sequence with a fixed token (:data:`BOS`), a place for attention to rest - an attention sink.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from dataclasses import dataclass, replace

import numpy as np

from .. import nn, ops, state
from ..checks import check_finite, check_integer, check_positive, is_real
from ..numerics.scalars import cos64
from ..ops.norm import check_acc
from ..tensor import Tensor, tensor
from .loop import train
from .recipes import get_recipe
from .result import Column, RunResult
from .task import TASKS, Task

__all__ = ["TinyGPTTask", "OVERFLOW", "TINYGPT_RECIPES", "OverflowGPTTask", "run_tinygpt", "training_step", "z_loss"]

SEP = 10  # the separator token; digits are 0-9
BOS = 11  # the fixed first token of a task with ``bos=True``
# What ``fpsim compare --task tinygpt`` runs by default.
TINYGPT_RECIPES = ("fp32", "fp16-pure", "fp16-master", "fp16-dynamic", "fp16-amp", "bf16-pure", "bf16-master",
                   "fp8-delayed")


def z_loss(logits: Tensor) -> Tensor:
    """The mean over rows of (log Z)^2, Z the softmax normaliser of each row of ``logits`` (N, C):
    the auxiliary loss that keeps the output logits from drifting (PaLM; Wortsman et al.).

    log Z = m + log(sum(exp(x - m))) with m the row maximum held as a constant (so the gradient
    of log Z is exactly the softmax); every op runs in the logits' format, so pass float32 logits
    (as the loss is computed) - each op rounds once there."""
    if not isinstance(logits, Tensor) or logits.ndim != 2:
        raise ValueError(f"z_loss: logits must be a Tensor (N, C), got {getattr(logits, 'shape', type(logits).__name__)}")
    be = logits.backend
    m = tensor(be.xp.max(logits.f32(), axis=-1, keepdims=True), logits.fmt, backend=be)
    log_z = ops.add(ops.log(ops.sum(ops.exp(ops.sub(logits, m)), axis=-1, keepdims=True)), m)
    return ops.mean(ops.mul(log_z, log_z))


@TASKS.register("tinygpt")
@dataclass(frozen=True)
class TinyGPTTask(Task):
    """Sorting ``n_digits`` digits with a ``n_layers``-layer GPT (see the module docstring):
    Adam with warm-up and cosine decay, a fresh batch every step, gradients measured at the
    first and the last step, a NonFiniteTracer throughout; a NaN loss alone does not end a run
    (a loss scaler skips that step), a non-finite parameter does."""

    measure_at = (0, -1)
    loss_kills = False
    trace_nonfinite = True
    summary = "a 2-layer GPT sorting 16 digits"
    default_recipes = TINYGPT_RECIPES
    figure_name = "compare_tinygpt_loss.png"
    table_columns = (Column("accuracy", "answer acc", "percent"),
                     Column("nonfinite", "first non-finite", "nonfinite", place="end"))
    table_legend = (
        "final loss: cross-entropy on the answer tokens of the evaluation batch; answer acc: sorted digits",
        "  predicted exactly.  first non-finite: the step and op that first MADE an inf or NaN from finite",
        "  inputs (fpsim.trace_nonfinite), loss-scaler overflows aside - those are normal and skipped.",
    )

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
    qk_norm: bool = False
    z_loss: float = 0.0
    record_logits: bool = False
    bos: bool = False

    def __post_init__(self):
        """Every field checked now, naming it: a negative warm-up would train with a negative
        learning rate, a fractional step count would be cut short."""
        for name in ("n_digits", "batch", "steps", "d_model", "n_layers", "n_heads", "mlp_ratio", "eval_size"):
            check_integer(getattr(self, name), f"TinyGPTTask: {name}", 1)
        check_integer(self.warmup, "TinyGPTTask: warmup", 0)
        check_integer(self.data_seed, "TinyGPTTask: data_seed", 0)
        check_positive(self.lr, "TinyGPTTask: lr")
        check_finite(self.z_loss, "TinyGPTTask: z_loss", minimum=0)
        for name in ("record_logits", "bos"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"TinyGPTTask: {name} must be True or False, got {getattr(self, name)!r}")
        self._check_model_knobs()

    def _check_model_knobs(self) -> None:
        """The model's knobs, checked as ``nn.TinyGPT`` checks them, before any run starts - without
        building one (a task is a few settings; making it draws no weights)."""
        if self.d_model % self.n_heads:
            raise ValueError(f"TinyGPTTask: n_heads {self.n_heads} does not divide d_model {self.d_model}")
        check_finite(self.emb_std, "TinyGPTTask: emb_std", minimum=0)
        if self.qk_scale is not None:
            check_finite(self.qk_scale, "TinyGPTTask: qk_scale")
        if self.mask_value is not None and not (is_real(self.mask_value) and not math.isnan(self.mask_value)):
            raise ValueError(f"TinyGPTTask: mask_value must be a number (e.g. finfo(float16).min or -inf) or None, "
                             f"got {self.mask_value!r}")
        for name in ("attn_stable", "qk_norm"):
            if not isinstance(getattr(self, name), bool | np.bool_):
                raise TypeError(f"TinyGPTTask: {name} must be True or False, got {getattr(self, name)!r}")
        check_acc(self.ln_acc, "TinyGPTTask", "ln_acc")

    @property
    def vocab_size(self) -> int:
        return BOS + 1 if self.bos else SEP + 1

    @property
    def context(self) -> int:
        return 2 * self.n_digits + int(self.bos)

    def sequences(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` sequences (n, 2 * n_digits + 1): digits, separator, the digits sorted; with
        ``bos``, :data:`BOS` in front of each (the digits drawn are the same)."""
        x = rng.integers(0, 10, (n, self.n_digits))
        seq = np.concatenate([x, np.full((n, 1), SEP), np.sort(x, axis=1)], axis=1)
        return np.concatenate([np.full((n, 1), BOS), seq], axis=1) if self.bos else seq

    def batch_at(self, step: int) -> np.ndarray:
        return self.sequences(self.batch, np.random.default_rng([self.data_seed, step]))

    def eval_batch(self) -> np.ndarray:
        return self.sequences(self.eval_size, np.random.default_rng([self.data_seed, 1 << 30]))

    def model(self, seed: int = 0) -> nn.TinyGPT:
        """A fresh float32 TinyGPT; its attentions' largest-logit probe on if ``record_logits``."""
        m = nn.TinyGPT(self.vocab_size, self.context, self.d_model, self.n_layers, self.n_heads, seed=seed,
                       mlp_ratio=self.mlp_ratio, emb_std=self.emb_std, ln_acc=self.ln_acc, qk_scale=self.qk_scale,
                       attn_stable=self.attn_stable, mask_value=self.mask_value, qk_norm=self.qk_norm)
        if self.record_logits:
            m.record_logits()
        return m

    def logits_and_targets(self, model, seq: np.ndarray):
        """The answer positions' logits (N, vocab) and their targets (N,)."""
        n = self.n_digits + int(self.bos)
        logits = model(seq[:, :-1])[:, n:]  # position n + i predicts sorted digit i
        return logits.reshape(-1, self.vocab_size), seq[:, n + 1:].reshape(-1)

    def batches(self, recipe, backend):
        """The batch of each step: :meth:`batch_at` (token ids, the same for every recipe)."""
        return self.batch_at

    def loss(self, model, seq: np.ndarray, recipe=None):
        """Cross-entropy on the answer tokens, in float32 (the logits widened first), plus
        ``z_loss`` times :func:`z_loss` of the same float32 logits when it is not 0; the whole
        forward pass under the recipe's autocast (``recipe.forward_context()``)."""
        with recipe.forward_context() if recipe is not None else contextlib.nullcontext():
            logits, target = self.logits_and_targets(model, seq)
            logits = logits.to("float32")
            loss = nn.cross_entropy(logits, target)
            return ops.add(loss, ops.mul(z_loss(logits), float(self.z_loss))) if self.z_loss else loss

    def metrics(self, model, recipe) -> dict:
        """``eval_loss`` and ``accuracy`` of the final model on the evaluation batch; with
        ``record_logits``, ``attn_logits``: the largest |attention logit| of each training step."""
        out = {"attn_logits": model.max_logits_recorded()} if self.record_logits else {}
        eval_loss, accuracy = self.evaluate(model, recipe.autocast)
        return {**out, "eval_loss": eval_loss, "accuracy": accuracy}

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
        """Linear warm-up over ``warmup`` steps, then a cosine decay to 0 at ``steps`` (the cosine
        correctly rounded: :func:`fpsim.numerics.scalars.cos64`)."""
        f = 0.5 * (1 + cos64(math.pi * step / steps))
        return lr * f * min(1.0, (step + 1) / self.warmup) if self.warmup else lr * f

    def title(self) -> str:
        return f"tiny GPT sorting {self.n_digits} digits"

    def describe_run(self, steps: int, lr: float) -> str:
        """:meth:`describe` and the steps (the learning rate is the schedule's peak, in it)."""
        return f"{self.describe()}; {steps} steps"

    def describe(self) -> str:
        """The task in one line: sizes, optimizer, and every knob set away from TinyGPTTask's default."""
        knobs = [f"{k}={getattr(self, k)!r}" for k in ("emb_std", "ln_acc", "attn_stable", "qk_scale", "mask_value",
                                                       "qk_norm", "z_loss", "bos")
                 if getattr(self, k) != getattr(TinyGPTTask, k)]
        return (f"tiny GPT: sort {self.n_digits} digits; {self.n_layers} layers, d_model {self.d_model}, "
                f"{self.n_heads} heads, context {self.context}, vocab {self.vocab_size}; batch {self.batch}, "
                f"Adam lr {self.lr:g} (warm-up {self.warmup}, cosine)" + (f"; {', '.join(knobs)}" if knobs else ""))


# The forward-overflow setting: attention whose softmax exponentiates the scores without
# subtracting the row maximum (``attn_stable=False``), as hand-written attention code does.
# exp(x) passes float16's max at x = 11.09; the scores pass that once training sharpens the
# attention (about step 30 in float32), so in float16 exp returns inf, the row becomes
# inf / inf = NaN, and so does the loss.  Under autocast exp and sum run in float32 (fine up to
# x = 88.7); bfloat16's range holds exp(88) as well.
OVERFLOW = TinyGPTTask(attn_stable=False)


@TASKS.register("tinygpt-overflow")
@dataclass(frozen=True)
class OverflowGPTTask(TinyGPTTask):
    """The tiny GPT in the forward-overflow setting (:data:`OVERFLOW`: attention without the
    row maximum subtracted), as a task of its own: ``fpsim compare --task tinygpt-overflow``, or
    ``--task tinygpt --provoke-overflow``."""

    summary = "the tiny GPT with a naive softmax, so float16 overflows in the forward pass (tinygpt --provoke-overflow)"
    attn_stable: bool = False


def training_step(recipe="fp32", task: TinyGPTTask | None = None, *, step: int = 0, seed: int = 0, backend=None):
    """A callable doing one training step of :func:`~fpsim.experiments.train` on the tiny GPT (the same model, Adam, loss
    and loss scaler: ``Recipe.prepare``, ``Run.step``) on the batch of ``step`` at that step's
    learning rate; each call trains on it again.  ``fpsim bench`` times it; it returns (loss,
    scale, skipped)."""
    task = task or TinyGPTTask()
    r = get_recipe(recipe)
    run = r.prepare(task.model(seed), lr=task.lr, seed=seed, backend=backend)
    run.opt.lr = task.lr_at(step, task.steps, task.lr)
    seq = task.batch_at(step)

    def one_step():
        s = run.step(lambda model: task.loss(model, seq, r))
        return s.loss.item(), s.scale, s.skipped

    return one_step


def run_tinygpt(recipe="fp32", task: TinyGPTTask | None = None, *, steps: int | None = None, seed: int = 0,
                lr: float | None = None, measure_at=(0, -1), progress=None, backend=None) -> RunResult:
    """Deprecated (removed 2027-06-01): ``train(task, recipe, seed, ...)`` with a
    :class:`TinyGPTTask` (``TinyGPTTask()`` here by default) - the one way to train once."""
    warnings.warn("fpsim.experiments.run_tinygpt is deprecated (removed 2027-06-01): use "
                  "train(TinyGPTTask(...), recipe, seed, ...)", DeprecationWarning, stacklevel=2)
    return train(task or TinyGPTTask(), recipe, seed, steps=steps, lr=lr, measure_at=measure_at,
                 progress=progress, backend=backend)


def __getattr__(name: str):
    """``TinyGPTResult``, the old name of :class:`RunResult`: deprecated (removed 2027-06-01)."""
    if name == "TinyGPTResult":
        warnings.warn("TinyGPTResult is deprecated (removed 2027-06-01): a tiny GPT's run is a RunResult",
                      DeprecationWarning, stacklevel=2)
        return RunResult
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def with_overrides(task: TinyGPTTask, **kw) -> TinyGPTTask:
    """``task`` with some fields changed (None values ignored)."""
    return replace(task, **{k: v for k, v in kw.items() if v is not None})
