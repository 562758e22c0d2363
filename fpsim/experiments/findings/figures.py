"""The figures findings share, and drawing a finding's figure from its record and its result.

A finding names its figure: a standard one from :data:`STANDARD` (with ``figure_options``) or a
module-level ``draw(ax, series)`` of its own.  A standard figure is two functions: ``series``
makes its plain data from the sweep's results (in the process that ran the finding), ``draw``
draws that data onto a matplotlib Axes (in the process that saves the figure) - so a result from
a worker process or a Dask cluster draws like one made here.  This layer imports no plotting
library: the caller makes the Axes and saves the figure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["STANDARD", "StandardFigure", "draw_finding", "loss_ratio_series", "draw_loss_ratio"]


@dataclass(frozen=True)
class StandardFigure:
    """A figure several findings draw: ``series(results, **options)`` -> plain data,
    ``draw(ax, series, **options)``."""

    series: Callable
    draw: Callable


def loss_ratio_series(results: dict, base: str = "fp32", title: str = "", sweep: str | None = None) -> dict:
    """``{"losses": {recipe: [loss curve per seed]}}`` of one sweep's results (``sweep`` names it
    when the finding has several)."""
    runs = results[sweep] if sweep is not None else results
    return {"losses": {name: [list(r.losses) for r in rs] for name, rs in runs.items()}}


def draw_loss_ratio(ax, series: dict, base: str = "fp32", title: str = "", sweep: str | None = None) -> None:
    """Each recipe's loss over the baseline's, step by step (seed mean), on ``ax``."""
    losses = series["losses"]
    ref = np.mean(losses[base], axis=0)
    for name, curves in losses.items():
        if name == base:
            continue
        n = min(len(c) for c in curves)
        if n:
            ax.plot(np.mean([c[:n] for c in curves], axis=0) / ref[:n], label=name)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xlabel("step")
    ax.set_ylabel(f"loss / {base}")
    ax.set_title(title)
    ax.legend(fontsize=8)


STANDARD: dict[str, StandardFigure] = {"loss-ratio": StandardFigure(loss_ratio_series, draw_loss_ratio)}


def draw_finding(finding, result, ax) -> bool:
    """Draw ``result``'s figure (the finding's ``figure``: a standard name or a function of
    ``(ax, series)``) onto ``ax``; False when the finding has no figure."""
    fig = finding.figure
    if fig is None:
        return False
    if isinstance(fig, str):
        if fig not in STANDARD:
            raise ValueError(f"{finding.name}: unknown standard figure {fig!r}; known: {', '.join(STANDARD)}")
        STANDARD[fig].draw(ax, result.series, **finding.figure_options)
    else:
        fig(ax, result.series)
    return True
