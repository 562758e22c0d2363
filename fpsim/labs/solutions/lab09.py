"""Reference solutions for lab 09 (where half precision overflows), and the plausible wrong
answers the tests hold against the self-checks (``WRONG``: exercise -> [(the mistake, code), ...],
as every lab has them; ``WRONG_ANSWERS``: the same mistakes as functions)."""

from __future__ import annotations

import inspect
import re


def exercise1(fmt, n):
    """The largest integer s for which the naive softmax of n scores all equal to s still gives
    1/n: exp(s), rounded into ``fmt``, must be finite (else inf / inf = NaN), and so must the
    row's sum n * exp(s), summed in float32 and rounded once into ``fmt`` (else e / inf = 0)."""
    import numpy as np

    import fpsim

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
    import fpsim

    f = fpsim.get_format(fmt)
    return float(fpsim.ulp(f.max, fmt)) / 2


def exercise3(n):
    """The largest a for which float16's running sum of the n squares a*a (each square and each
    partial sum rounded into float16) stays finite."""
    import numpy as np

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


# ----------------------------------------------------------------------------- wrong answers


def _exp_only(fmt, n):
    """Forgets the row's sum: only exp(s) must be finite."""
    import math

    import fpsim

    return int(math.log(fpsim.get_format(fmt).max))


def _float32_range(fmt, n):
    """Uses float32's range whatever the format (what autocast would give)."""
    import math

    return int(math.log(3.4028234663852886e38 / n))


def _rounded_log(fmt, n):
    """Rounds log(max / n) to the nearest integer instead of taking the floor."""
    import math

    import fpsim

    return round(math.log(fpsim.get_format(fmt).max / n))


def _full_ulp(fmt):
    """A whole ulp at max: -inf indeed, but half of it already is."""
    import fpsim

    return float(fpsim.ulp(fpsim.get_format(fmt).max, fmt))


def _any_negative(fmt):
    """Believes any negative score pushes finfo.min over the edge."""
    import fpsim

    return float(fpsim.get_format(fmt).smallest_subnormal)


def _square_only(n):
    """Forgets the sum: only a*a must stay below 65504."""
    import math

    return int(math.sqrt(65504.0))


def _power_of_two_limit(n):
    """Takes 2**16 for float16's limit."""
    import math

    return int(math.sqrt(2.0**16 / n))


def _bfloat16_half_ulp(fmt):
    """Takes bfloat16's max whatever the format (the wrong format)."""
    import fpsim

    return float(fpsim.ulp(fpsim.get_format("bfloat16").max, "bfloat16")) / 2


def _float32_statistics(n):
    """Sums the squares in float32 (what layer_norm does by default, not what the lab asks)."""
    import math

    return math.isqrt(int(3.4028234663852886e38) // n)


WRONG_ANSWERS = {
    "exercise1": (_exp_only, _float32_range, _rounded_log),
    "exercise2": (_full_ulp, _any_negative, _bfloat16_half_ulp),
    "exercise3": (_square_only, _power_of_two_limit, _float32_statistics),
}


def _as_exercise(fn, name: str) -> str:
    """The wrong answer's source, renamed to the exercise it answers (what a learner would type)."""
    return re.sub(r"^def \w+\(", f"def {name}(", inspect.getsource(fn), count=1)


WRONG = {int(ex.removeprefix("exercise")): [(fn.__doc__.strip().split("\n")[0], _as_exercise(fn, ex)) for fn in fns]
         for ex, fns in WRONG_ANSWERS.items()}
