"""Figures the labs draw.

:func:`histogram`: the gradient histogram as the labs show it - :func:`fpsim.tools.plots.gradient_histogram`
with its legend moved below the panels, where it cannot cover the percentages printed in each panel, and
a power-of-two scale written as 2^k and named for what it is (a loss scale, or an fp8 tensor's
own scale).

:func:`block_figure` (lab 10): one block of values through several block formats, value by value -
which come back, which become 0, which are clamped, and each block's scale.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["histogram", "block_figure"]



def _pretty(scale: float) -> str:
    k = math.log2(scale)
    return f"2^{int(k)}" if k == int(k) else f"{scale:g}"


def histogram(values, formats=("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"), scale=None, *,
              scale_name: str = "loss scale", title=None, path=None):
    """:func:`fpsim.tools.plots.gradient_histogram` of ``values`` (one panel per format; with ``scale``
    the histogram shifted by log2(scale) as an outline), legend below the panels, the scale
    written 2^k and called ``scale_name`` in the legend.  Returns the figure."""
    from ..tools import plots

    fig = plots.gradient_histogram(values, formats=formats, scale=scale, title=title)
    if scale is not None:
        raw, nice = f"x {scale:g}", f"x {_pretty(scale)}"
        for ax in fig.axes:
            for t in ax.texts:
                t.set_text(t.get_text().replace(raw, nice))
    legend = fig.axes[0].get_legend()
    if legend is not None:
        handles = list(legend.legend_handles)
        labels = [t.get_text() for t in legend.get_texts()]
        if scale is not None:
            labels = [f"x {_pretty(scale)} ({scale_name})" if "(loss scale)" in lab else lab for lab in labels]
        legend.remove()
        with plots.pyplot().rc_context(plots.STYLE):
            fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False, fontsize=11)
        height = fig.get_size_inches()[1]
        fig.tight_layout(rect=(0, 0.55 / height, 1, 1))
    return plots.finish_figure(fig, path)


def _block_marks(x, bq):
    """(dequantized float32 values, lost to 0, clamped to the element's max) of ``x`` quantized as ``bq``."""
    back = bq.dequantize().astype(np.float64)
    lost = (x != 0) & (back == 0)
    at_max = np.abs(bq.elements.astype(np.float32)) == np.float32(bq.format.element.max)
    return back, lost, at_max & (np.abs(x) > np.abs(back))


def _block_panel(ax, x, fmt, zero_row):
    """One format's panel; returns its title."""
    from ..formats import quantize

    bq = quantize(x.astype(np.float32), fmt)
    back, lost, clamped = _block_marks(x, bq)
    i = np.arange(x.size)
    kept = ~lost & (x != 0)
    ax.plot(i[x != 0], np.abs(x[x != 0]), "o", mfc="none", mec="0.45", ms=9, mew=1.3, label="|value| in")
    ax.plot(i[kept], np.abs(back[kept]), "o", color="#1f77b4", ms=6, label="|value| back")
    ax.plot(i[lost], np.full(lost.sum(), zero_row), "X", color="#d62728", ms=10, ls="none", label="lost to 0")
    ax.plot(i[clamped], np.abs(back[clamped]), "v", color="black", ms=11, ls="none", label="clamped: the element's max x scale")
    for k, f in enumerate(bq.stats.scale.ravel()):
        edge = k * bq.block
        if k:
            ax.axvline(edge - 0.5, color="0.3", lw=1.2, ls="--")
        ax.text(edge - 0.3, 1.02, f"block scale {float(f):.4g}", transform=ax.get_xaxis_transform(), fontsize=11,
                va="bottom")
    t = bq.stats.totals()
    return (f"{bq.format.name} (blocks of {bq.block}): {t['underflow']} of the {int(np.count_nonzero(x))} non-zero "
            f"values lost to 0, {t['saturated']} clamped")


def block_figure(block, formats=("mxfp4_e2m1", "nvfp4", "mxfp8_e4m3"), *, title=None, path=None):
    """``block`` (1-D, float32; its length a multiple of every format's block) through each of
    ``formats`` with :func:`fpsim.quantize` (default options: the spec's scale rounding, to
    nearest), one panel each: every non-zero value as it went in (open circle, |x| on a log axis)
    and as ``dequantize()`` returns it (dot), a value that came back 0 as a red X on the row
    marked 0, one whose scaled magnitude lay beyond the element's max (clamped) as a triangle,
    the blocks' edges and decode factors; the title counts what the quantizer's ``stats`` count.
    Returns the figure (saved to ``path`` if given)."""
    from matplotlib.ticker import NullLocator

    from ..tools import plots

    x = np.asarray(block, dtype=np.float32).astype(np.float64)
    if x.ndim != 1 or not np.any(x != 0) or not np.all(np.isfinite(x)):
        raise ValueError(f"block: a 1-D array of finite values, not all 0, got shape {x.shape}")
    nz = np.abs(x[x != 0])
    lo, hi = float(nz.min()), float(nz.max())
    zero_row = lo / 8
    plt = plots.pyplot()
    fig = plt.figure(figsize=(12, 3.3 * len(formats) + 0.8), layout="constrained")  # outside rc_context (see plots)
    with plt.rc_context(plots.STYLE):
        axes = fig.subplots(len(formats), 1, sharex=True, squeeze=False)[:, 0]
        for ax, fmt in zip(axes, formats):
            ax.set_yscale("log")
            ax.set_ylim(zero_row / 2, hi * 3)
            ax.set_title(_block_panel(ax, x, fmt, zero_row), fontsize=14, pad=24)
            ax.axhline(math.sqrt(zero_row * lo / 2), color="0.6", lw=0.8)
            ticks = [t for t in ax.get_yticks() if lo / 2 <= t <= hi * 3]
            ax.set_yticks([zero_row, *ticks], ["0", *(f"{t:g}" for t in ticks)])
            ax.yaxis.set_minor_locator(NullLocator())  # the decades say enough; minor ticks cost a second
            ax.set_ylabel("|value|")
        axes[-1].set_xlabel("position in the block")
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncol=4, frameon=False, fontsize=12)
        if title:
            fig.suptitle(title, fontsize=15)
    return plots.finish_figure(fig, path)
