"""Lab 06 (bfloat16): a weight receiving the same small update many times, stored in a low format.

This is the pure-bfloat16 failure in its smallest form.  Round to nearest loses every update
below half an ulp of the weight, so the weight never moves; a float32 master copy keeps them.
Two cures that keep the weight itself in bfloat16 are shown by hand (Zamirai et al. 2020):
stochastic rounding (round up with probability equal to the fraction of the gap covered, so the
expected value is right) and Kahan summation (a second low-precision number carries what the
last rounding lost into the next step).
"""

from __future__ import annotations

import numpy as np

from ..checks import check_integer
from ..formats import get_format, round_to

__all__ = ["accumulate", "METHODS"]

METHODS = ("nearest", "stochastic", "kahan", "float32")


def accumulate(w0, update, steps: int, fmt="bfloat16", method: str = "nearest", seed: int = 0) -> np.ndarray:
    """Apply ``w <- w + update`` ``steps`` times; return w before the first and after every
    step, shape ``(steps + 1,) + shape of w0`` (float64 holding exact format values).

    ``w0`` is rounded once into ``fmt`` (float32 for ``method="float32"``).  Each addition is
    computed in float32 from the stored values and rounded once into ``fmt``:

    - ``nearest``: round to nearest, ties to even (what a pure-bf16 optimizer does);
    - ``stochastic``: stochastic rounding, seeded (``seed``);
    - ``kahan``: compensated summation with the compensation ``c`` also stored in ``fmt``:
      ``y = rnd(u - c); t = rnd(w + y); c = rnd(rnd(t - w) - y); w = t``;
    - ``float32``: the weight lives in float32 (a master copy); ``fmt`` is ignored.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    check_integer(steps, "steps", 0)
    f = get_format("float32" if method == "float32" else fmt)
    rng = np.random.default_rng(seed)

    def rnd(x, rounding="nearest"):
        return round_to(np.asarray(x, dtype=np.float32), f, rounding, rng=rng if rounding == "stochastic" else None)

    w = rnd(w0)
    u = np.float32(update)
    c = np.zeros_like(w)
    out = [w.astype(np.float64)]
    for _ in range(int(steps)):
        if method == "kahan":
            y = rnd(u - c)
            t = rnd(w + y)
            c = rnd(rnd(t - w) - y)
            w = t
        else:
            w = rnd(w + u, "stochastic" if method == "stochastic" else "nearest")
        out.append(w.astype(np.float64))
    return np.stack(out)
