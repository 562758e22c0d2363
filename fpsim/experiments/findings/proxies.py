"""``small-scale-proxies``: at high learning rates small transformers show the instabilities of
large ones - the attention logits grow without bound and the final loss degrades; a LayerNorm on
the queries and keys (qk-layernorm) stops the growth and flattens the final-loss-against-LR
curve, and the z-loss (1e-4 * log^2 Z) keeps the output logits in check (Wortsman et al.,
"Small-scale proxies for large-scale Transformer training instabilities", arXiv 2309.14322).

The miniature: the tiny GPT sorting 8 digits (1 layer, d_model 32, 2 heads, batch 16; 60 steps
of Adam with fpsim's defaults - beta2 0.999, no weight decay, not the paper's AdamW - with a
10-step warm-up and a cosine decay) swept over :data:`LRS` in four arms - default, ``qk_norm``,
``z_loss=1e-4``, both - under ``fp32`` and ``bf16-master``, and the default arm under ``fp16-amp``
and ``fp8-delayed`` (the precision question the paper leaves open).  Per run: the final
(evaluation) loss and the largest attention logit over training (``record_logits``).  Per arm and
seed, the paper's LR sensitivity: the mean over the grid of min(loss, initial loss) minus the
arm's best loss; and the edge of stability: the largest LR whose final loss is within
:data:`STABLE` of the best fp32-default loss of that seed.  Full runs: the seeds given (by
default the finding's three, 0 1 2); ``--quick``: 2 LRs, 3 arms, 20 steps, one seed.
The verdict: ``reproduced`` when, in every seed, the default arm's largest logit grows with LR
and fp32 qk-norm keeps it lower at every LR of the grid's upper half AND reaches a higher edge.
"""

from __future__ import annotations

import warnings

import numpy as np

from ...numerics import mean64
from ..tinygpt import TinyGPTTask
from .base import FINDINGS, Finding, Sweep, pct
from .runs import metric

NAME = "small-scale-proxies"
LRS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
QUICK_LRS = (0.01, 0.3)
STABLE = 1.25  # a run is stable when its final loss is at most 1.25x the seed's best fp32-default loss
ARMS = {"default": {}, "qk-norm": {"qk_norm": True}, "z-loss": {"z_loss": 1e-4},
        "qk-norm+z-loss": {"qk_norm": True, "z_loss": 1e-4}}
CONFIGS = tuple((rec, arm) for rec in ("fp32", "bf16-master") for arm in ARMS) + (
    ("fp16-amp", "default"), ("fp8-delayed", "default"))
QUICK_CONFIGS = (("fp32", "default"), ("fp32", "qk-norm"), ("fp16-amp", "default"))


# The tiny GPT of the sweep (lab 16 trains the same one).
SETTINGS = {"n_digits": 8, "d_model": 32, "n_layers": 1, "n_heads": 2, "batch": 16, "warmup": 10, "record_logits": True}


class ProxyTask(TinyGPTTask):
    """The tiny-GPT task without the non-finite tracer (the sweep reads losses and logits only)."""

    trace_nonfinite = False


def key(rec: str, arm: str) -> str:
    return f"{rec}/{arm}"


def _modes(arm: str, lr: float) -> tuple:
    """The runs (quick, full) whose grid holds ``lr`` and whose configs hold ``arm``."""
    return tuple(m for m, lrs, configs in (("quick", QUICK_LRS, QUICK_CONFIGS), ("full", LRS, CONFIGS))
                 if lr in lrs and any(a == arm for _, a in configs))


def _sweep(arm: str, lr: float) -> Sweep:
    """The runs of one arm at one learning rate: its recipes of :data:`CONFIGS` (and of
    :data:`QUICK_CONFIGS` in a quick run)."""
    full = tuple(rec for rec, a in CONFIGS if a == arm)
    quick = tuple(rec for rec, a in QUICK_CONFIGS if a == arm)
    return Sweep(ProxyTask, full or quick, quick_steps=20, full_steps=60, settings={**SETTINGS, **ARMS[arm]},
                 quick_recipes=quick, modes=_modes(arm, lr), lr=lr, name=f"{arm}@{lr:g}")


SWEEPS = tuple(_sweep(arm, lr) for arm in ARMS for lr in sorted(set(LRS) | set(QUICK_LRS)) if _modes(arm, lr))


def gather(results) -> dict:
    """{config key: {"loss": (seeds, lrs), "logit": (seeds, lrs), "init": (seeds,), "curves": {lr: per-step
    logits of the first seed}}} - final loss (NaN for a dead run) and largest attention logit."""
    lrs, configs = (QUICK_LRS, QUICK_CONFIGS) if results.quick else (LRS, CONFIGS)
    n = len(results.seeds)
    out = {}
    for rec, arm in configs:
        loss, logit, init, curves = np.full((n, len(lrs)), np.nan), np.zeros((n, len(lrs))), [], {}
        for j, lr in enumerate(lrs):
            for i, r in enumerate(results[f"{arm}@{lr:g}"][rec]):
                logits = metric(r, "attn_logits")
                loss[i, j] = r.final_loss
                logit[i, j] = max(logits) if logits else np.nan
                if i == 0:
                    curves[lr] = list(logits)
                if j == 0:
                    init.append(r.losses[0])
        out[key(rec, arm)] = {"loss": loss, "logit": logit, "init": np.array(init), "curves": curves}
    return out


def sensitivity(loss: np.ndarray, init: np.ndarray) -> np.ndarray:
    """Per seed, Wortsman et al.'s LR sensitivity: mean over the grid of min(loss, initial loss)
    minus the best loss (a dead run counts as the initial loss)."""
    capped = np.minimum(np.where(np.isfinite(loss), loss, np.inf), init[:, None])
    return mean64(capped, axis=1) - capped.min(axis=1)


def edge(loss: np.ndarray, best: np.ndarray, lrs) -> np.ndarray:
    """Per seed, the largest LR whose final loss is within :data:`STABLE` of ``best`` (0 if none)."""
    ok = np.isfinite(loss) & (loss <= STABLE * best[:, None])
    return np.array([max([lr for lr, s in zip(lrs, row) if s], default=0.0) for row in ok])


def summarize(res: dict, lrs) -> dict:
    """The numbers the verdict reads (seed means - :func:`fpsim.numerics.mean64` - mins and maxes;
    'every seed' flags as 1.0 / 0.0)."""
    n = {}
    base = res[key("fp32", "default")]
    best = np.nanmin(base["loss"], axis=1)
    top = len(lrs) // 2  # the upper half of the grid
    for k, r in res.items():
        sens, edges = sensitivity(r["loss"], r["init"]), edge(r["loss"], best, lrs)
        for stat, vals in (("sensitivity", sens), ("edge", edges), ("logit_top", r["logit"][:, -1]),
                           ("best_loss", np.nanmin(r["loss"], axis=1))):
            n[f"{k}_{stat}"], n[f"{k}_{stat}_min"], n[f"{k}_{stat}_max"] = (float(mean64(vals)), float(np.min(vals)),
                                                                           float(np.max(vals)))
        for j, lr in enumerate(lrs):
            n[f"{k}_loss_lr{lr:g}"] = float(mean64(r["loss"][:, j]))
            n[f"{k}_logit_lr{lr:g}"] = float(mean64(r["logit"][:, j]))
    qk = res[key("fp32", "qk-norm")]
    n["logit_growth"] = float(mean64(base["logit"][:, -1] / base["logit"][:, 0]))
    n["qk_lowers_logit_every_seed"] = float(bool(np.all(qk["logit"][:, top:] < base["logit"][:, top:])))
    n["qk_wider_every_seed"] = float(bool(np.all(edge(qk["loss"], best, lrs) > edge(base["loss"], best, lrs))))
    for k, r in res.items():  # runs whose final loss is not finite (a forward overflow the scaler skips for ever)
        n[f"{k}_nonfinite"] = float(np.mean(~np.isfinite(r["loss"])))
        for j, lr in enumerate(lrs):
            n[f"{k}_nonfinite_lr{lr:g}"] = float(np.mean(~np.isfinite(r["loss"][:, j])))
    n["seeds"], n["lrs"] = float(len(base["init"])), float(len(lrs))
    return n


def extract(results) -> tuple[dict, dict]:
    lrs = QUICK_LRS if results.quick else LRS
    res = gather(results)
    return summarize(res, lrs), {"lrs": lrs, "configs": res}


def measured(numbers: dict, series: dict) -> str:
    return _measured(numbers, series["configs"], series["lrs"])


def _measured(n: dict, res: dict, lrs) -> str:
    d, q = key("fp32", "default"), key("fp32", "qk-norm")
    text = (f"fp32, largest attention logit at LR {lrs[-1]:g}: default {n[f'{d}_logit_top']:.3g} "
            f"({n[f'{d}_logit_top_min']:.3g}-{n[f'{d}_logit_top_max']:.3g}), qk-norm {n[f'{q}_logit_top']:.3g}; "
            f"LR sensitivity default {n[f'{d}_sensitivity']:.3f} ({n[f'{d}_sensitivity_min']:.3f}-"
            f"{n[f'{d}_sensitivity_max']:.3f}), qk-norm {n[f'{q}_sensitivity']:.3f}")
    for k in (key("fp32", "z-loss"), key("bf16-master", "default"), key("bf16-master", "qk-norm")):
        if k in res:
            text += f", {k} {n[f'{k}_sensitivity']:.3f}"
    edges = []
    for k in (k for k in res if k.endswith("/default")):
        bad = [f"LR {lr:g} in {pct(n[f'{k}_nonfinite_lr{lr:g}'], 0)} of seeds" for lr in lrs
               if n[f"{k}_nonfinite_lr{lr:g}"]]
        edges.append(f"{k.split('/')[0]} {n[f'{k}_edge']:.3g}" + (f" (final loss not finite at {', '.join(bad)})"
                                                                  if bad else ""))
    return (text + f"; edge of stability (LR, seed mean): qk-norm {n[f'{q}_edge']:.3g}, default arm "
            f"{', '.join(edges)}")


def verdict(numbers: dict) -> tuple[str, str]:
    growth = numbers["logit_growth"]
    lowers, wider = numbers["qk_lowers_logit_every_seed"] == 1, numbers["qk_wider_every_seed"] == 1
    seeds = f"in every one of {int(numbers['seeds'])} seeds" if numbers["seeds"] > 1 else "in its one seed"
    if growth < 3:
        return "not at this scale", (f"the default model's largest attention logit grows only {growth:.1f}x from the "
                                     "lowest to the highest LR: no logit growth to cure")
    if lowers and wider:
        return "reproduced", (f"without qk-norm the largest attention logit grows {growth:.0f}x across the LR grid; "
                              f"qk-norm keeps it lower at every high LR and moves the edge of stability to a higher "
                              f"LR {seeds}")
    if lowers or wider:
        what = "keeps the logits lower" if lowers else "moves the edge of stability up"
        return "partly", f"the logits grow {growth:.0f}x with LR; qk-norm {what} {seeds}, but not both"
    return "not at this scale", f"the logits grow {growth:.0f}x with LR, but qk-norm does not hold them down {seeds}"


def draw(ax, series: dict) -> None:
    """Final loss against LR (seed mean, min-max bars), one line per arm; inset: the largest
    attention logit against LR."""
    res, lrs = series["configs"], series["lrs"]
    styles = {"fp32": "-", "bf16-master": "--", "fp16-amp": ":", "fp8-delayed": "-."}
    colours = {arm: f"C{i}" for i, arm in enumerate(ARMS)}
    inset = ax.inset_axes([0.07, 0.62, 0.33, 0.33])
    for k, r in res.items():
        rec, arm = k.split("/")
        colour = colours[arm] if rec in ("fp32", "bf16-master") else ("C4" if rec == "fp16-amp" else "C5")
        with warnings.catch_warnings():  # an LR where every seed's loss is NaN has no point: left out
            warnings.simplefilter("ignore", RuntimeWarning)
            mean, lo, hi = (f(r["loss"], axis=0) for f in (np.nanmean, np.nanmin, np.nanmax))
        ax.errorbar(lrs, mean, yerr=[mean - lo, hi - mean], ls=styles[rec], color=colour, marker="o", ms=3,
                    capsize=2, label=k)
        inset.plot(lrs, np.mean(r["logit"], axis=0), ls=styles[rec], color=colour, marker=".")
    ax.set_xscale("log")
    ax.set_xlabel("learning rate")
    ax.set_ylabel("final evaluation loss")
    ax.set_title("tiny GPT: LR sensitivity (seed mean, min-max)")
    lo, hi = ax.get_ylim()
    ax.set_ylim(lo, hi + 0.5 * (hi - lo))  # a free band on top for the inset and the legend
    ax.legend(fontsize=6, loc="upper right", ncol=2)
    inset.set_xscale("log")
    inset.set_yscale("log")
    inset.set_title("largest attention logit", fontsize=7)
    inset.tick_params(labelsize=6)


FINDING = FINDINGS.register(Finding(
    NAME, "At high learning rates small transformers show attention-logit growth and a degraded final loss; "
          "qk-layernorm stops the growth and flattens the loss-against-LR curve (z-loss guards the output logits).",
    "arXiv 2309.14322 (Wortsman et al.)",
    "attention logits grow without bound at high LR in models from 9.4M parameters; qk-layernorm and z-loss "
    "(1e-4 log^2 Z) lower the LR sensitivity (AdamW, beta2 0.95, eps 1e-8, wd 1e-4)", (5.0, 440.0), order=110,
    verdict=verdict, measured=measured, sweep=SWEEPS, extract=extract, figure=draw, seeds=(0, 1, 2)))
