"""``batch-invariance``: greedy (temperature-0) decoding gives different completions of the same
prompt depending on how many other requests share its batch, because the kernels' reduction
split follows the batch size; with batch-invariant kernels every run agrees (Thinking Machines,
"Defeating Nondeterminism in LLM Inference", 2025 - a blog post; code thinking-machines-lab/
batch_invariant_ops).

The miniature: a tiny GPT (vocabulary 128, context 64, width 64, 2 layers, 4 heads) with untrained
weights - a trained sorting model is sure of every token, while an LLM's text meets near-ties
all the time, which an untrained model's flat logits stand in for - rounded into float32,
bfloat16 or float16, every GEMM run split-K on :class:`fpsim.experiments.splitk.SplitKBackend`
with its partial sums held in that format.  Prompts of 8 random tokens are decoded greedily
(argmax of the float32 logits, the first on a tie) through the KV cache, once alone (batch 1)
and once in batches of 8; with the split following the batch (``policy="batch"``: more chunks
when fewer rows) and with a fixed split (``policy="fixed"``: chunks of 16, the batch-invariant
rule).  Reported per format and policy: the share of prompts whose two completions differ and
the first token where they part.  fpsim's own matmul (an exact sum, rounded once) is batch
invariant by definition - the same-bits promise - so the default engine would show 0% too.

At the source's scale (Qwen3-235B, 1,000 completions of 1,000 tokens: about 5e17 floating-point
operations) this engine on two cores would need centuries; a GPU node does it in minutes.
"""

from __future__ import annotations

import numpy as np

from ... import nn, state
from ...numerics import mean64
from ..splitk import POLICIES, SplitKBackend
from .base import FINDINGS, Finding, pct, say

NAME = "batch-invariance"
FORMATS = ("float32", "bfloat16", "float16")
BATCH = 8
MODEL = {"vocab_size": 128, "context": 64, "d_model": 64, "n_layers": 2, "n_heads": 4}
PROMPT_LEN = 8


def greedy_decode(model: nn.TinyGPT, prompts: np.ndarray, new_tokens: int) -> np.ndarray:
    """The ``new_tokens`` tokens (batch, new_tokens) greedy decoding appends to ``prompts`` (batch, t):
    one forward of the prompts fills the KV cache, then one position at a time, each token the
    argmax of the float32 logits (the lowest index on a tie)."""
    caches = [[] for _ in model.blocks]
    step, out = prompts, []
    with state.no_grad():
        for _ in range(new_tokens):
            logits = model.decode(step, caches)[:, -1].to("float32")
            tok = np.argmax(np.asarray(logits.backend.to_numpy(logits.f32())), axis=-1)
            out.append(tok)
            step = tok[:, None].astype(prompts.dtype)
    return np.stack(out, axis=1)


def split_model(fmt: str, policy: str, seed: int) -> nn.TinyGPT:
    """The untrained tiny GPT of ``seed`` in ``fmt``, its GEMMs split-K by ``policy`` with partial
    sums in ``fmt``."""
    model = nn.TinyGPT(**MODEL, seed=seed).to(fmt)
    return model.to(backend=SplitKBackend(fmt, policy))


def compare_batches(model: nn.TinyGPT, prompts: np.ndarray, new_tokens: int) -> list:
    """Per prompt, the first position (1-based) where its completion in batches of :data:`BATCH`
    differs from its completion alone, or 0 where the two agree."""
    batched = np.concatenate([greedy_decode(model, prompts[i:i + BATCH], new_tokens)
                              for i in range(0, len(prompts), BATCH)])
    alone = np.concatenate([greedy_decode(model, prompts[i:i + 1], new_tokens) for i in range(len(prompts))])
    differ = batched != alone
    return [int(np.argmax(row)) + 1 if row.any() else 0 for row in differ]


def measure(quick: bool = True, seeds=(0,), progress=None) -> tuple[dict, dict]:
    """Per format and policy: ``{fmt}_{policy}_diverged`` (share of prompts, over every seed),
    ``{fmt}_{policy}_first_min`` / ``_first_median`` (the token where diverging prompts part; NaN
    where none did); and the figure's series."""
    n_prompts, new_tokens = (16, 24) if quick else (24, 40)
    numbers: dict = {"prompts": float(n_prompts * len(seeds)), "tokens": float(new_tokens)}
    series: dict = {"formats": list(FORMATS), "tokens": new_tokens}
    for fmt in FORMATS:
        for policy in POLICIES:
            say(progress, f"{fmt}, {policy} split: {n_prompts} prompts x {len(seeds)} seed(s), batch 1 and {BATCH}")
            firsts = []
            for seed in seeds:
                prompts = np.random.default_rng([seed, 103]).integers(0, MODEL["vocab_size"], (n_prompts, PROMPT_LEN))
                firsts += compare_batches(split_model(fmt, policy, seed), prompts, new_tokens)
            parted = [f for f in firsts if f]
            key = f"{fmt}_{policy}"
            numbers[f"{key}_diverged"] = len(parted) / len(firsts)
            numbers[f"{key}_first_min"] = float(min(parted)) if parted else float("nan")
            numbers[f"{key}_first_median"] = float(np.median(parted)) if parted else float("nan")
            numbers[f"{key}_first_mean"] = float(mean64(parted)) if parted else float("nan")
            series[key] = firsts
    return numbers, series


def _first(numbers: dict, key: str) -> str:
    if not numbers[f"{key}_diverged"]:
        return ""
    return f" (first at token {numbers[f'{key}_first_min']:.0f}, median {numbers[f'{key}_first_median']:.0f})"


def measured(numbers: dict, series: dict) -> str:
    n, t = int(numbers["prompts"]), int(numbers["tokens"])
    batch = ", ".join(f"{f} {pct(numbers[f'{f}_batch_diverged'], 0)}{_first(numbers, f + '_batch')}" for f in FORMATS)
    fixed = ", ".join(f"{f} {pct(numbers[f'{f}_fixed_diverged'], 0)}" for f in FORMATS)
    return (f"{n} prompts x {t} greedy tokens, batch 1 vs batch {BATCH}: completions that differ with the "
            f"batch-dependent split {batch}; with a fixed split {fixed}")


def verdict(numbers: dict) -> tuple[str, str]:
    fixed = max(numbers[f"{f}_fixed_diverged"] for f in FORMATS)
    moved = [f for f in FORMATS if numbers[f"{f}_batch_diverged"] > 0]
    t = int(numbers["tokens"])
    if fixed > 0:
        return "not at this scale", f"even a fixed split changed {pct(fixed, 0)} of the completions with the batch"
    if not moved:
        return "not at this scale", (f"no completion of {t} tokens changed with the batch in any format: the split's "
                                     "last-bit differences met no near-tie (the source's first split came at token 103)")
    worst = max(moved, key=lambda f: numbers[f"{f}_batch_diverged"])
    cost = "the source's scale, about 5e17 operations, would take this CPU centuries"
    if "float32" in moved:
        return "reproduced", (f"with the split following the batch, completions changed with the batch in "
                              f"{', '.join(moved)} (up to {pct(numbers[worst + '_batch_diverged'], 0)}); with a fixed "
                              f"split none did; {cost}")
    return "partly", (f"with the split following the batch {pct(numbers[worst + '_batch_diverged'], 0)} of the "
                      f"{worst} completions changed and none with a fixed split, but in float32 accumulation none "
                      f"within {t} tokens (the source's bfloat16 model with float32-accumulating kernels parted at "
                      f"token 103 of 1,000; {cost})")


def draw(ax, series: dict) -> None:
    """Per format, the share of prompts whose completion changed with the batch, under each split
    policy, with the first tokens where they parted written above the bars."""
    x = np.arange(len(series["formats"]))
    for i, policy in enumerate(POLICIES):
        shares = [100 * np.mean([f > 0 for f in series[f"{fmt}_{policy}"]]) for fmt in series["formats"]]
        bars = ax.bar(x + (i - 0.5) * 0.4, shares, 0.4, label=f"{policy} split")
        for bar, fmt in zip(bars, series["formats"]):
            parted = sorted(f for f in series[f"{fmt}_{policy}"] if f)
            ax.annotate(f"from token {parted[0]}" if parted else "0%",
                        (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, [f"{f} accumulation" for f in series["formats"]])
    ax.set_ylabel(f"completions that differ, batch 1 vs {BATCH} (%)")
    ax.set_title(f"greedy decoding, {series['tokens']} tokens: split-K that follows the batch vs a fixed split")
    ax.legend()


FINDING = FINDINGS.register(Finding(
    NAME, "Temperature-0 decoding of a prompt changes with the batch it shares, because the kernels' reduction "
          "split depends on the batch size; batch-invariant kernels make every run agree.",
    "Thinking Machines, 'Defeating Nondeterminism in LLM Inference' (2025, a blog post); code "
    "thinking-machines-lab/batch_invariant_ops",
    "1,000 temperature-0 completions of one prompt (Qwen3-235B, 1,000 tokens) gave 80 unique completions, the "
    "first difference at token 103; with batch-invariant kernels all 1,000 were identical",
    (25.0, 160.0), order=55, verdict=verdict, measured=measured, measure=measure, figure=draw, seeds=(0, 1)))
