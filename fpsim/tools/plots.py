"""Every figure fpsim draws, in one style, with one colour per format.

Each function returns the matplotlib ``Figure`` (drawing into ``ax`` when given) and saves it
to ``path`` when given.  pyplot is imported only when a figure is drawn; without a display
(and with no backend chosen) the Agg backend is used, so the functions work on servers and
in CI.  The numbers behind the gradient histogram come from :func:`histogram_data`, a pure
function the tests check as numbers.

Colours: :data:`FORMAT_COLORS` (one per format, used in every figure) and
:data:`BAND_COLORS` (what rounding does: flushed to zero, subnormal, overflow).  Fonts are
large enough for a projector.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass, field

import numpy as np

from ..checks import check_at_least, check_positive
from ..formats import FORMATS, LOW_FORMATS, get_format, uint_for_bits, ulp
from ..formats.survival import float_values, survival

__all__ = ["FORMAT_COLORS", "BAND_COLORS", "STYLE", "HistogramData", "format_bands", "histogram_data",
           "gradient_histogram", "loss_scale_plot", "ulp_plot", "number_line", "recipe_color", "recipe_styles",
           "pyplot", "finish_figure"]

FORMAT_COLORS = {
    "float32": "#4d4d4d",
    "float16": "#1f77b4",
    "bfloat16": "#2ca02c",
    "float8_e4m3fn": "#9467bd",
    "float8_e5m2": "#e377c2",
}
BAND_COLORS = {"flush": "#d62728", "subnormal": "#ff9f1c", "normal": None, "overflow": "#1a1a1a"}
STYLE = {
    "font.size": 14,
    "axes.titlesize": 16,
    "axes.labelsize": 15,
    "xtick.labelsize": 13,
    "ytick.labelsize": 13,
    "legend.fontsize": 12,
    "lines.linewidth": 2.2,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "figure.dpi": 100,
    "savefig.dpi": 150,
}


def pyplot():
    """pyplot, imported on first use; Agg when nothing can display a window."""
    if "matplotlib.pyplot" not in sys.modules and not os.environ.get("MPLBACKEND"):
        headless = sys.platform.startswith("linux") and not (os.environ.get("DISPLAY")
                                                             or os.environ.get("WAYLAND_DISPLAY"))
        if headless:
            import matplotlib

            matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _figure(ax, nrows=1, figsize=(10, 5.5), sharex=False):
    """(figure, list of axes): new ones, or the caller's."""
    plt = pyplot()
    if ax is not None:
        axes = list(ax) if isinstance(ax, list | tuple | np.ndarray) else [ax]
        if len(axes) != nrows:
            raise ValueError(f"this figure needs {nrows} Axes, got {len(axes)}")
        return axes[0].figure, axes
    # The figure is made outside rc_context: the first figure loads the backend, and Jupyter's
    # inline backend turns interactive mode on as it loads.  Inside an rc_context that setting
    # would be undone on exit, and no later figure would show in a notebook.
    fig = plt.figure(figsize=figsize, dpi=STYLE["figure.dpi"])
    with plt.rc_context(STYLE):
        axs = fig.subplots(nrows, 1, sharex=sharex, squeeze=False)
    return fig, list(axs[:, 0])


def _label(fig, ax, ax_, xlabel: str, ylabel: str, title: str, legend: str = "best") -> None:
    """Axis labels, title and legend of ``ax_``; the layout tightened when the figure is ours
    (no ``ax`` was given).  Called inside the style's rc_context."""
    ax_.set_xlabel(xlabel)
    ax_.set_ylabel(ylabel)
    ax_.set_title(title)
    ax_.legend(loc=legend)
    if ax is None:
        fig.tight_layout()


def finish_figure(fig, path):
    """``fig``, saved to ``path`` first (tight bounding box) if a path is given."""
    if path is not None:
        fig.savefig(path, bbox_inches="tight")
    return fig


def recipe_color(name: str):
    """The colour of a training recipe: its format's (``fp16-master`` -> float16), else None."""
    n = name.lower()
    for key, fmt in (("e4m3", "float8_e4m3fn"), ("e5m2", "float8_e5m2"), ("fp8", "float8_e4m3fn"),
                     ("bf16", "bfloat16"), ("bfloat16", "bfloat16"), ("fp16", "float16"), ("float16", "float16"),
                     ("half", "float16"), ("fp32", "float32"), ("float32", "float32")):
        if key in n:
            return FORMAT_COLORS[fmt]
    return None


_SPARE_COLORS = ("#ff7f0e", "#8c564b", "#bcbd22", "#17becf", "#7f7f7f", "#d62728")
DASHES = ("-", "--", ":", "-.")


def recipe_styles(names) -> dict:
    """name -> (colour, dash), the one assignment every comparison figure uses: a recipe gets its
    format's colour (:func:`recipe_color`), a name without one the next spare colour, and names
    that share a colour get the next dash style, in the order given."""
    seen: dict = {}
    spare = iter(_SPARE_COLORS * 4)
    out = {}
    for name in names:
        color = recipe_color(name) or next(spare)
        k = seen.get(color, 0)
        seen[color] = k + 1
        out[name] = (color, DASHES[k % len(DASHES)])
    return out


# --------------------------------------------------------------------------------------------
# gradient histogram: the numbers


def format_bands(fmt) -> dict[str, tuple[float, float]]:
    """Where a format puts |x|, in log2|x| (exact: every edge is log2 of a format constant).

    ``flush``: |x| <= flush threshold (half the smallest subnormal) rounds to 0;
    ``subnormal``: [smallest subnormal, tiny); ``normal``: [tiny, max);
    ``overflow``: from max up (values past max + half an ulp become inf / NaN).
    Between the flush edge and the smallest subnormal values round UP to the smallest
    subnormal.  float16: flush (-inf, -25], subnormal [-24, -14), normal [-14, log2 65504).
    """
    f = get_format(fmt)
    ss, tiny, mx = math.log2(f.smallest_subnormal), math.log2(f.tiny), math.log2(f.max)
    return {"flush": (-math.inf, ss - 1), "subnormal": (ss, tiny), "normal": (tiny, mx), "overflow": (mx, math.inf)}


@dataclass
class HistogramData:
    """A histogram of log2|g| over the non-zero finite values, and what each format does.

    ``edges`` (float64, log2 units) and ``counts`` (int) as ``np.histogram`` gives them;
    ``bands[fmt]`` from :func:`format_bands`; ``percent[fmt]`` = {"flushed", "subnormal",
    "overflow"}: % of the non-zero finite values; with a loss ``scale``, ``percent_scaled``
    the same for the values times the scale, whose histogram is this one shifted by log2(scale).
    """

    edges: np.ndarray
    counts: np.ndarray
    n: int
    zeros: int
    nonfinite: int
    bands: dict[str, dict]
    percent: dict[str, dict[str, float]]
    scale: float | None = None
    percent_scaled: dict[str, dict[str, float]] | None = field(default=None)

    @property
    def nonzero(self) -> int:
        return self.n - self.zeros - self.nonfinite

    @property
    def shift(self) -> float:
        """log2(scale): how far the scaled histogram moves right."""
        return math.log2(self.scale) if self.scale else 0.0

    @property
    def scaled_edges(self) -> np.ndarray:
        return self.edges + self.shift


def _percent(values, fname, scale=1.0) -> dict[str, float]:
    s = survival(values, fname, scale)
    return {"flushed": 100 * s["frac_flushed"], "subnormal": 100 * s["frac_subnormal"],
            "overflow": 100 * s["frac_overflow"]}


def histogram_data(values, formats=LOW_FORMATS, bins=None, scale=None) -> HistogramData:
    """The numbers behind :func:`gradient_histogram`.

    x = log2|g| of the non-zero finite ``values`` (taken exactly, in float64).  ``bins``:
    None for quarter-binade bins on whole-binade bounds around the data; an int for that many
    equal bins between floor(min x) and ceil(max x); or an array of edges.  Percentages are
    computed with :func:`fpsim.classify` on the values (and on values * ``scale``, the product
    in float64, rounded once).
    """
    if scale is not None:
        check_positive(scale, "scale")
    v = float_values(values)
    finite = np.isfinite(v)
    a = np.abs(v[finite & (v != 0)]).astype(np.float64)
    x = np.log2(a)
    if bins is None or isinstance(bins, int | np.integer):
        lo = math.floor(x.min()) if x.size else -1.0
        hi = math.ceil(x.max()) if x.size else 0.0
        if hi <= lo:
            hi = lo + 1
        if bins is None:
            edges = np.arange(lo, hi + 0.125, 0.25)
        else:
            check_at_least(bins, 1, "bins")
            edges = np.linspace(lo, hi, int(bins) + 1)
    else:
        edges = np.asarray(bins, dtype=np.float64)
        if edges.ndim != 1 or edges.size < 2 or np.any(np.diff(edges) <= 0):
            raise ValueError("bins given as edges must be an increasing 1-d array of at least two numbers")
    counts = np.histogram(x, edges)[0]
    names = [get_format(f).name for f in formats]
    percent = {n: _percent(a, n) for n in names}
    scaled = {n: _percent(a, n, scale) for n in names} if scale is not None else None
    return HistogramData(edges=edges, counts=counts, n=int(v.size), zeros=int(np.count_nonzero(finite & (v == 0))),
                         nonfinite=int(v.size - np.count_nonzero(finite)), bands={n: format_bands(n) for n in names},
                         percent=percent, scale=float(scale) if scale is not None else None, percent_scaled=scaled)


# --------------------------------------------------------------------------------------------
# gradient histogram: the figure


def _pct_text(p: dict) -> str:
    def one(v):
        if v == 0 or v == 100:
            return f"{v:g}%"
        if v > 99.9:  # not "100.0%" when some values survive
            return f"{v:.2f}%" if v < 99.995 else ">99.99%"
        return f"{v:.2g}%" if v < 0.1 else f"{v:.1f}%"

    text = f"{one(p['flushed'])} flushed to 0, {one(p['subnormal'])} subnormal"
    if p["overflow"]:
        text += f", {one(p['overflow'])} overflow"
    return text


def gradient_histogram(values, formats=LOW_FORMATS, scale=None, ax=None, *, bins=None, title=None, path=None):
    """Histogram of log2|g| with, in one panel per format, the zones rounding creates.

    Red: flushed to zero; amber: subnormal (few significant bits); tinted: the normal range;
    dark red: overflow.  Each panel states the % of the non-zero values the format flushes
    and leaves subnormal.  ``scale=S`` adds the histogram shifted by log2(S), as loss
    scaling moves it, with the percentages after scaling.  ``values`` may also be a
    :class:`HistogramData` (e.g. from an audit).  ``ax``: one Axes per format.
    """
    plt = pyplot()
    names = [get_format(f).name for f in formats]
    data = values if isinstance(values, HistogramData) else histogram_data(values, names, bins=bins, scale=scale)
    if isinstance(values, HistogramData) and scale is not None and data.scale != scale:
        raise ValueError("pass scale to histogram_data (the percentages after scaling need the values)")
    fig, axes = _figure(ax, len(names), figsize=(11, 1.2 + 2.2 * len(names)), sharex=True)
    e, c = data.edges, data.counts
    nz = np.flatnonzero(c)
    dlo, dhi = (e[nz[0]], e[nz[-1] + 1]) if nz.size else (e[0], e[-1])
    if data.scale:
        dhi = max(dhi, dhi + data.shift)
        dlo = min(dlo, dlo + data.shift)
    # Show the data, and at least float16's whole story (flush edge -25 up to max 2^16).
    xlo, xhi = min(dlo, -26.0) - 1, max(dhi, 17.0) + 1
    with plt.rc_context(STYLE):
        for i, (ax_, name) in enumerate(zip(axes, names)):
            b = data.bands.get(name) or format_bands(name)
            fe = b["flush"][1]
            # Values between the flush edge and the smallest subnormal round up to it: shaded as subnormal.
            spans = (("flush", xlo - 5, fe, "flushed to 0"), ("subnormal", fe, b["subnormal"][1], "subnormal"),
                     ("normal", *b["normal"], None), ("overflow", b["overflow"][0], xhi + 5, "overflow"))
            for band, lo, hi, label in spans:
                lo, hi = max(lo, xlo - 5), min(hi, xhi + 5)
                if hi > lo:
                    ax_.axvspan(lo, hi, color=BAND_COLORS[band] or FORMAT_COLORS[name], lw=0,
                                alpha=0.10 if band == "normal" else 0.22, label=label if i == 0 else None)
            ax_.stairs(c, e, fill=True, color="#8c8c8c", alpha=0.85, label="true gradients" if i == 0 else None)
            if data.scale:
                ax_.stairs(c, data.scaled_edges, fill=False, color=FORMAT_COLORS[name], lw=2.2,
                           label=f"x {data.scale:g} (loss scale)" if i == 0 else None)
            text = f"{name}: {_pct_text(data.percent[name])}"
            if data.scale and data.percent_scaled:
                text += f"\nscaled x {data.scale:g}: {_pct_text(data.percent_scaled[name])}"
            ax_.text(0.01, 0.95, text, transform=ax_.transAxes, va="top", ha="left", fontsize=13,
                     color=FORMAT_COLORS[name], bbox={"facecolor": "white", "alpha": 0.8, "lw": 0})
            ax_.set_ylabel("count")
            ax_.set_xlim(xlo, xhi)
            # Headroom above the tallest bar for the one or two lines of percentages.
            ax_.set_ylim(0, max(1, int(c.max()) if c.size else 1) * (1.8 if data.scale else 1.45))
        axes[-1].set_xlabel("log2 |gradient|")
        axes[0].set_title(title or f"where the gradients lie ({data.nonzero:,} non-zero values)")
        axes[0].legend(loc="upper right", ncol=2, fontsize=11)
        if ax is None:
            fig.tight_layout()
    return finish_figure(fig, path)


# --------------------------------------------------------------------------------------------
# training curves


def loss_scale_plot(scales, skipped=(), ax=None, title="dynamic loss scale", *, path=None):
    """The loss scale at each step (log2 axis), skipped steps (inf/NaN gradients) as red X.

    ``skipped``: booleans, one per step, or the indexes of the skipped steps."""
    plt = pyplot()
    s = np.asarray(scales, dtype=np.float64).ravel()
    if s.size == 0:
        raise ValueError("loss_scale_plot needs at least one scale")
    sk = np.asarray(skipped)
    if sk.size and sk.dtype == np.bool_:
        if sk.size != s.size:
            raise ValueError(f"skipped as booleans needs one per step ({s.size}), got {sk.size}")
        idx = np.flatnonzero(sk)
    else:
        idx = sk.astype(np.int64).ravel() if sk.size else np.zeros(0, np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= s.size):
            raise ValueError(f"skipped step indexes must lie in [0, {s.size}), got {idx.min()}..{idx.max()}")
    fig, (ax_,) = _figure(ax)
    with plt.rc_context(STYLE):
        ax_.step(np.arange(s.size), s, where="post", color=FORMAT_COLORS["float16"], label="loss scale")
        ax_.plot(idx, s[idx], "X", ms=11, color=BAND_COLORS["flush"], ls="none",
                 label=f"skipped step ({idx.size})")
        ax_.set_yscale("log", base=2)
        _label(fig, ax, ax_, "step", "loss scale", title)
    return finish_figure(fig, path)


# --------------------------------------------------------------------------------------------
# the formats themselves


def ulp_plot(formats=tuple(FORMATS), ax=None, title="spacing of representable numbers (ulp)", *, path=None):
    """ulp(x) against |x| for each format, log-log (base 2), from the smallest subnormal to
    max: flat through the subnormal range (spacing = smallest subnormal), then doubling at
    every power of two.  A dot marks the smallest normal (tiny)."""
    plt = pyplot()
    names = [get_format(f).name for f in formats]
    fig, (ax_,) = _figure(ax, figsize=(10, 6))
    with plt.rc_context(STYLE):
        for name in names:
            f = get_format(name)
            starts = np.ldexp(1.0, np.arange(f.emin, f.emax + 1))  # each normal binade
            xs = np.concatenate([[f.smallest_subnormal], starts, [f.max]])
            ys = ulp(xs, f)
            ax_.step(xs, ys, where="post", color=FORMAT_COLORS[name], label=name)
            ax_.scatter([f.tiny], [ulp(f.tiny, f)], color=FORMAT_COLORS[name], s=50, zorder=3)
        ax_.set_xscale("log", base=2)
        ax_.set_yscale("log", base=2)
        _label(fig, ax, ax_, "|x|", "ulp(x): gap to the next number", title, legend="upper left")
    return finish_figure(fig, path)


def _all_values(f) -> np.ndarray:
    """Every distinct finite value of a format of at most 16 bits, sorted (float64)."""
    if f.bits > 16:
        raise ValueError(f"number_line draws formats of at most 16 bits, not {f.name}")
    pats = np.arange(2**f.bits, dtype=uint_for_bits(f.bits))
    with np.errstate(invalid="ignore"):  # ml_dtypes' bfloat16 NaN patterns warn when widened
        v = pats.view(f.dtype).astype(np.float64)
    return np.unique(v[np.isfinite(v)])  # also merges +0 and -0


def number_line(fmt, lo=None, hi=None, ax=None, title=None, *, path=None):
    """The representable values of a small format as ticks on a line.

    Defaults: every finite value of the fp8 formats ([-max, max]); for float16 / bfloat16 the
    window [1 - 32 eps, 1 + 64 eps] around 1.0, where the spacing doubles.  Subnormal values
    are amber, normal ones the format's colour, zero black; the subnormal range is shaded.
    """
    plt = pyplot()
    f = get_format(fmt)
    vals = _all_values(f)
    if lo is None and hi is None and f.bits <= 8:
        lo, hi = -f.max, f.max
    elif lo is None and hi is None:
        lo, hi = 1 - 32 * f.eps, 1 + 64 * f.eps
    lo = vals[0] if lo is None else float(lo)
    hi = vals[-1] if hi is None else float(hi)
    if not lo < hi:
        raise ValueError(f"number_line needs lo < hi, got {lo} and {hi}")
    v = vals[(vals >= lo) & (vals <= hi)]
    if v.size == 0:
        raise ValueError(f"no {f.name} values lie in [{lo}, {hi}]")
    sub = (v != 0) & (np.abs(v) < f.tiny)
    fig, (ax_,) = _figure(ax, figsize=(12, 2.6))
    with plt.rc_context(STYLE):
        if lo < f.tiny and hi > -f.tiny:
            ax_.axvspan(max(lo, -f.tiny), min(hi, f.tiny), color=BAND_COLORS["subnormal"], alpha=0.15, lw=0)
        for mask, color, label in ((v == 0, "black", "zero"), (sub, BAND_COLORS["subnormal"], "subnormal"),
                                   ((v != 0) & ~sub, FORMAT_COLORS[f.name], "normal")):
            if np.any(mask):
                ax_.vlines(v[mask], 0, 1, color=color, lw=1.2, label=f"{label} ({int(mask.sum())})")
        ax_.set_ylim(0, 1.6)
        ax_.set_yticks([])
        ax_.grid(False)
        ax_.spines["left"].set_visible(False)
        ax_.set_xlim(lo - 0.01 * (hi - lo), hi + 0.01 * (hi - lo))
        ax_.set_title(title or f"the {v.size} {f.name} values in [{lo:g}, {hi:g}]")
        ax_.legend(loc="upper right", ncol=3, fontsize=11)
        if ax is None:
            fig.tight_layout()
    return finish_figure(fig, path)
