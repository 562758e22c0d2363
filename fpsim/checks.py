"""The argument checks the public functions share: one wording for each kind of wrong number.

Booleans are not numbers here (``True`` is an ``int`` to Python, never a step count or a
learning rate to fpsim); numpy's integer and float scalars are.
"""

from __future__ import annotations

import math
import numbers

__all__ = ["is_integer", "is_real", "check_integer", "check_at_least", "check_positive", "check_finite", "check_seed"]


def is_integer(x) -> bool:
    """An integer (Python or numpy), not a bool."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def is_real(x) -> bool:
    """A real number (Python or numpy, integer or float), not a bool."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def check_integer(value, name: str, minimum=None, maximum=None, *, none: bool = False) -> int | None:
    """``int(value)`` (None stays None where ``none``); ValueError ``"{name} must be an integer >=
    {minimum}, got {value!r}"`` (``in [{minimum}, {maximum}]`` with both bounds, ``<= {maximum}``
    with the upper alone, ``or None`` where ``none``) unless ``value`` is an integer within them.

    Python and numpy integers pass; a bool, a float (2.0 as well as 2.5: a count given as a float
    is a mistake somewhere, and ``int()`` would cut 2.7 to 2), a numpy float or bool, a string or
    an array do not.  ``name`` is the argument as the message names it (``"steps"``,
    ``"OutlierMonitor: every"``)."""
    if none and value is None:
        return None
    if is_integer(value) and (minimum is None or value >= minimum) and (maximum is None or value <= maximum):
        return int(value)
    if minimum is not None and maximum is not None:
        bounds = f" in [{minimum}, {maximum}]"
    else:
        bounds = f" >= {minimum}" if minimum is not None else f" <= {maximum}" if maximum is not None else ""
    raise ValueError(f"{name} must be an integer{bounds}{' or None' if none else ''}, got {value!r}")


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
    check_integer(seed, name, 0, none=True)
