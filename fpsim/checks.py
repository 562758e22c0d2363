"""The argument checks the public functions share: one wording for each kind of wrong number.

Booleans are not numbers here (``True`` is an ``int`` to Python, never a step count or a
learning rate to fpsim); numpy's integer and float scalars are.
"""

from __future__ import annotations

import math
import numbers

__all__ = ["is_integer", "is_real", "check_at_least", "check_positive", "check_finite", "check_seed"]


def is_integer(x) -> bool:
    """An integer (Python or numpy), not a bool."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def is_real(x) -> bool:
    """A real number (Python or numpy, integer or float), not a bool."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def check_at_least(value, minimum, name: str) -> None:
    """ValueError ``"{name} must be >= {minimum}, got {value}"`` unless ``value >= minimum``."""
    if not value >= minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def check_positive(value, name: str) -> None:
    """ValueError ``"{name} must be a finite number > 0, got {value!r}"`` unless ``value`` is a
    real number (not a bool), finite and > 0."""
    if not (is_real(value) and value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def check_finite(value, name: str, minimum=None, below=None) -> float:
    """``float(value)``; ValueError ``"{name} must be a finite number ..., got {value!r}"`` unless
    ``value`` is a real number (not a bool), finite, ``>= minimum`` and ``< below`` (each if
    given).  NaN fails every comparison, so it never passes as a hyperparameter."""
    ok = is_real(value) and math.isfinite(value)
    ok = ok and (minimum is None or value >= minimum) and (below is None or value < below)
    if not ok:
        bounds = " and ".join(b for b in (minimum is not None and f">= {minimum}", below is not None and f"< {below}")
                              if b)
        raise ValueError(f"{name} must be a finite number{' ' + bounds if bounds else ''}, got {value!r}")
    return float(value)


def check_seed(seed, name: str = "seed") -> None:
    """ValueError ``"{name} must be an integer >= 0 or None, got {seed!r}"`` unless ``seed`` is
    None or an integer (not a bool) >= 0 - what ``np.random.default_rng`` takes as a seed."""
    if seed is not None and not (is_integer(seed) and seed >= 0):
        raise ValueError(f"{name} must be an integer >= 0 or None, got {seed!r}")
