"""``outliers-and-kurtosis``: a few activations grow far above the rest - up to 100,000x the
median, on fixed tokens that act as attention sinks ("Massive Activations", arXiv 2402.17762) -
and a high excess kurtosis of the activations is the sign that fp8 training is about to lose
them (FOG, arXiv 2505.20524; arXiv 2506.19697).

The miniature.  A tiny GPT this small, trained this briefly, grows no massive activation of its
own, so one is planted: the task starts every sequence with a fixed token (``bos``, the place
real models park their sinks), and that token's embedding gets the value :data:`PLANTS` in one
dimension - a massive activation that rides the residual stream through every block.  Each
plant is trained in float32 (Adam, the task's schedule) under an
:class:`~fpsim.outliers.OutlierMonitor` watching the block outputs (the residual
stream), each attention's output, each MLP's GELU output and each block's first LayerNorm
output.  For every watched tensor at every 5th step: its excess kurtosis and the error of the same
tensor quantized to e4m3 with one per-tensor scale (``fpsim.outliers.fp8_error``: the relative
MSE, and the share of entries pushed below e4m3's smallest normal).  Reported: the residual
stream's max / median |x| and kurtosis per plant at the last step watched, and over all tensors, steps and
plants of a seed the Spearman rank correlation of kurtosis with each error measure (seed mean,
min-max).  Full runs: the seeds given (by default the finding's three, 0 1 2).

What to expect: kurtosis measures how *rare* the outliers are, not how large.  The planted entry
sits at one position of every sequence, so the residual stream's excess kurtosis saturates near
(entries / outliers) - 3 once the plant dominates, whatever its size - while the share of the
tensor that e4m3's per-tensor scale pushes below its normal range keeps growing with it.  The
relative MSE, weighted by energy, is dominated by the few large values, which e4m3 keeps at its
usual relative precision.
"""

from __future__ import annotations

import math
from collections import namedtuple
from dataclasses import dataclass

import numpy as np

from ...numerics import fsum64, mean64
from ...outliers import OutlierMonitor
from ...tensor import tensor
from ..tinygpt import BOS, TinyGPTTask
from .base import FINDINGS, Finding, Sweep, pct
from .runs import metric

NAME = "outliers-and-kurtosis"
PLANTS = (0.0, 100.0, 1000.0, 10000.0)
QUICK_PLANTS = (0.0, 10000.0)
Row = namedtuple("Row", "pass_ module top_ratio kurtosis fp8_rel_mse fp8_small")  # one monitor row, as data


def watched(n_layers: int) -> list:
    """The module paths the monitor reads: per block its output, its attention's output, its
    MLP's GELU output and its first LayerNorm's output."""
    return [f"blocks.{i}{s}" for i in range(n_layers) for s in ("", ".attn", ".mlp.1", ".ln1")]


def plant(model, value: float) -> None:
    """Set dimension 0 of the BOS token's embedding to ``value`` (rounded into the weight's format)."""
    w = model.tok_emb.weight
    arr = np.array(w.backend.to_numpy(w.f32()), dtype=np.float64)
    arr[BOS, 0] = value
    w.data = tensor(arr, w.fmt, backend=w.backend).data


@dataclass(frozen=True)
class OutlierTask(TinyGPTTask):
    """The tiny GPT with ``plant`` planted (0: the BOS token as drawn), trained under an
    :class:`~fpsim.outliers.OutlierMonitor` that reads every ``every``-th step: the monitor is
    entered as the model is made and left in :meth:`metrics`, whose ``outlier_rows`` are its rows as
    plain tuples (pass, module, max / median |x|, excess kurtosis, e4m3 relative MSE, share below
    e4m3's normal range) before the evaluation loss is taken."""

    trace_nonfinite = False
    plant: float = 0.0
    every: int = 1

    def model(self, seed: int = 0):
        m = super().model(seed)
        if self.plant:
            plant(m, self.plant)
        om = OutlierMonitor(m, modules=watched(self.n_layers), every=self.every)
        om.__enter__()
        m.outlier_monitor = om
        return m

    def metrics(self, model, recipe) -> dict:
        om = model.outlier_monitor
        om.__exit__(None, None, None)
        rows = [(r.pass_, r.module, r.top_ratio, r.kurtosis, r.fp8_rel_mse, r.fp8_small) for r in om.rows]
        return {**super().metrics(model, recipe), "outlier_rows": rows}


TASK_SETTINGS = {"n_digits": 8, "d_model": 32, "n_layers": 2, "n_heads": 2, "batch": 16, "warmup": 10, "lr": 1e-2,
                 "bos": True}
TASK = TinyGPTTask(**TASK_SETTINGS)
SWEEPS = tuple(Sweep(OutlierTask, ("fp32",), quick_steps=10, full_steps=100, name=f"plant{p:g}",
                     settings={**TASK_SETTINGS, "plant": p, "every": 5}, quick_settings={"every": 2},
                     modes=("quick", "full") if p in QUICK_PLANTS else ("full",)) for p in PLANTS)


def rank_correlation(a, b) -> float:
    """Spearman's rho: the Pearson correlation of the ranks (ties share their mean rank), in float64,
    every sum exact and rounded once (:func:`fpsim.numerics.fsum64`)."""
    def ranks(x):
        x = np.asarray(x, dtype=np.float64)
        order = np.argsort(x, kind="stable")
        r = np.empty(len(x))
        r[order] = np.arange(len(x), dtype=np.float64)
        _, inv, counts = np.unique(x, return_inverse=True, return_counts=True)
        sums = np.bincount(inv, weights=r)
        return sums[inv] / counts[inv]

    ra, rb = ranks(a), ranks(b)
    ra, rb = ra - mean64(ra), rb - mean64(rb)
    den = math.sqrt(fsum64(ra * ra) * fsum64(rb * rb))
    return float(fsum64(ra * rb) / den) if den > 0 else float("nan")


def _spread(n: dict, name: str, vals) -> None:
    n[name], n[f"{name}_min"], n[f"{name}_max"] = float(mean64(vals)), float(np.min(vals)), float(np.max(vals))


def extract(results) -> tuple[dict, dict]:
    """The numbers (module docstring) from every plant's runs, seed by seed."""
    plants = QUICK_PLANTS if results.quick else PLANTS
    per = {p: {"ratio": [], "kurt": [], "loss": [], "small": []} for p in plants}
    rho_mse, rho_small, points = [], [], []
    for i in range(len(results.seeds)):
        rows = []
        for p in plants:
            run = results[f"plant{p:g}"]["fp32"][i]
            seen = [Row(*r) for r in metric(run, "outlier_rows")]
            end = max(r.pass_ for r in seen)
            last = [r for r in seen if r.pass_ == end and r.module.count(".") == 1]  # the block outputs
            per[p]["ratio"].append(mean64([r.top_ratio for r in last]))
            per[p]["kurt"].append(mean64([r.kurtosis for r in last]))
            per[p]["small"].append(mean64([r.fp8_small for r in last]))
            per[p]["loss"].append(metric(run, "eval_loss"))
            rows += [(p, r) for r in seen]
        k = [r.kurtosis for _, r in rows]
        rho_mse.append(rank_correlation(k, [r.fp8_rel_mse for _, r in rows]))
        rho_small.append(rank_correlation(k, [r.fp8_small for _, r in rows]))
        points += [(p, r.kurtosis, r.fp8_rel_mse, r.fp8_small) for p, r in rows]
    n = {}
    for p in plants:
        for stat in ("ratio", "kurt", "small", "loss"):
            _spread(n, f"plant{p:g}_{stat}", per[p][stat])
    _spread(n, "rho_rel_mse", rho_mse)
    _spread(n, "rho_small", rho_small)
    n["largest_plant"], n["seeds"] = float(plants[-1]), float(len(results.seeds))
    return n, {"points": points, "plants": list(plants), "rho_small": n["rho_small"], "rho_rel_mse": n["rho_rel_mse"]}


def measured(numbers: dict, series: dict) -> str:
    return _measured(numbers, series["plants"])


def _measured(n: dict, plants) -> str:
    top = f"plant{plants[-1]:g}"
    return (f"residual stream at the last step, max / median |x|: {n['plant0_ratio']:.3g} unplanted, "
            f"{n[f'{top}_ratio']:.3g} ({n[f'{top}_ratio_min']:.3g}-{n[f'{top}_ratio_max']:.3g}) with "
            f"{plants[-1]:g} planted; excess kurtosis {n['plant0_kurt']:.3g} vs {n[f'{top}_kurt']:.3g}; "
            f"e4m3 per-tensor share below normal {pct(n['plant0_small'], 2)} vs {pct(n[f'{top}_small'], 1)}; "
            f"Spearman(kurtosis, e4m3 relative MSE) {n['rho_rel_mse']:.2f} ({n['rho_rel_mse_min']:.2f}-"
            f"{n['rho_rel_mse_max']:.2f}), (kurtosis, share below normal) {n['rho_small']:.2f} "
            f"({n['rho_small_min']:.2f}-{n['rho_small_max']:.2f})")


def verdict(n: dict) -> tuple[str, str]:
    top = f"plant{n['largest_plant']:g}"
    massive = n[f"{top}_ratio_min"] >= 1e3 and n[f"{top}_kurt_min"] > 10 * max(n["plant0_kurt_max"], 1.0)
    mse, small = n["rho_rel_mse_min"], n["rho_small_min"]
    if not massive:
        return "not at this scale", (f"the planted value left the residual stream at {n[f'{top}_ratio']:.3g}x its "
                                     "median, short of a massive activation")
    if mse >= 0.5:
        return "reproduced", (f"a massive activation ({n[f'{top}_ratio']:.3g}x the median) raises the kurtosis, and "
                              f"kurtosis ranks the e4m3 relative MSE in every seed (rho >= {mse:.2f})")
    if small >= 0.5:
        return "partly", (f"kurtosis ranks the share of a tensor e4m3's per-tensor scale pushes below its normal range "
                          f"(rho >= {small:.2f} in every seed) but not the relative MSE (rho down to {mse:.2f}), "
                          "which the few largest values, kept at e4m3's relative precision, dominate")
    return "not at this scale", f"kurtosis does not rank the e4m3 error (rho down to {mse:.2f} and {small:.2f})"


def draw(ax, series: dict) -> None:
    """Excess kurtosis against the share of the tensor e4m3's per-tensor scale pushes below its
    normal range, one colour per plant; inset: against the e4m3 relative MSE; the seed-mean
    correlations in the title."""
    points, n = series["points"], series
    plants = sorted({p for p, *_ in points})
    inset = ax.inset_axes([0.5, 0.12, 0.3, 0.4])
    for i, p in enumerate(plants):
        pts = np.array([(k, e, s) for q, k, e, s in points if q == p])
        label = f"planted {p:g}" if p else "no plant"
        ax.scatter(pts[:, 0] + 3, np.maximum(pts[:, 2], 1e-5), s=6, color=f"C{i}", alpha=0.4, label=label)
        inset.scatter(pts[:, 0] + 3, pts[:, 1], s=3, color=f"C{i}", alpha=0.4)
    for a in (ax, inset):
        a.set_xscale("log")
        a.set_yscale("log")
    ax.set_xlabel("kurtosis (excess + 3; per tensor, per step watched)")
    ax.set_ylabel("share below e4m3's normal range (floor 1e-5)")
    ax.set_title(f"Spearman with kurtosis: share below normal {n['rho_small']:.2f}, relative MSE (inset) "
                 f"{n['rho_rel_mse']:.2f}", fontsize=9)
    inset.set_title("e4m3 relative MSE", fontsize=7)
    inset.tick_params(labelsize=6)
    ax.legend(fontsize=8, loc="upper left")


FINDING = FINDINGS.register(Finding(
    NAME, "Massive activations (a few values far above the median) make activation tensors heavy-tailed; their "
          "excess kurtosis tracks how much per-tensor fp8 quantization loses.",
    "arXiv 2402.17762 (Massive Activations); arXiv 2505.20524 (FOG); arXiv 2506.19697",
    "activations up to 100,000x the median on sink tokens; kurtosis as the early sign of fp8 divergence (FOG: "
    "Adam-trained kurtosis 1818.56 vs 0.04 with an outlier-safe recipe, 1.4B)", (5.0, 110.0), order=120,
    verdict=verdict, measured=measured, sweep=SWEEPS, extract=extract, figure=draw, seeds=(0, 1, 2)))
