"""``fp8-rollout-drift``: an FP8 (blockwise e4m3) rollout engine against a bfloat16 trainer shifts
the per-token log-ratio log p_rollout - log p_trainer, and the shift is not stationary: small while
the policy is spread out, a bias once its entropy has fallen (arXiv 2601.18150, FP8-RL;
arXiv 2605.13907).

The miniature extends ``fp16-vs-bf16-mismatch`` (:mod:`.mismatch`, whose rollout and trainer it
uses): the tiny GPT trained on the sorting task by a bfloat16 trainer (``bf16-master``: bfloat16
weights and compute, float32 master weights), and at checkpoints along that one run (step 0, every
``steps // checkpoints`` steps, the end) three rollout engines built from the trainer's weights:

- ``bf16``: the same bfloat16 weights through the KV-cache decode (the mismatch finding's setting:
  what the engine alone changes);
- ``fp8``: every Linear weight (attention, MLP, head) quantized into ``fp8_block`` - e4m3 elements,
  one float32 power-of-two decode scale per 128x128 tile, as DeepSeek-V3's / Transformer Engine's
  blockwise recipe quantizes weights (at d_model 64 one tile holds a whole matrix) - and dequantized,
  which bfloat16 holds exactly (3 mantissa bits times a power of two);
- ``fp8_kv``: those weights and the KV cache in e4m3 too: the keys and the values of each write
  (the prompt's, then each new token's) scaled by one power of two from their amax, rounded into
  e4m3 and divided back before they are cached and read (the source recalibrates its QKV scales
  once per RL step; a scale per write is the nearest a rollout without a step has).

Each engine samples the answers of ``n_prompts`` prompts (temperature 1, the run's seed) through
the fused decode kernel; the trainer scores the same tokens with one full forward.  Per token the
log-ratio d = log p_rollout - log p_trainer (float64 difference of two float32 values): its mean
(exact sum, :func:`fpsim.numerics.mean64`; sampled from the rollout it estimates
KL(rollout || trainer), the bias), its p99 of |d| (nearest rank, no interpolation) and the share of
tokens whose ratio exp(d) lies outside the truncated-importance-sampling band [1/2, 2] (|d| > ln 2;
and outside [0.8, 1.25], the mismatch finding's band).  The entropy is the trainer's, in nats, per
answer token of the fp8 engine's rollouts (float32 log-probabilities, the products summed exactly).

At the source's scale (a 7B-30B policy, rollouts of thousands of tokens, thousands of RL steps on
GPU clusters with FP8 GEMM kernels) the same measurement is some 1e18-1e21 operations: months to
centuries of this CPU; what it cannot give here is the long RL run in which the policy's entropy
collapses over hundreds of steps, so the miniature's entropy falls by supervised training instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ... import ops, state
from ...formats import quantize, round_to
from ...lowp import compute_scale
from ...numerics import exp_f32, fsum64, mean64
from ...tensor import tensor
from .base import FINDINGS, Finding, Sweep, pct
from .mismatch import MismatchTask, trainer_logprobs
from .ptq import linear_weights
from .runs import Checkpointed, metric

NAME = "fp8-rollout-drift"
ENGINES = ("bf16", "fp8", "fp8_kv")
TIS_BAND = (0.5, 2.0)  # truncated importance sampling's usual band: ratio capped at 2
NARROW_BAND = (0.8, 1.25)  # the mismatch finding's band
STATS = ("mean", "se", "p99", "out_tis", "out_narrow")
CHECKPOINTS = 5


def fp8_weights(w: np.ndarray) -> np.ndarray:
    """``w`` (float32, (out, in)) quantized into ``fp8_block`` (e4m3, 128x128 tiles, power-of-two
    float32 decode scales) and dequantized back to float32 (exact)."""
    return quantize(np.asarray(w, np.float32), "fp8_block", block=(128, 128), pow2_scales=True).dequantize()


def fp8_kv(arr: np.ndarray) -> np.ndarray:
    """float32 keys or values ``arr`` as an fp8 KV cache stores them: times one power-of-two scale
    ``2^floor(log2(448 / amax))`` (:func:`fpsim.lowp.compute_scale`, the amax of this write),
    rounded into e4m3 (saturating), divided back (exact)."""
    arr = np.asarray(arr, np.float32)
    s = compute_scale(float(np.abs(arr).max()), "float8_e4m3fn")
    return (round_to(arr * s, "float8_e4m3fn", saturate=True) / s).astype(np.float32)


def _e4m3_kv(t):
    """The bfloat16 tensor ``t`` through :func:`fp8_kv`, held in its own format again (exact)."""
    arr = np.asarray(t.backend.to_numpy(t.f32()), np.float32)
    return tensor(fp8_kv(arr), t.fmt, backend=t.backend)


def _fp8_kv_cache(attn) -> None:
    """Make ``attn`` round each new key and value into e4m3 before it is cached (and attended to)."""
    plain = attn._qkv

    def qkv(x):
        q, k, v = plain(x)
        return q, _e4m3_kv(k), _e4m3_kv(v)

    object.__setattr__(attn, "_qkv", qkv)  # on this rollout copy only


def rollout_engine(task, trainer, seed: int, engine: str):
    """A copy of the ``trainer``'s bfloat16 weights as the rollout engine ``engine`` (module docstring)."""
    if engine not in ENGINES:
        raise ValueError(f"rollout_engine: unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    m = task.model(seed)
    m.load_state_dict({k: np.asarray(v, np.float32) for k, v in trainer.state_dict().items()})
    if engine != "bf16":
        for w in linear_weights(m):
            w.data = w.backend.asarray(fp8_weights(w.backend.to_numpy(w.data)))
    m.to("bfloat16")  # exact: every value is a bfloat16 or an e4m3 times a power of two
    if engine == "fp8_kv":
        for blk in m.blocks:
            _fp8_kv_cache(blk.attn)
    return m


def log_ratio_stats(lp_rollout: np.ndarray, lp_trainer: np.ndarray) -> dict:
    """Mean of d = lp_rollout - lp_trainer (float64; exact sums) and its standard error (the
    sample standard deviation over sqrt(n)), p99 of |d| (nearest rank) and the
    shares of tokens whose ratio exp(d) lies outside :data:`TIS_BAND` and :data:`NARROW_BAND`
    (compared in log space: exp(d) < lo exactly when d < log lo)."""
    d = (np.asarray(lp_rollout, np.float64) - np.asarray(lp_trainer, np.float64)).ravel()
    a = np.sort(np.abs(d))
    p99 = float(a[max(0, math.ceil(0.99 * a.size) - 1)])

    def outside(band):
        return float(np.mean((d < math.log(band[0])) | (d > math.log(band[1]))))

    mean = float(mean64(d))
    se = math.sqrt(fsum64((d - mean) ** 2) / max(1, d.size - 1) / d.size)
    return {"mean": mean, "se": se, "p99": p99, "out_tis": outside(TIS_BAND), "out_narrow": outside(NARROW_BAND)}


def trainer_entropy(model, ids: np.ndarray, n_new: int) -> float:
    """Mean entropy (nats) of the trainer's float32 distribution at the last ``n_new`` positions of
    ``ids``: -sum p log p per position, p the correctly rounded exp, the products summed exactly."""
    with state.no_grad():
        logits = model(ids[:, :-1]).to("float32")
        lp = np.asarray(logits.backend.to_numpy(ops.log_softmax(logits, axis=-1).f32()))[:, -n_new:]
    lp64 = lp.astype(np.float64)
    return float(mean64(-fsum64(exp_f32(lp).astype(np.float64) * lp64, axis=-1)))


@dataclass(frozen=True)
class FP8RolloutTask(Checkpointed, MismatchTask):
    """The tiny GPT trained by its recipe (``bf16-master``), measured at checkpoints along the run:
    at step 0, every ``steps // checkpoints`` steps (before that step's forward: the weights then are
    the checkpoint's) and the end.  Metrics: ``rollout_at`` (the steps), ``entropy`` and per engine
    and statistic ``{engine}_{stat}`` (lists, one value per checkpoint)."""

    checkpoints: int = CHECKPOINTS

    def model(self, seed: int = 0):
        m = super().model(seed)
        m.rollouts = {"rollout_at": [], "entropy": [], **{f"{e}_{s}": [] for e in ENGINES for s in STATS}}
        return m

    def _checkpoint(self, model, step: int) -> None:
        rec, seed = model.rollouts, model.seed
        prompts = self.sequences(self.n_prompts, np.random.default_rng([self.data_seed, 7, seed]))
        prompts = prompts[:, : self.n_digits + 1]
        rec["rollout_at"].append(step)
        for engine in ENGINES:
            ids, lp = rollout_engine(self, model, seed, engine).generate(prompts, self.n_digits, seed=seed, fused=True)
            for k, v in log_ratio_stats(lp, trainer_logprobs(model, ids, self.n_digits)).items():
                rec[f"{engine}_{k}"].append(v)
            if engine == "fp8":
                rec["entropy"].append(trainer_entropy(model, ids, self.n_digits))

    def metrics(self, model, recipe) -> dict:
        self._checkpoint(model, self.steps)  # the last checkpoint: the trained model
        return {k: list(v) for k, v in model.rollouts.items()}


# quick: 40 steps, checkpoints 0 8 16 24 32 40 on 64 prompts; full: 150 steps, 0 30 60 90 120 150 on 256
SWEEP = Sweep(FP8RolloutTask, ("bf16-master",), quick_steps=40, full_steps=150,
              quick_settings={"steps": 40, "n_prompts": 64}, settings={"steps": 150, "n_prompts": 256})


def _seed_mean(rs, key: str) -> list:
    """Per checkpoint, the mean of metric ``key`` over the seeds' runs (exact sums)."""
    per = np.array([metric(r, key) for r in rs], np.float64)
    return [float(v) for v in mean64(per, axis=0)]


def extract(runs: dict) -> tuple[dict, dict]:
    """Seed means at every checkpoint (the standard error too: the seeds' own, averaged, which is
    larger than the seed mean's); the numbers are the first and last checkpoints' and the ratios the
    verdict reads: fp8_kv's p99 over bf16's (at the end) and over its own at step 0."""
    rs = runs["bf16-master"]
    series = {"steps": [int(s) for s in metric(rs[0], "rollout_at")], "entropy": _seed_mean(rs, "entropy")}
    series |= {f"{e}_{s}": _seed_mean(rs, f"{e}_{s}") for e in ENGINES for s in STATS}
    numbers = {"steps": float(series["steps"][-1]), "seeds": float(len(rs)),
               "entropy_first": series["entropy"][0], "entropy_last": series["entropy"][-1]}
    for key in (f"{e}_{s}" for e in ENGINES for s in STATS):
        numbers[f"{key}_first"], numbers[f"{key}_last"] = series[key][0], series[key][-1]
    numbers["fp8_over_bf16_p99"] = numbers["fp8_kv_p99_last"] / numbers["bf16_p99_last"]
    numbers["p99_growth"] = numbers["fp8_kv_p99_last"] / numbers["fp8_kv_p99_first"]
    return numbers, series


def measured(numbers: dict, series: dict) -> str:
    n = numbers
    return (f"{int(n['steps'])} bf16 trainer steps, entropy {n['entropy_first']:.2f} -> {n['entropy_last']:.2f} "
            f"nats/token; fp8 weights + KV cache: mean log-ratio {n['fp8_kv_mean_first']:+.1e} -> "
            f"{n['fp8_kv_mean_last']:+.1e} (standard error {n['fp8_kv_se_last']:.0e}), p99 |log-ratio| "
            f"{n['fp8_kv_p99_first']:.3f} -> {n['fp8_kv_p99_last']:.3f} ({n['p99_growth']:.1f}x; fp8 weights alone "
            f"{n['fp8_p99_last']:.3f}, bf16 engine {n['bf16_p99_last']:.4f}); outside [1/2, 2] "
            f"{pct(n['fp8_kv_out_tis_last'], 2)}, outside [0.8, 1.25] {pct(n['fp8_kv_out_narrow_last'], 2)}")


def verdict(numbers: dict) -> tuple[str, str]:
    n = numbers
    fall = 1 - n["entropy_last"] / n["entropy_first"]
    if fall < 0.25:
        return "not at this scale", (f"in {int(n['steps'])} steps the policy's entropy fell only {pct(fall, 0)}: "
                                     "no falling entropy to measure along")
    if n["fp8_over_bf16_p99"] < 2:
        return "not at this scale", (f"the fp8 engine's p99 |log-ratio| is only {n['fp8_over_bf16_p99']:.1f}x the "
                                     "bfloat16 engine's: fp8 adds little to the mismatch here")
    grows = n["p99_growth"] >= 1.5
    bias = n["fp8_kv_mean_last"] > 2 * n["fp8_kv_se_last"]
    band = (f"{pct(n['fp8_kv_out_tis_last'], 2)} of the tokens leave the truncation band [1/2, 2] after "
            f"{int(n['steps'])} steps of a 2-layer, 64-wide GPT (the source's LLM policies sharpen over long RL runs)")
    head = f"fp8 rollouts lift the p99 |log-ratio| {n['fp8_over_bf16_p99']:.1f}x over a bfloat16 engine's"
    if grows and bias:
        return "reproduced", (f"{head}, and as the entropy falls {pct(fall, 0)} it grows {n['p99_growth']:.1f}x and "
                              f"the mean log-ratio becomes a bias ({n['fp8_kv_mean_first']:+.1e} at step 0, "
                              f"{n['fp8_kv_mean_last']:+.1e} at the end, over twice its standard error); {band}")
    if grows:
        return "partly", (f"{head} and it grows {n['p99_growth']:.1f}x as the entropy falls {pct(fall, 0)}, but the "
                          f"mean stays within two standard errors of 0 (no bias yet); {band}")
    return "not at this scale", (f"{head}, but it grows only {n['p99_growth']:.1f}x while the entropy falls "
                                 f"{pct(fall, 0)}: stationary at this scale")


def draw(ax, series: dict) -> None:
    """p99 |log-ratio| of each engine against the training step (log scale), the trainer's entropy on
    a second axis."""
    x = series["steps"]
    for e, label in zip(ENGINES, ("bf16 engine (KV cache)", "fp8 weights", "fp8 weights + KV cache")):
        ax.semilogy(x, series[f"{e}_p99"], marker="o", label=f"p99 |log-ratio|, {label}")
    ax.semilogy(x, [max(abs(v), 1e-7) for v in series["fp8_kv_mean"]], "k--", label="|mean log-ratio|, fp8 + KV")
    ax.set_xlabel("bf16 trainer step")
    ax.set_ylabel("log p_rollout - log p_trainer")
    ax2 = ax.twinx()
    ax2.plot(x, series["entropy"], ":", color="tab:purple", marker="s", label="trainer entropy (nats/token)")
    ax2.set_ylabel("entropy (nats/token)")
    ax.legend(loc="upper left", fontsize=7)
    ax2.legend(loc="lower right", fontsize=7)
    ax.set_title("FP8 rollout vs bf16 trainer along training")


FINDING = FINDINGS.register(Finding(
    NAME, "An FP8 blockwise rollout engine against a bf16 trainer changes the per-token log-ratio, and the "
          "mismatch is not stationary: small early, a bias as the policy's entropy falls.",
    "arXiv 2601.18150 (FP8-RL, NVIDIA); arXiv 2605.13907",
    "FP8-RL: blockwise FP8 W8A8 rollout and an FP8 KV cache 'can deviate from the higher-precision policy assumed "
    "by the trainer, causing train-inference mismatch'; with token-level TIS/MIS correction, up to 44% rollout "
    "throughput at learning 'comparable to BF16 baselines' (dense and MoE models); the mismatch small early and a bias "
    "as the entropy falls (the issue's summary of 2605.13907)",
    (10.0, 90.0), order=52, verdict=verdict, measured=measured, sweep=SWEEP, extract=extract, figure=draw,
    seeds=(0, 1, 2)))
