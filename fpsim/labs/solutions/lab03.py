"""Reference solutions to lab 03, "Vanishing updates and master weights"."""

from __future__ import annotations

import math

import numpy as np

import fpsim


def exercise1(w, fmt):
    """Half the ulp of w in ``fmt``: an update must be larger than this to change w."""
    f = fpsim.get_format(fmt)
    _, e = math.frexp(abs(w))  # |w| = m * 2**e with m in [0.5, 1): w lies in binade 2**(e-1)
    binade = max(e - 1, f.emin)  # below the smallest normal the spacing stays that of emin
    return 2.0 ** (binade - f.mantissa_bits) / 2


def exercise2(w, update, steps, fmt):
    """Add ``update`` to a weight stored in ``fmt``, ``steps`` times, with no master copy."""
    w = fpsim.round_to(np.float32(w), fmt)
    for _ in range(steps):
        w = fpsim.round_to(np.float32(w) + np.float32(update), fmt)  # float32 sum, rounded into fmt
    return float(w)


def exercise3(w, update, steps, fmt):
    """The same with a float32 master: returns (master, the weight stored in fmt)."""
    master = np.float32(w)
    for _ in range(steps):
        master = np.float32(master + np.float32(update))
    return float(master), float(fpsim.round_to(master, fmt))
