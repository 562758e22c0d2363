"""Recipes side by side, so that what differs is visible (labs 03, 04, 06 and 08).

On a log axis the loss curves of recipes that all train lie on top of each other.  What
differs is drawn instead: each loss divided by the baseline's (float32's) at the same step,
the share of gradients flushed to zero and of weights left unchanged at every step, and the
loss scale with its skipped steps.  :func:`train` runs the recipes with those counts taken
at every step; :func:`panels` draws them; :func:`table` prints the few numbers that sum a
run up.
"""

from __future__ import annotations

import math

import numpy as np

from ..experiments import RunResult, compare

__all__ = ["train", "ratios", "table", "panels", "PANELS"]

PANELS = ("ratio", "flushed", "stalled", "scale")
_STYLES = ("-", "--", ":", "-.")


def train(recipes, task=None, *, steps: int = 40, seed: int = 0) -> dict[str, RunResult]:
    """:func:`fpsim.experiments.compare` over ``recipes`` (same data, same initial weights),
    with flushed gradients and unchanged weights counted at every step, no progress bar."""
    return compare(recipes, task, steps=steps, seed=seed, progress=False, measure_at=range(steps))


def died_at(r: RunResult) -> int | None:
    """The first step whose loss is not finite, or None."""
    bad = [i for i, v in enumerate(r.losses) if not math.isfinite(v)]
    if bad:
        return bad[0]
    return len(r.losses) - 1 if r.failure else None


def ratios(results: dict[str, RunResult], baseline: str = "fp32") -> dict[str, np.ndarray]:
    """Each recipe's loss divided by the baseline's at the same step (float64), for every
    recipe but the baseline; a run that died gives NaN from that step on."""
    base = np.asarray(results[baseline].losses, dtype=np.float64)
    out = {}
    for name, r in results.items():
        if name == baseline:
            continue
        y = np.full(base.size, np.nan)
        mine = np.asarray(r.losses[: base.size], dtype=np.float64)
        y[: mine.size] = mine / base[: mine.size]
        d = died_at(r)
        if d is not None:
            y[d:] = np.nan
        out[name] = y
    return out


def _pct(d: dict, step) -> str:
    return f"{100 * d[step]:.1f}%" if step in d else "-"


def table(results: dict[str, RunResult], baseline: str = "fp32") -> str:
    """One line per recipe: final loss, its ratio to the baseline's, skipped steps, final scale,
    the share of activation gradients flushed to 0 at the first and the last step, and the share
    of weights the last step left unchanged (``stalled``)."""
    from ..textable import text_table

    base = results.get(baseline)
    rows = []
    for name, r in results.items():
        d = died_at(r)
        ok = d is None
        first, last = (min(r.act_grad_flushed), max(r.act_grad_flushed)) if r.act_grad_flushed else (None, None)
        rows.append([
            name,
            f"{r.final_loss:.4e}" if ok else f"NaN from step {d}",
            f"{r.final_loss / base.final_loss:.3f}x" if ok and base is not None and base.final_loss > 0 else "-",
            str(r.steps_skipped),
            "per tensor" if r.fp8 else f"{r.final_scale:g}",
            f"{_pct(r.act_grad_flushed, first)} -> {_pct(r.act_grad_flushed, last)}" if ok and first is not None else "-",
            _pct(r.stalled, max(r.stalled)) if ok and r.stalled else "-",
        ])
    cols = ["recipe", "final loss", f"vs {baseline}", "skipped", "final scale", "grads flushed first -> last",
            "weights unchanged (last step)"]
    return "\n".join(text_table(cols, rows, right=range(1, len(cols))))


def _series(d: dict, n: int) -> np.ndarray:
    y = np.full(n, np.nan)
    for k, v in d.items():
        if 0 <= k < n:
            y[k] = v
    return y


def panels(results: dict[str, RunResult], which=("ratio", "flushed", "stalled"), baseline: str = "fp32", *,
           title: str | None = None, path=None):
    """One panel per entry of ``which`` (from :data:`PANELS`), step on the x axis:

    - ``ratio``: loss / baseline loss at the same step (1 = as good as float32);
    - ``flushed``: % of the activation gradients (non-zero in float32) the low format flushed
      to 0 in that step's backward pass;
    - ``stalled``: % of the weights (the masters where there are masters) the step left unchanged;
    - ``scale``: the loss scale (log2 axis), skipped steps marked with an X.

    A recipe appears in a panel only where it has something to show there (a run without a
    scaler has no scale).  One legend for the whole figure, below the panels, so that no
    legend covers a curve.  Returns the figure."""
    from ..tools import plots

    bad = [w for w in which if w not in PANELS]
    if bad or not which:
        raise ValueError(f"panels: choose from {', '.join(PANELS)}, got {list(which)!r}")
    plt = plots._plt()
    names = list(results)
    n = max(len(r.losses) for r in results.values())
    fig = plt.figure(figsize=(5.2 * len(which) + 0.5, 4.6), dpi=plots.STYLE["figure.dpi"])
    seen: dict = {}
    style = {}
    for name in names:
        color = plots.recipe_color(name) or "black"
        k = seen.get(color, 0)
        seen[color] = k + 1
        style[name] = {"color": color, "ls": _STYLES[k % len(_STYLES)]}
    handles = {}
    with plt.rc_context(plots.STYLE):
        axes = fig.subplots(1, len(which), squeeze=False)[0]
        for ax, kind in zip(axes, which):
            if kind == "ratio":
                _ratio_panel(ax, results, baseline, style, handles)
            elif kind in ("flushed", "stalled"):
                _share_panel(ax, kind, results, n, style, handles)
            else:
                _scale_panel(ax, results, style, handles)
            ax.set_xlabel("step")
        died = [f"{name}: NaN from step {died_at(r)}" for name, r in results.items() if died_at(r) is not None]
        labels = list(handles)
        fig.legend([handles[k] for k in labels], labels, loc="lower center", ncol=min(len(labels), 6),
                   frameon=False, bbox_to_anchor=(0.5, 0.0))
        if title or died:
            fig.suptitle((title or "") + ("   (" + "; ".join(died) + ")" if died else ""), fontsize=14)
        fig.tight_layout(rect=(0, 0.1, 1, 1))
    return plots._finish(fig, path)


def _ratio_panel(ax, results, baseline, style, handles) -> None:
    from ..tools import plots

    ax.axhline(1.0, color=plots.recipe_color(baseline) or "black", lw=1.5)
    handles.setdefault(baseline, ax.lines[-1])
    for name, y in ratios(results, baseline).items():
        if np.any(np.isfinite(y)):
            (h,) = ax.plot(y, **style[name])
            handles.setdefault(name, h)
    ax.set_ylabel(f"loss / {baseline} loss")
    ax.set_title("loss relative to " + baseline)


def _share_panel(ax, kind, results, n, style, handles) -> None:
    for name, r in results.items():
        y = 100 * _series(r.act_grad_flushed if kind == "flushed" else r.stalled, n)
        d = died_at(r)
        if d is not None:
            y[d:] = np.nan
        if np.nansum(y) > 0:
            (h,) = ax.plot(y, **style[name])
            handles.setdefault(name, h)
    ax.set_ylabel("% of activation gradients" if kind == "flushed" else "% of weights")
    ax.set_title("flushed to 0 in the backward pass" if kind == "flushed" else "left unchanged by the step")
    ax.set_ylim(bottom=0)


def _scale_panel(ax, results, style, handles) -> None:
    from ..tools import plots

    for name, r in results.items():
        s = np.asarray(r.scales, dtype=np.float64)
        if r.steps_skipped == 0 and np.all(s == 1.0):
            continue
        (h,) = ax.step(np.arange(s.size), s, where="post", **style[name])
        handles.setdefault(name, h)
        idx = np.flatnonzero(np.asarray(r.skipped, dtype=bool))
        if idx.size:
            x = ax.plot(idx, s[idx], "X", ms=10, color=plots.BAND_COLORS["flush"], ls="none")[0]
            handles.setdefault("skipped step", x)
    ax.set_yscale("log", base=2)
    ax.set_ylabel("loss scale")
    ax.set_title("loss scale (X: step skipped)")
