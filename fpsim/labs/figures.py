"""The gradient histogram as the labs show it: :func:`fpsim.tools.plots.gradient_histogram` with its
legend moved below the panels, where it cannot cover the percentages printed in each panel, and
a power-of-two scale written as 2^k and named for what it is (a loss scale, or an fp8 tensor's
own scale)."""

from __future__ import annotations

import math

__all__ = ["histogram"]


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
