"""Reference solutions to lab 14, "Hunting a NaN"."""

from __future__ import annotations

import numpy as np

import fpsim


def _kinds(a) -> set:
    """The kinds of non-finite value an array holds: a subset of {"NaN", "+inf", "-inf"}."""
    a = np.asarray(a, dtype=np.float64)
    return {k for k, held in (("NaN", np.isnan(a).any()), ("+inf", np.isposinf(a).any()),
                              ("-inf", np.isneginf(a).any())) if held}


def exercise1(records):
    """The index of the first record whose output holds a kind of non-finite value (NaN, +inf,
    -inf) that none of its inputs held - the op that MADE it; None if there is none."""
    for i, (_op, inputs, output) in enumerate(records):
        held = set().union(*(_kinds(a) for a in inputs))
        if _kinds(output) - held:
            return i
    return None


def exercise2(g_max, init_scale=2.0**16):
    """The scale a dynamic GradScaler settles at, and how many steps it skips on the way, when the
    largest |gradient| of every step is ``g_max`` (unscaled) and the gradients are float16: each
    step whose float16(g_max * scale) is inf is skipped and halves the scale."""
    scale, skipped = float(init_scale), 0
    while not np.isfinite(fpsim.round_to(g_max * scale, "float16")):
        scale, skipped = scale / 2, skipped + 1
    return scale, skipped
