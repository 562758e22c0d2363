"""``optimizer-state-formats``: 8-bit Adam moments need dynamic (non-linear, blockwise) quantization -
linear 8-bit codes break them - while Muon's momentum works with plain linear 8-bit codes (arXiv
2509.23106); bfloat16 moments with stochastic rounding and no float32 master weights match float32
state (karpathy/llm.c#772, a pull-request thread); e4m3 with COAT's dynamic range expansion holds
Adam's moments (arXiv 2410.19313).

The miniature: the tiny GPT (sorting digits, narrowed to train in seconds) from the same initial
weights per seed, the only difference the optimizer state's format (``fpsim.optim_state``):
Adam with its two moments in float32, bfloat16 (nearest, stochastic), int8 linear, int8 dynamic
(bitsandbytes' map, blocks of 2048) and e4m3-COAT; Muon (``fpsim.optim.Muon``, for the hidden
matrices; Adam, with float32 state so the arm isolates Muon's buffer, for embeddings, head, biases
and norms; Moonshot's
``match_rms_adamw`` learning-rate rule so both take the task's rate) with its momentum in float32,
int8 linear and int8 dynamic; and llm.c's setting - bfloat16 weights without a float32 master,
stochastically rounded weight updates and bfloat16-SR moments.  Reported: each arm's final
evaluation loss over its optimizer's float32-state run (seed means; a run whose loss went
non-finite counts as inf), and the bytes of optimizer state per parameter.

At the source's scale: 2509.23106 pre-trains up to 2.7B parameters Chinchilla-optimally (about 54B
tokens, some 10^21 FLOPs per arm, GPU-weeks), llm.c's thread a 124M GPT-2 for 74 steps; in fpsim's
engine (roughly 10^8 float32 operations a second on a core) even the 124M model's 74 steps would take
days, so the miniature asks the mechanism - does the state format move the loss? - not the number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...optim import Adam, Muon
from ...optim_state import get_state_format
from ..recipes import Recipe
from ..run import Run
from ..tinygpt import TinyGPTTask
from .base import FINDINGS, Finding, Sweep
from .runs import metric, seed_mean

NAME = "optimizer-state-formats"
ADAM_FORMATS = ("float32", "bfloat16", "bfloat16-sr", "int8-linear", "int8-dynamic", "e4m3-coat")
MUON_FORMATS = ("float32", "int8-linear", "int8-dynamic")
MATRIX_SKIP = ("tok_emb", "pos_emb", "head")  # the matrices Muon leaves to Adam, as its authors do
TOLERANCE = 1.05  # "matches": within 5% of the float32-state loss


class MuonWithAdam:
    """Muon for the hidden matrices and Adam for every other parameter, stepped as one optimizer
    (what ``Run`` and the loop use: ``params``, ``master``, ``master_params``, ``zero_grad``,
    ``step``, ``lr`` - set on both - and ``state``)."""

    def __init__(self, muon: Muon, adam: Adam):
        self.parts = (muon, adam)
        self.params = muon.params + adam.params
        self.master = None
        self.step_count = 0

    @property
    def lr(self) -> float:
        return self.parts[1].lr

    @lr.setter
    def lr(self, value: float) -> None:
        for o in self.parts:
            o.lr = value

    @property
    def state(self) -> list:
        return self.parts[0].state + self.parts[1].state

    def master_params(self) -> list:
        return self.params

    def zero_grad(self) -> None:
        for o in self.parts:
            o.zero_grad()

    def step(self) -> None:
        self.step_count += 1
        for o in self.parts:
            o.step()


def _is_matrix(name: str, p) -> bool:
    return p.ndim == 2 and not name.startswith(MATRIX_SKIP)


@dataclass(frozen=True)
class StateRecipe(Recipe):
    """A recipe whose optimizer keeps its state in ``state_format``: Adam, or Muon with Adam
    (:class:`MuonWithAdam`; the Adam part in float32 state) when ``optimizer_kind`` is ``"muon"``."""

    optimizer_kind: str = "adam"
    state_format: str = "float32"

    def prepare(self, model, **kw) -> Run:
        run = super().prepare(model, **kw)
        lr, seed = kw["lr"], kw.get("seed", 0)
        common = dict(update_rounding=self.update_rounding, seed=seed, state_format=self.state_format)
        if self.optimizer_kind == "adam":
            run.opt = Adam(model.parameters(), lr=lr, **common)
            return run
        named = list(model.named_parameters())
        muon = Muon([p for n, p in named if _is_matrix(n, p)], lr=lr, weight_decay=0.0,
                    adjust_lr_fn="match_rms_adamw", **common)
        # the rest keeps float32 state: the arm asks about Muon's momentum alone
        adam = Adam([p for n, p in named if not _is_matrix(n, p)], lr=lr, **{**common, "state_format": "float32"})
        run.opt = MuonWithAdam(muon, adam)
        return run


def _arm(kind: str, fmt: str) -> str:
    return f"{kind}-{fmt}"


LLMC = "llmc-bf16"
RECIPES = tuple(StateRecipe(_arm("adam", f), "float32", state_format=f, description=f"Adam, moments in {f}")
                for f in ADAM_FORMATS) + tuple(
    StateRecipe(_arm("muon", f), "float32", optimizer_kind="muon", state_format=f,
                description=f"Muon (+ Adam), momentum in {f}") for f in MUON_FORMATS) + (
    StateRecipe(LLMC, "bfloat16", update_rounding="stochastic", state_format="bfloat16-sr",
                description="llm.c: bfloat16 weights, no master, SR updates, bfloat16-SR moments"),)


@dataclass(frozen=True)
class StateTask(TinyGPTTask):
    """The tiny GPT, narrowed (d_model 32, 8 digits, batch 16) so ten arms over seeds train in
    seconds; a run ends only where a parameter goes non-finite (the loop's rule)."""

    trace_nonfinite = False
    n_digits: int = 8
    batch: int = 16
    d_model: int = 32
    eval_size: int = 128


SWEEP = Sweep(StateTask, RECIPES, quick_steps=40, full_steps=100)


def state_bytes_per_param(task: StateTask, kind: str, fmt: str) -> float:
    """Bytes of optimizer state per parameter of ``task``'s model: per tensor the state's codes and
    scales as :class:`~fpsim.optim_state.StateFormat` stores them (Adam two moments; Muon one buffer
    for the hidden matrices, and Adam's two, in float32, for the rest)."""
    f, f32 = get_state_format(fmt), get_state_format("float32")
    total = n = 0
    for name, p in task.model(0).named_parameters():
        if kind == "muon" and _is_matrix(name, p):
            total += f.zeros(p.shape).nbytes
        else:
            g = f32 if kind == "muon" else f
            total += g.zeros(p.shape).nbytes + g.zeros(p.shape, False).nbytes
        n += p.size
    return total / n


def _loss(r) -> float:
    v = float(metric(r, "eval_loss"))
    return v if math.isfinite(v) and r.died_at is None else math.inf


def extract(runs: dict) -> tuple[dict, dict]:
    task = runs.tasks["runs"]
    numbers, curves = {}, {}
    for rec in RECIPES:
        kind = "adam" if rec.name == LLMC else rec.optimizer_kind
        base = runs[_arm(kind, "float32")]
        ratios = [_loss(r) / _loss(b) for r, b in zip(runs[rec.name], base)]
        numbers[f"{rec.name}_ratio"] = math.inf if not all(map(math.isfinite, ratios)) else seed_mean(ratios)
        numbers[f"{rec.name}_bytes"] = state_bytes_per_param(task, kind, rec.state_format)
        curves[rec.name] = [float(v) for v in np.mean([r.losses[: min(len(x.losses) for x in runs[rec.name])]
                                                        for r in runs[rec.name]], axis=0)]
    numbers["steps"] = float(max(len(r.losses) for rs in runs.values() for r in rs))
    return numbers, {"curves": curves, "ratios": {k[:-6]: v for k, v in numbers.items() if k.endswith("_ratio")},
                     "bytes": {k[:-6]: v for k, v in numbers.items() if k.endswith("_bytes")}}


def _ok(numbers: dict, arm: str) -> bool:
    return numbers[f"{arm}_ratio"] <= TOLERANCE


def measured(numbers: dict, series: dict) -> str:
    def r(arm):
        v = numbers[f"{arm}_ratio"]
        return f"{v:.3f}x" if math.isfinite(v) else "diverged"

    return (f"final eval loss / float32 state: Adam int8 linear {r('adam-int8-linear')}, int8 dynamic "
            f"{r('adam-int8-dynamic')}, e4m3-COAT {r('adam-e4m3-coat')}, bf16-SR {r('adam-bfloat16-sr')}; Muon "
            f"int8 linear {r('muon-int8-linear')}, int8 dynamic {r('muon-int8-dynamic')}; llm.c bf16 weights + "
            f"bf16-SR moments {r(LLMC)}; state bytes/param Adam {numbers['adam-float32_bytes']:.2f} -> "
            f"{numbers['adam-int8-dynamic_bytes']:.2f}, Muon {numbers['muon-float32_bytes']:.2f} -> "
            f"{numbers['muon-int8-linear_bytes']:.2f}")


def verdict(numbers: dict) -> tuple[str, str]:
    linear_breaks = not _ok(numbers, "adam-int8-linear")
    holds = {a: _ok(numbers, a) for a in ("adam-int8-dynamic", "muon-int8-linear", LLMC)}
    if linear_breaks and all(holds.values()):
        return "reproduced", ("linear int8 breaks Adam's moments while dynamic int8 holds them, linear int8 holds "
                              "Muon's momentum, and bfloat16-SR moments without masters match float32 state")
    if not linear_breaks:
        return "not at this scale", (f"linear int8 Adam ends {numbers['adam-int8-linear_ratio']:.3f}x float32 state: "
                                     "in this many steps its second moments do not span enough decades within a "
                                     "block for linear codes to flush them")
    failed = [a for a, ok in holds.items() if not ok]
    return "partly", f"linear int8 breaks Adam, but {', '.join(failed)} also end more than 5% above float32 state"


def draw(ax, series: dict) -> None:
    """Each arm's final loss over its float32-state run (log scale, diverged runs at the top)."""
    ratios = series["ratios"]
    names = list(ratios)
    vals = [v if math.isfinite(v) else 100.0 for v in ratios.values()]
    ax.barh(names, vals, color=["C3" if v > TOLERANCE else "C0" for v in vals])
    ax.axvline(1.0, color="k", lw=0.8)
    ax.axvline(TOLERANCE, color="k", ls="--", lw=0.8, label="5% above float32 state")
    ax.set_xscale("log")
    ax.set_xlabel("final eval loss / float32 state (100 = diverged)")
    ax.set_title("optimizer state formats (tiny GPT)")
    ax.legend(fontsize=8)


FINDING = FINDINGS.register(Finding(
    NAME, "8-bit Adam moments need dynamic blockwise quantization (linear 8-bit breaks them), 8-bit Muon "
          "momentum works with plain linear quantization, and bfloat16 moments with stochastic rounding and no "
          "float32 master weights match float32 state.",
    "arXiv 2509.23106; karpathy/llm.c#772 (a pull-request thread); arXiv 2410.19313 (COAT)",
    "8-bit Muon 'achieves parity with Muon' with 'a simple linear quantization scheme, bypassing the complex "
    "dynamic scaling required for quantized AdamW', up to 62% less optimizer state (2.7B); llm.c: bf16 m/v, no "
    "master weights, val loss 3.499682 vs 3.506536 for fp32 m/v + masters (GPT-2, 74 steps); COAT: e4m3 "
    "moments with range expansion nearly lossless", (25.0, 135.0), order=145, verdict=verdict, measured=measured,
    sweep=SWEEP, extract=extract, figure=draw, seeds=(0, 1, 2)))
