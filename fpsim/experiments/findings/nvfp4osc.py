"""``nvfp4-weight-oscillation``: in NVFP4 training many weights flip between two neighbouring codes
while their latent (float32 master) value hardly moves, and resetting them closes part of the gap to
bfloat16 (TetraJet-v2, arXiv 2510.27527).

The miniature: the reference autoencoder (2,048 samples) with every Linear in NVFP4 (16x16 weight
tiles, stochastically rounded gradients), Adam at the task's learning rate, and a bfloat16 run with
float32 masters from the same initial weights as the control.  After every update an
:class:`OscillationTracker` quantizes each Linear's latent weight W as the forward does
(``fpsim.quantize(W, "nvfp4", block=(16, 16))``) and keeps the last :data:`WINDOW` steps of W and of
its e2m1 element (its code): a weight oscillates when its code changed at least twice in the window while its
latent value moved (max - min over the window) less than half of its bin (the e2m1 spacing at it,
times its tile's scale).  It also records, at the end, the position of each |W| / scale inside its
e2m1 bin (0 at the lower grid point, 1 at the upper; RTN's decision boundary at 0.5).  The reset arm
sets every oscillating weight's latent value to its code's value (the grid point it flips around
from), and starts its window anew.  Reported: the share of weights oscillating (mean over the last
window of steps), the share of bin positions within 0.1 of the midpoint for the oscillating weights
and for all (0.2 for positions spread evenly), and the final-loss gap to bfloat16 with and without
the reset (the share of the gap the reset closes).

At the source's scale: TetraJet-v2 pre-trains LLMs (OLMo2 models) of up to 370M parameters on up to 212B
tokens (about 6 x 3.7e8 x 2.1e11 = 5e20 FLOPs), and its 51.3% is the whole method's (the reset with its
other two parts, the double-block quantization and OutControl), not the reset's alone; fpsim's engine (about 10^8 float32 operations a second on a core)
would take some 10^5 years, so the miniature asks about the mechanism - do codes flip around a latent
value that stands still, and does resetting them help? - on a model of 4,600 weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...formats import quantize
from ...lowp import BlockLinear, BlockScaling
from ...numerics import mean64
from ..recipes import Recipe
from ..run import Run
from ..tasks import ReferenceTask
from .base import FINDINGS, Finding, Sweep, pct
from .runs import metric, seed_mean

NAME = "nvfp4-weight-oscillation"
WINDOW = 8
GRID = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])  # e2m1's magnitudes
MID_BAND = 0.1  # |position - 0.5| below this counts as "at the midpoint" (0.2 of positions spread evenly)
SOURCE_CLOSED = 0.5


def nvfp4_codes(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each entry's e2m1 element (16x16 tiles; float64, so -0 == 0) and the latent value of one e2m1
    unit at it (its tile's scale g s, float64), for a 2-D float32 ``w``: the code's value is their
    product.  A flip is a change of the element: the scales move with every update (the tensor
    scale follows the amax), the element only when the weight crosses a decision boundary."""
    q = quantize(w, "nvfp4", block=(16, 16))
    scale = np.repeat(np.repeat(q.scales.astype(np.float64), 16, 0), 16, 1)[: w.shape[0], : w.shape[1]]
    unit = scale * float(q.tensor_scale)
    return q.elements.astype(np.float64), unit


def bin_position(w: np.ndarray, unit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(position of |w| / unit inside its e2m1 bin in [0, 1), the bin's width in latent units); NaN
    position at or beyond 6 and where the unit is 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        u = np.abs(w.astype(np.float64)) / unit
    i = np.clip(np.searchsorted(GRID, u, side="right") - 1, 0, len(GRID) - 2)
    width = GRID[i + 1] - GRID[i]
    pos = (u - GRID[i]) / width
    pos[~(u < GRID[-1])] = np.nan
    return pos, width * unit


class OscillationTracker:
    """Watches the weights of a model's NVFP4 Linears after each update (module docstring); with
    ``reset``, puts each oscillating weight's latent value on its code's value."""

    def __init__(self, weights: list, reset: bool = False, window: int = WINDOW):
        self.weights, self.reset, self.window = weights, reset, window
        self.history = [[] for _ in weights]  # per weight tensor: [(latent, code)] of the last steps
        self.shares: list[float] = []  # share of weights oscillating, per step
        self.resets = 0

    def observe(self) -> None:
        """One step: record every weight's latent value and code, count (and reset) the oscillating."""
        osc_total = n_total = 0
        for k, w in enumerate(self.weights):
            latent = w.data.astype(np.float64)
            code, unit = nvfp4_codes(w.data)
            hist = self.history[k]
            hist.append((latent, code))
            del hist[: -self.window]
            osc = self.oscillating(hist, unit)
            osc_total += int(osc.sum())
            n_total += osc.size
            if self.reset and osc.any():
                w.data[osc] = (code * unit)[osc].astype(np.float32)
                self.resets += int(osc.sum())
                latent = w.data.astype(np.float64)
                hist[:] = [(np.where(osc, latent, a), np.where(osc, code, c)) for a, c in hist]
        self.shares.append(osc_total / n_total if n_total else 0.0)

    def oscillating(self, hist: list, unit: np.ndarray) -> np.ndarray:
        """Weights whose code changed at least twice in a full window while the latent value moved
        less than half its bin (boolean, the weight's shape)."""
        if len(hist) < self.window:
            return np.zeros(hist[-1][0].shape, bool)
        codes = np.stack([c for _, c in hist])
        latents = np.stack([a for a, _ in hist])
        flips = (np.diff(codes, axis=0) != 0).sum(axis=0)
        _, width = bin_position(hist[-1][0], unit)
        moved = latents.max(axis=0) - latents.min(axis=0)
        return (flips >= 2) & (moved < 0.5 * width)

    def positions(self) -> tuple[np.ndarray, np.ndarray]:
        """Every weight's bin position now, and those of the weights oscillating now (flat float64)."""
        every, osc = [], []
        for k, w in enumerate(self.weights):
            _, unit = nvfp4_codes(w.data)
            pos, _ = bin_position(w.data, unit)
            every.append(pos.ravel())
            if self.history[k]:
                osc.append(pos[self.oscillating(self.history[k], unit)])
        return np.concatenate(every), np.concatenate(osc) if osc else np.zeros(0)


def near_mid(pos: np.ndarray) -> float:
    """Share of the finite positions within :data:`MID_BAND` of 0.5 (NaN for none)."""
    pos = pos[np.isfinite(pos)]
    return float(mean64((np.abs(pos - 0.5) < MID_BAND).astype(np.float64))) if pos.size else float("nan")


@dataclass
class TrackedRun(Run):
    """A :class:`~fpsim.experiments.run.Run` whose tracker observes the weights after every update."""

    tracker: object = None

    def update(self) -> bool:
        skipped = super().update()
        self.tracker.observe()
        return skipped


@dataclass(frozen=True)
class OscillationRecipe(Recipe):
    """A recipe whose run is a :class:`TrackedRun` (``reset``: the tracker resets the oscillating weights)."""

    reset: bool = False

    def prepare(self, model, **kw) -> Run:
        run = super().prepare(model, **kw)
        weights = [m.weight for _, m in run.model.named_modules() if isinstance(m, BlockLinear)]
        model.oscillation = OscillationTracker(weights, self.reset)  # read back by OscillationTask.metrics
        return TrackedRun(run.recipe, run.model, run.opt, run.scaler, run.scaling, tracker=model.oscillation)


@dataclass(frozen=True)
class OscillationTask(ReferenceTask):
    """The reference task whose metrics add the tracker's numbers where one watched the run."""

    def metrics(self, model, recipe) -> dict:
        out = super().metrics(model, recipe)
        tr = getattr(model, "oscillation", None)
        if tr is None:
            return out
        every, osc = tr.positions()
        return {**out, "osc_share": float(mean64(tr.shares[-WINDOW:])), "osc_shares": list(tr.shares),
                "mid_all": near_mid(every), "mid_osc": near_mid(osc), "resets": float(tr.resets),
                "hist_all": np.histogram(every[np.isfinite(every)], 20, (0, 1))[0].tolist(),
                "hist_osc": np.histogram(osc[np.isfinite(osc)], 20, (0, 1))[0].tolist()}


_LAYERS = BlockScaling("nvfp4", weight_block=(16, 16), grad_rounding="stochastic")
TRACKED = OscillationRecipe("nvfp4-tracked", "float32", layers=_LAYERS, description="NVFP4 Linears, tracked")
RESET = OscillationRecipe("nvfp4-reset", "float32", layers=_LAYERS, reset=True,
                          description="NVFP4 Linears, oscillating weights reset to their code")
SWEEP = Sweep(OscillationTask, (TRACKED, RESET, "bf16-master"), quick_steps=40, full_steps=150,
              settings={"n": 2048, "steps": 150}, quick_settings={"steps": 40})


def extract(runs: dict) -> tuple[dict, dict]:
    """Seed means of the tracker's numbers and of the final losses; the first seed's curves and histograms."""
    t, r, b = runs[TRACKED.name], runs[RESET.name], runs["bf16-master"]
    last = [seed_mean(x.losses[-1] for x in arm) for arm in (t, r, b)]
    gap, gap_reset = last[0] - last[2], last[1] - last[2]
    numbers = {"osc_share": seed_mean(metric(x, "osc_share") for x in t),
               "osc_share_reset": seed_mean(metric(x, "osc_share") for x in r),
               "mid_osc": seed_mean(metric(x, "mid_osc") for x in t), "mid_all": seed_mean(metric(x, "mid_all") for x in t),
               "loss_nvfp4": last[0], "loss_reset": last[1], "loss_bf16": last[2],
               "gap_closed": (gap - gap_reset) / gap if gap > 0 else float("nan"), "seeds": float(len(t))}
    series = {"osc_shares": list(metric(t[0], "osc_shares")), "hist_all": list(metric(t[0], "hist_all")),
              "hist_osc": list(metric(t[0], "hist_osc"))}
    return numbers, series


def measured(numbers: dict, series: dict) -> str:
    return (f"{pct(numbers['osc_share'])} of the NVFP4 weights oscillate (with the reset "
            f"{pct(numbers['osc_share_reset'])}); of the oscillating, {pct(numbers['mid_osc'])} sit within 0.1 of "
            f"their bin's midpoint (all weights {pct(numbers['mid_all'])}, even spread 20%); final loss NVFP4 "
            f"{numbers['loss_nvfp4']:.4g}, with the reset {numbers['loss_reset']:.4g}, bf16 {numbers['loss_bf16']:.4g} "
            f"(the reset closes {pct(numbers['gap_closed'])} of the gap; seed means over {int(numbers['seeds'])})")


def verdict(numbers: dict) -> tuple[str, str]:
    share, mid, closed = numbers["osc_share"], numbers["mid_osc"], numbers["gap_closed"]
    oscillate = share > 0.01 and mid > 2 * 0.2
    if not oscillate:
        return "not at this scale", (f"{pct(share)} of the weights oscillate, {pct(mid)} of them within 0.1 of their "
                                     "bin's midpoint (20% for an even spread): no oscillation to damp in this run")
    if closed == closed and closed >= 0.8 * SOURCE_CLOSED:
        return "reproduced", (f"{pct(share)} of the weights flip around their bin's midpoint ({pct(mid)} within "
                              f"0.1 of it) and the reset closes {pct(closed)} of the gap to bfloat16 (source: about half)")
    effect = (f"closes only {pct(closed)} of the gap to bfloat16" if closed >= 0 else
              f"widens the gap to bfloat16 by {pct(-closed)}") if closed == closed else "finds no gap to bfloat16"
    return "partly", (f"{pct(share)} of the weights oscillate, clustered at the midpoint ({pct(mid)} within 0.1), "
                      f"but resetting them {effect} (source: about half, with the rest of TetraJet-v2)")


def draw(ax, series: dict) -> None:
    """The histogram of the bin positions, all weights and the oscillating ones (normalized)."""
    centres = (np.arange(20) + 0.5) / 20
    for key, label, color in (("hist_all", "all weights", "C0"), ("hist_osc", "oscillating", "C3")):
        h = np.asarray(series[key], np.float64)
        if h.sum():
            ax.step(centres, h / h.sum(), where="mid", color=color, label=label)
    ax.axvline(0.5, color="k", ls=":", lw=0.8, label="RTN's decision boundary")
    ax.set_xlabel("|w| / scale inside its e2m1 bin (0 lower grid point, 1 upper)")
    ax.set_ylabel("share of weights")
    ax.set_title("NVFP4 training: where the latent weights sit in their bins")
    ax.legend(fontsize=8)


FINDING = FINDINGS.register(Finding(
    NAME, "In NVFP4 training many weights flip between two codes while their latent value hardly moves (it sits "
          "at the bin's midpoint), and resetting the oscillating weights closes about half of the gap to bfloat16.",
    "arXiv 2510.27527 (TetraJet-v2)", "latent w / s clusters at the bin midpoints; TetraJet-v2 (OsciReset with its "
                                      "other parts) reduces the gap to BF16 by 51.3% on average (up to 370M "
                                      "parameters, 212B tokens)", (10.0, 120.0), order=96, verdict=verdict,
    measured=measured, sweep=SWEEP, extract=extract, figure=draw, seeds=(0, 1, 2)))
