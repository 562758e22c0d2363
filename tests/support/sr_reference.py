"""The few-bit stochastic-rounding rule of IEEE P3109 (and its "fast" / "fastest" variants), in
exact rational arithmetic: a reference for the SR tests, written from the rule, calling no fpsim."""

from __future__ import annotations

import math
from fractions import Fraction

__all__ = ["rounds_up", "p_up"]


def _cut(delta: Fraction, k: int, variant: str) -> int:
    """delta * 2^k (delta in [0, 1): the position between the two neighbours) rounded to an
    integer the variant's way: down for "fastest", else to nearest with ties to even ("rne") or
    to odd ("rto")."""
    d = delta * 2**k
    fl = math.floor(d)
    if variant == "fastest" or d - fl < Fraction(1, 2):
        return fl
    if d - fl > Fraction(1, 2):
        return fl + 1
    return fl + ((fl % 2 == 1) if variant == "rne" else (fl % 2 == 0))


def rounds_up(delta: Fraction, k: int, r: int, variant: str) -> bool:
    """Whether a value at ``delta`` between its neighbours rounds up with the k-bit random integer ``r``."""
    if variant == "fast":
        return math.floor(delta * 2 ** (k + 1)) + 2 * r + 1 >= 2 ** (k + 1)
    return _cut(delta, k, variant) + r >= 2**k


def p_up(delta: Fraction, k: int, variant: str) -> Fraction:
    """The probability of rounding up, over all 2^k values of r."""
    return Fraction(sum(rounds_up(delta, k, r, variant) for r in range(2**k)), 2**k)
