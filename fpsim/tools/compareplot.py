"""The figure of a recipe comparison: what differs between the runs, and why, step by step.

:func:`compare_figure` draws any set of :class:`~fpsim.experiments.RunResult` (one seed, or
several: ``{seed: {recipe: RunResult}}``) - ``fpsim compare`` and ``fpsim figures``
(``loss_curves.png``) both draw with it.  Left: the loss per recipe (log axis), an X and a
legend note where a run died, at the step the table reports (0-based: the step whose update,
or whose forward pass, made the run non-finite); below it each loss divided by the baseline's
at the same step (fp32 where it is in the set, else the first recipe, as the table does), the
final ratio in the legend, an X again where a run died.  Right, where the runs have them, what
explains the ratios: the share of activation gradients flushed to zero, the loss scale with
skipped steps marked, and the share of parameter updates that stalled.  Over several seeds every
line is the mean over the seeds with a min-max band.  It draws only what the runs recorded,
whatever the task.

Curves that would hide each other stay visible and say so: loss curves that stay within 1.5% of
the panel's height of each other at every step they share are drawn widest first, each on top
of the last (the legend's title names them and their largest difference; the ratio panel tells
them apart), and a right panel where every run measured 0 at every step draws those runs at 0 and says
"0% at every step" across it, instead of an empty frame.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field

import numpy as np

from .plots import BAND_COLORS, STYLE, pyplot, recipe_styles

__all__ = ["CompareFigure", "Death", "compare_figure", "PANELS"]

PANELS = ("loss", "ratio", "flushed", "scale", "stalled")
_PANELS = (  # key, title, y label
    ("flushed", "activation gradients flushed to 0", "% of the non-zero ones"),
    ("scale", "loss scale (X: step skipped, inf/NaN gradients)", "loss scale"),
    ("stalled", "stalled updates: parameters the step left unchanged", "% of parameters"),
)


@dataclass(frozen=True)
class Death:
    """A run that died: its recipe and seed, the step (0-based, as the table and
    ``RunResult.died_at``), and the loss at which its X is drawn."""

    recipe: str
    seed: object
    step: int
    loss: float


@dataclass
class CompareFigure:
    """What :func:`compare_figure` drew: the figure, where it was saved, the baseline of the
    ratios (None where there is nothing to divide), the panels (``"loss"``, ``"ratio"``,
    ``"flushed"``, ``"scale"``, ``"stalled"``), every death it marked, each recipe's final
    ratio to the baseline per seed (the table's numbers), the notes written on it and the Axes
    of each panel."""

    figure: object
    path: object = None
    baseline: str | None = None
    panels: tuple = ()
    axes: dict = field(default_factory=dict)  # panel -> its matplotlib Axes
    deaths: list = field(default_factory=list)
    final_ratios: dict = field(default_factory=dict)  # recipe -> {seed: ratio}
    notes: list = field(default_factory=list)


def _as_run(name, r):
    """A RunResult as it is; a plain sequence of losses (a loop of your own) as a RunResult with
    those losses, dead at its first non-finite one."""
    if hasattr(r, "losses"):
        return r
    from ..experiments import RunResult

    losses = [float(v) for v in np.asarray(r, dtype=np.float64).ravel()]
    bad = [i for i, v in enumerate(losses) if not math.isfinite(v)]
    return RunResult(str(name), losses=losses, skipped=[False] * len(losses), died_at=bad[0] if bad else None,
                     failure=f"step {bad[0]}: the loss was {losses[bad[0]]}" if bad else "")


def _by_seed(runs) -> dict:
    """``{seed: {recipe: RunResult}}`` from that or from ``{recipe: RunResult}`` (seed None)."""
    if not runs:
        raise ValueError("compare_figure needs at least one run")
    if all(isinstance(v, dict) for v in runs.values()):
        out = {s: {n: _as_run(n, r) for n, r in v.items()} for s, v in runs.items()}
        if not all(out.values()):
            raise ValueError("compare_figure: every seed needs at least one run")
        return out
    return {None: {n: _as_run(n, r) for n, r in runs.items()}}


def _losses(r) -> np.ndarray:
    y = np.asarray(r.losses, dtype=np.float64)
    return np.where(np.isfinite(y) & (y > 0), y, np.nan)


def _series(d: dict, n: int, drop=None) -> np.ndarray:
    """A per-step dict (step -> fraction) as percentages over ``n`` steps, NaN where unmeasured."""
    y = np.full(n, np.nan)
    for k, v in d.items():
        if 0 <= k < n and k != drop:
            y[k] = 100.0 * v
    return y


def _band(rows: list) -> tuple:
    """(steps, mean, min, max) over the rows (NaN: absent), at the steps some row has."""
    n = max((len(r) for r in rows), default=0)
    m = np.full((len(rows), n), np.nan)
    for i, r in enumerate(rows):
        m[i, : len(r)] = r
    keep = np.flatnonzero(np.any(np.isfinite(m), axis=0))
    m = m[:, keep]
    with np.errstate(all="ignore"):
        return keep, np.nanmean(m, axis=0), np.nanmin(m, axis=0), np.nanmax(m, axis=0)


def _draw(ax, rows, style, label=None, log=False, lw=2.2):
    """The mean of ``rows`` as a line, and their min-max band where there are several."""
    steps, mean, lo, hi = _band([np.log2(r) if log else r for r in rows])
    if steps.size == 0:
        return None
    if log:
        mean, lo, hi = 2.0**mean, 2.0**lo, 2.0**hi
    color, ls = style
    marker = "o" if steps.size == 1 else None
    (line,) = ax.plot(steps, mean, color=color, ls=ls, lw=lw, marker=marker, label=label)
    if len(rows) > 1 and steps.size > 1:
        ax.fill_between(steps, lo, hi, color=color, alpha=0.15, lw=0)
    return line


def _deaths(by_seed: dict) -> list[Death]:
    out = []
    for seed, runs in by_seed.items():
        for name, r in runs.items():
            step = r.died_at
            if step is None:
                continue
            y = _losses(r)[: step + 1]
            finite = y[np.isfinite(y)]
            out.append(Death(name, seed, int(step), float(finite[-1]) if finite.size else math.nan))
    return out


def _seeds_text(seeds) -> str:
    seeds = [s for s in seeds if s is not None]
    return f" (seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))})" if seeds else ""


def _tracks(by_seed, a, b, tol) -> float | None:
    """The largest |log(loss a / loss b)| over the steps and seeds both have, or None where that
    exceeds ``tol`` or they share fewer than two steps."""
    worst, shared = 0.0, 0
    for runs in by_seed.values():
        if a in runs and b in runs:
            x, y = _losses(runs[a]), _losses(runs[b])
            n = min(x.size, y.size)
            d = np.abs(np.log(x[:n] / y[:n]))
            d = d[np.isfinite(d)]
            shared += d.size
            worst = max(worst, float(d.max()) if d.size else 0.0)
    return worst if shared >= 2 and worst <= tol else None


def _overlaps(by_seed, names) -> list[tuple[list, float]]:
    """Groups (in drawing order) of recipes whose loss curves lie on top of each other on a log
    axis - each within 1.5% of the panel's height (in log loss) of the group's first recipe at
    every step they share - with the group's largest ratio - 1."""
    finite = np.concatenate([_losses(r) for rs in by_seed.values() for r in rs.values()])
    finite = finite[np.isfinite(finite)]
    if finite.size < 2:
        return []
    tol = 0.015 * max(float(np.log(finite.max() / finite.min())), 1e-12)
    groups: list = []
    for name in names:
        for g in groups:
            d = _tracks(by_seed, name, g[0][0], tol)
            if d is not None:
                g[0].append(name)
                g[1] = max(g[1], d)
                break
        else:
            groups.append([[name], 0.0])
    return [(g, math.expm1(d)) for g, d in groups if len(g) > 1]


def _overlap_note(group, worst, died) -> str:
    named = [f"{n} (to step {died[n]})" if n in died else n for n in group]
    return (f"on top of each other, within {100 * worst:.2g}% at every step: {', '.join(named)} "
            "(drawn widest first; the loss ratio tells them apart)")


def _loss_panel(ax, by_seed, names, styles, deaths, notes=()) -> list[str]:
    """The loss per recipe and the deaths, the curves that lie on top of each other named in the
    legend's title, ``notes`` low on the left; returns every note written on it."""
    stacked = _overlaps(by_seed, names)
    widths = {n: 2.2 + min(2.4, 7.0 / (len(g) - 1)) * (len(g) - 1 - i) for g, _ in stacked for i, n in enumerate(g)}
    died = {d.recipe: d.step for d in deaths}
    said = [_overlap_note(g, w, died) for g, w in stacked]
    for name in names:
        _draw(ax, [_losses(runs[name]) for runs in by_seed.values() if name in runs], styles[name], label=name,
              lw=widths.get(name, 2.2))
    ax.set_yscale("log")
    top = ax.get_ylim()[1]
    groups: dict = {}
    for d in deaths:
        groups.setdefault((d.recipe, d.step), []).append(d)
    for (name, step), ds in groups.items():
        y = [d.loss if math.isfinite(d.loss) else top for d in ds]
        ax.plot([step] * len(ds), y, marker="X", ms=15, ls="none", color=styles[name][0], mec="black", mew=1.2,
                label=f"{name} died at step {step}{_seeds_text([d.seed for d in ds])}", zorder=5)
    ax.set_ylabel("loss")
    ncol = 2 if len(names) + len(groups) > 8 else 1
    ax.legend(loc="best", fontsize=11, ncol=ncol, title_fontsize=10, alignment="left",
              title="\n".join(textwrap.fill(t, 38 * ncol) for t in said) or None)
    if notes:  # where the loss curves leave room: low on the left
        ax.text(0.01, 0.03, "\n".join(notes), transform=ax.transAxes, ha="left", va="bottom", fontsize=12,
                bbox={"facecolor": "white", "alpha": 0.85, "lw": 0})
    return said + list(notes)


def _ratio_rows(by_seed, name, baseline, ratios):
    """Per seed: ``name``'s loss / the baseline's at each step both have; the final ratio
    (where both lived to the end) goes into ``ratios[name][seed]``."""
    rows = []
    for seed, runs in by_seed.items():
        if name not in runs or baseline not in runs:
            continue
        a, b = _losses(runs[name]), _losses(runs[baseline])
        n = min(a.size, b.size)
        rows.append(a[:n] / b[:n])
        r, base = runs[name], runs[baseline]
        if not r.failure and not base.failure and r.losses and base.losses:
            ratios.setdefault(name, {})[seed] = r.losses[-1] / base.losses[-1]
    return rows


def _ratio_label(name, ratios: dict, died: list) -> str:
    parts = []
    if died:
        steps = sorted({d.step for d in died})
        parts.append(f"died at step {', '.join(map(str, steps))}{_seeds_text([d.seed for d in died])}")
    v = list(ratios.values())
    if len(v) == 1:
        parts.append(f"{v[0]:.3f}x at the end" + (_seeds_text(list(ratios)) if died else ""))
    elif v:
        parts.append(f"{np.mean(v):.3f}x at the end ({min(v):.3f} - {max(v):.3f}, {len(v)} seeds)")
    return f"{name}: {'; '.join(parts) or 'no ratio'}"


def _ratio_deaths(ax, by_seed, name, baseline, deaths, color) -> None:
    """An X where each run of ``name`` died, at its last ratio to the baseline (1 if it has none)."""
    for d in deaths:
        runs = by_seed[d.seed]
        if d.recipe != name or baseline not in runs:
            continue
        a, b = _losses(runs[name])[: d.step + 1], _losses(runs[baseline])[: d.step + 1]
        r = a[: b.size] / b[: a.size]
        r = r[np.isfinite(r)]
        ax.plot([d.step], [r[-1] if r.size else 1.0], marker="X", ms=12, ls="none", color=color, mec="black",
                mew=1.0, zorder=5, label="_death")


def _ratio_panel(ax, by_seed, names, styles, baseline, deaths, ratios, chosen=False) -> list[str]:
    """Each recipe's loss / the baseline's, an X where one died; returns the notes written on the
    panel.  ``chosen``: the caller named the baseline (the title then does not explain it)."""
    others = [n for n in names if n != baseline]
    notes = []
    for name in others:
        rows = _ratio_rows(by_seed, name, baseline, ratios)
        _draw(ax, rows, styles[name], label=_ratio_label(name, ratios.get(name, {}),
                                                         [d for d in deaths if d.recipe == name]))
        _ratio_deaths(ax, by_seed, name, baseline, deaths, styles[name][0])
    ax.axhline(1.0, color=styles[baseline][0], lw=1.5, ls=styles[baseline][1])
    which = "" if baseline == "fp32" or chosen else f" (no fp32 in this set: the first recipe, {baseline})"
    ax.set_title(f"loss / {baseline} loss at the same step{which}", fontsize=14)
    ax.set_ylabel(f"loss / {baseline} loss")
    base_died = sorted({d.step for d in deaths if d.recipe == baseline})
    if base_died:
        notes.append(f"the baseline {baseline} died at step {', '.join(map(str, base_died))}: the ratios stop there")
    if not others:
        notes.append("one recipe: nothing to divide")
    elif not ratios:
        notes.append(f"every run but {baseline} died (X above): no ratio to show")
    if notes:
        ax.text(0.5, 0.93, "\n".join(notes), transform=ax.transAxes, ha="center", va="top", fontsize=13,
                bbox={"facecolor": "white", "alpha": 0.85, "lw": 0})
    if others:
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2 if len(others) > 2 else 1, fontsize=11,
                  frameon=False)
    return notes


def _carried(name: str) -> str | None:
    """How a named recipe keeps the updates that stall (Kahan buffer, stochastic rounding), or None."""
    from ..experiments import RECIPES

    rounding = RECIPES[name].update_rounding if name in RECIPES else "nearest"
    return {"kahan": "kept in the Kahan buffer", "stochastic": "kept on average"}.get(rounding)


def _scaled(r) -> bool:
    return bool(r.scaler) or any(s != 1.0 for s in r.scales)


def _rows(by_seed, name, key) -> list:
    rows = []
    for runs in by_seed.values():
        r = runs.get(name)
        if r is None or not r.losses:
            continue
        if key == "scale":
            if _scaled(r):
                rows.append(np.asarray(r.scales, dtype=np.float64))
        else:  # the update that killed a run left nothing 'stalled': that step is left out
            d = r.act_grad_flushed if key == "flushed" else r.stalled
            rows.append(_series(d, len(r.losses), drop=r.died_at if key == "stalled" else None))
    return rows


def _panel_runs(by_seed, names, key) -> tuple[list, list]:
    """(recipes to draw, recipes measured at 0 at every step) for one of the right panels."""
    drawn, zero = [], []
    for name in names:
        rows = [r for r in _rows(by_seed, name, key) if np.any(np.isfinite(r))]
        if not rows:
            continue
        if key == "scale" or any(np.nanmax(r) > 0 for r in rows):
            drawn.append(name)
        else:
            zero.append(name)
    return drawn, zero


def _skips(ax, by_seed, drawn) -> str:
    """The skipped steps as X on the loss scale; the note saying how many."""
    counts = {}
    for name in drawn:
        for runs in by_seed.values():
            r = runs.get(name)
            idx = np.flatnonzero(np.asarray(r.skipped, dtype=bool)) if r is not None else []
            if len(idx):
                ax.plot(idx, np.asarray(r.scales)[idx], "X", ms=10, ls="none", color=BAND_COLORS["flush"], zorder=5)
                counts[name] = counts.get(name, 0) + len(idx)
    if not counts:
        return "no step was skipped"
    return "steps skipped: " + ", ".join(f"{n} {k}" for n, k in counts.items())


def _wrap(note: str) -> str:
    """A right panel's note in lines that fit across it (fontsize 11), whatever the number of recipes it names."""
    return textwrap.fill(note, 60)


def _diag_panel(ax, by_seed, names, styles, key, title, ylabel) -> str:
    """One of the right panels; returns its note."""
    drawn, zero = _panel_runs(by_seed, names, key)
    centred = False
    for name in drawn:
        carried = _carried(name) if key == "stalled" else None
        label = f"{name}: {carried}" if carried else name
        _draw(ax, _rows(by_seed, name, key), styles[name], label=label, log=key == "scale", lw=1.8)
    if key == "scale":
        ax.set_yscale("log", base=2)
        note = _skips(ax, by_seed, drawn)
        lo, hi = ax.get_ylim()
        ax.set_ylim(lo / (hi / lo) ** 0.1, hi * (hi / lo) ** (0.35 + 0.15 * _wrap(note).count("\n")))  # the note's room
    elif zero and not drawn:  # nothing but zeros: drawn at 0 and said across the panel, not an empty frame
        for i, name in enumerate(zero):  # widest first, as the loss panel's curves on top of each other
            _draw(ax, _rows(by_seed, name, key), styles[name], label=f"{name}: 0% at every step",
                  lw=1.8 + min(2.4, 7.0 / max(1, len(zero) - 1)) * (len(zero) - 1 - i))
        ax.set_ylim(-0.05, 1.0)
        few = len(zero) <= 6  # many: in fewer, smaller lines that fit the panel
        listed = "\n".join(zero) if few else textwrap.fill(", ".join(zero), 36, break_on_hyphens=False)
        ax.text(0.5, 0.5, "0% at every step:\n" + listed, transform=ax.transAxes, ha="center",
                va="center", fontsize=16 if few else 11, color=BAND_COLORS["flush"] if key == "flushed" else "black")
        note, centred = f"0% at every step: {', '.join(zero)}", True
    else:
        note = f"0% at every step: {', '.join(zero)}" if zero else ""
        ax.set_ylim(0, ax.get_ylim()[1] * (1.3 + 0.15 * _wrap(note).count("\n")))
    if note and not centred:
        ax.text(0.01, 0.97, _wrap(note), transform=ax.transAxes, ha="left", va="top", fontsize=11,
                bbox={"facecolor": "white", "alpha": 0.85, "lw": 0})
    ax.set_title(title, fontsize=14)
    ax.set_ylabel(ylabel, fontsize=13)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=10, frameon=False)  # beside: covers nothing
    return note


def _absent(by_seed, names, drawn: list) -> list[str]:
    """What a left-out right panel would have shown: nothing, though the runs measured it."""
    out = []
    for key, what in (("flushed", "no run flushed an activation gradient to 0"),
                      ("stalled", "no run left a parameter unchanged (no update stalled)")):
        if key not in drawn and _panel_runs(by_seed, names, key)[1]:
            out.append(what)
    return out


def _layout(plt, panels: list, entries: int, n: int):
    """The figure and its Axes: loss and ratio on the left, the right panels (if any) beside.  Its
    height makes room for the legends of ``n`` recipes: below the ratio panel, in two columns past
    two, and beside each right panel, the longest of which holds ``entries`` (0.2 inch each)."""
    height = max(10.5, 8 + 0.26 * math.ceil((n - 1) / 2), len(panels) * (0.2 * entries + 0.5) + 0.5)
    fig = plt.figure(figsize=(19 if panels else 11.5, height), layout="constrained")
    with plt.rc_context(STYLE):
        left, right = fig.subfigures(1, 2, width_ratios=(1.15, 1), wspace=0.03) if panels else (fig, None)
        top, bottom = left.subplots(2, 1, sharex=True, height_ratios=(3, 2))
        side = list(right.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]) if panels else []
    return fig, top, bottom, side


def _steps_axis(axes, by_seed) -> None:
    """Every panel's x axis: the steps 0 .. n-1 of the longest run, integer ticks."""
    from matplotlib.ticker import MaxNLocator

    n = max(len(r.losses) for rs in by_seed.values() for r in rs.values())
    pad = max(0.5, 0.02 * (n - 1))
    for ax in axes:
        ax.set_xlim(-pad, n - 1 + pad)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _row_figure(by_seed, names, baseline, chosen, panels, title, path) -> CompareFigure:
    """The chosen ``panels`` side by side, in the order given (the labs' figures)."""
    if isinstance(panels, str) or not panels or any(p not in PANELS for p in panels):
        raise ValueError(f"panels: choose from {', '.join(PANELS)}, got {panels!r}")
    styles, deaths = recipe_styles(names), _deaths(by_seed)
    text = {key: (t, ylabel) for key, t, ylabel in _PANELS}
    plt = pyplot()
    # tall enough for every recipe's entry in a legend below a panel (two columns) or beside it (0.2 inch each)
    fig = plt.figure(figsize=(6.5 * len(panels), max(5.8, 4.6 + 0.12 * len(names))), layout="constrained")
    ratios: dict = {}
    notes: list = []
    with plt.rc_context(STYLE):
        axes = list(fig.subplots(1, len(panels), squeeze=False)[0])
        for ax, key in zip(axes, panels):
            if key == "loss":
                notes += _loss_panel(ax, by_seed, names, styles, deaths)
            elif key == "ratio":
                notes += _ratio_panel(ax, by_seed, names, styles, baseline, deaths, ratios, chosen)
            else:
                notes.append(_diag_panel(ax, by_seed, names, styles, key, *text[key]))
            ax.set_xlabel("step")
        _steps_axis(axes, by_seed)
        if title:
            fig.suptitle(title, fontsize=15)
    if path is not None:
        fig.savefig(path, bbox_inches="tight")
    return CompareFigure(fig, path, baseline if len(names) > 1 else None, tuple(panels), dict(zip(panels, axes)),
                         deaths, ratios, [n for n in notes if n])


def compare_figure(runs, *, baseline: str | None = None, panels=None, title: str | None = None,
                   path=None) -> CompareFigure:
    """Draw a recipe comparison (see the module docstring); save it to ``path`` if given.

    ``runs``: ``{recipe: RunResult}`` (one seed) or ``{seed: {recipe: RunResult}}``; a plain
    sequence of losses stands for a run of your own loop (dead at its first non-finite loss).
    ``baseline``: the recipe the ratios divide by (default: fp32 if present, else the first).
    ``panels``: None for the full figure (loss and ratio on the left, beside them the panels the
    runs have data for), or some of :data:`PANELS` drawn side by side in that order.
    Returns a :class:`CompareFigure` with the data it drew.
    """
    by_seed = _by_seed(runs)
    names = list(dict.fromkeys(n for rs in by_seed.values() for n in rs))
    chosen = baseline is not None
    baseline = baseline or ("fp32" if "fp32" in names else names[0])
    if baseline not in names:
        raise ValueError(f"baseline {baseline!r} is not among the recipes ({', '.join(names)})")
    if panels is not None:
        return _row_figure(by_seed, names, baseline, chosen, panels, title, path)
    styles, deaths = recipe_styles(names), _deaths(by_seed)
    drawn = {p: _panel_runs(by_seed, names, p[0])[0] for p in _PANELS}
    panels = [p for p in _PANELS if drawn[p]]
    plt = pyplot()
    fig, top, bottom, side = _layout(plt, panels, max((len(drawn[p]) for p in panels), default=0), len(names))
    ratios: dict = {}
    with plt.rc_context(STYLE):
        notes = _ratio_panel(bottom, by_seed, names, styles, baseline, deaths, ratios, chosen)
        for ax, (key, t, ylabel) in zip(side, panels):
            notes.append(_diag_panel(ax, by_seed, names, styles, key, t, ylabel))
        notes += _loss_panel(top, by_seed, names, styles, deaths, _absent(by_seed, names, [p[0] for p in panels]))
        for ax in (bottom, *side[-1:]):
            ax.set_xlabel("step")
        _steps_axis((top, bottom, *side), by_seed)
        seeds = [s for s in by_seed if s is not None]
        top.set_title(title or "loss per recipe" + (f", mean and range over seeds {', '.join(map(str, seeds))}"
                                                    if len(seeds) > 1 else ""), fontsize=15)
    if path is not None:
        fig.savefig(path, bbox_inches="tight")
    keys = ("loss", "ratio", *(p[0] for p in panels))
    return CompareFigure(fig, path, baseline if len(names) > 1 else None, keys, dict(zip(keys, (top, bottom, *side))),
                         deaths, ratios, [n for n in notes if n])
