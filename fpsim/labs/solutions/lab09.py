"""Reference solutions to lab 09, "Where half precision overflows"."""

from __future__ import annotations

import numpy as np

import fpsim


def exercise1(fmt, n):
    """The largest integer s for which the naive softmax of n scores all equal to s still gives
    1/n: exp(s), rounded into ``fmt``, must be finite (else inf / inf = NaN), and so must the
    row's sum n * exp(s), summed in float32 and rounded once into ``fmt`` (else e / inf = 0)."""
    s = 0
    with np.errstate(over="ignore"):
        while True:
            e = fpsim.round_to(np.exp(np.float32(s + 1)), fmt)
            total = fpsim.round_to(np.float32(n) * np.float32(e), fmt)
            if not (np.isfinite(e) and np.isfinite(total)):
                return s
            s += 1


def exercise2(fmt):
    """Half an ulp at the format's max: from there on, finfo.min - m rounds past the largest
    number (ties go to the even neighbour, which is inf, since max's last mantissa bit is 1)."""
    f = fpsim.get_format(fmt)
    return float(fpsim.ulp(f.max, fmt)) / 2


def exercise3(n):
    """The largest a for which float16's running sum of the n squares a*a (each square and each
    partial sum rounded into float16) stays finite."""

    def finite(a):
        with np.errstate(over="ignore"):
            s = np.float16(0)
            sq = np.float16(np.float32(a) * np.float32(a))
            for _ in range(n):
                s = np.float16(np.float32(s) + np.float32(sq))
        return bool(np.isfinite(sq) and np.isfinite(s))

    a = 1
    while finite(a + 1):
        a += 1
    return a
