"""Reference solutions for lab 15 (the RL train-inference mismatch)."""

from __future__ import annotations

import numpy as np

from ... import ops
from ...state import no_grad


def exercise1(logp_rollout, logp_trainer):
    """(RMS of r - 1, share of tokens with r outside [0.8, 1.25]) for the probability ratios
    r = exp(logp_rollout - logp_trainer) of the chosen tokens (float64 arithmetic)."""
    r = np.exp(np.asarray(logp_rollout, np.float64) - np.asarray(logp_trainer, np.float64))
    return float(np.sqrt(np.mean((r - 1) ** 2))), float(np.mean((r < 0.8) | (r > 1.25)))


def exercise2(model, ids, n_new):
    """The trainer's float32 log-probabilities of the last ``n_new`` tokens of ``ids`` (batch, t):
    one forward of ids[:, :-1] (position i predicts token i + 1), the logits widened to float32,
    log_softmax, each row's chosen token picked."""
    with no_grad():
        logits = model(ids[:, :-1]).to("float32")
        lp = np.asarray(ops.log_softmax(logits, axis=-1).f32())[:, -n_new:]
    return np.take_along_axis(lp, ids[:, -n_new:, None], axis=-1)[..., 0]


def exercise3(rms_a, rms_b):
    """The ratio of two formats' mismatch over seeds: ``rms_a[i] / rms_b[i]`` for each seed i (the
    two lists measured on the same seeds, so paired by position), returned as (median, lowest,
    highest) of those per-seed ratios, Python floats."""
    ratios = np.asarray(rms_a, np.float64) / np.asarray(rms_b, np.float64)
    return float(np.median(ratios)), float(ratios.min()), float(ratios.max())
