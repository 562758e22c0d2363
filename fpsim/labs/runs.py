"""Recipes side by side, so that what differs is visible (labs 03, 04, 06 and 08).

:func:`side_by_side` runs the recipes with the flushed gradients and the unchanged weights counted at
every step.  What the labs show of the runs is what ``fpsim compare`` shows:
``fpsim.experiments.format_table`` prints the numbers that sum a run up, and
``fpsim.tools.compareplot.compare_figure(results, panels=[...])`` draws what differs - each
loss divided by float32's at the same step, the share of gradients flushed to zero and of
weights left unchanged at every step, the loss scale with its skipped steps.
"""

from __future__ import annotations

from ..experiments import RunResult, compare

__all__ = ["side_by_side"]


def side_by_side(recipes, task=None, *, steps: int = 40, seed: int = 0) -> dict[str, RunResult]:
    """:func:`fpsim.experiments.compare` over ``recipes`` (same data, same initial weights),
    with flushed gradients and unchanged weights counted at every step, no progress bar."""
    return compare(recipes, task, steps=steps, seed=seed, progress=False, measure_at=range(steps))
