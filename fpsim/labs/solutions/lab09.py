"""Reference solutions to lab 09, "Where half precision overflows", and wrong answers the
self-checks must reject (``WRONG``: exercise -> [(the mistake, code), ...])."""

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


WRONG = {
    1: [
        ("forgets the row's sum: only exp(s) must be finite", """
def exercise1(fmt, n):
    import math
    return int(math.log(fpsim.get_format(fmt).max))
"""),
        ("uses float32's range whatever the format (what autocast would give)", """
def exercise1(fmt, n):
    import math
    return int(math.log(3.4028234663852886e38 / n))
"""),
        ("rounds log(max / n) to the nearest integer instead of taking the floor", """
def exercise1(fmt, n):
    import math
    return round(math.log(fpsim.get_format(fmt).max / n))
"""),
        ("the closed form floor(log(max / n)): ignores that exp(s) and the sum are rounded", """
def exercise1(fmt, n):
    import math
    return math.floor(math.log(fpsim.get_format(fmt).max / n))
"""),
        ("rounds exp(s) but requires the exact sum n * exp(s) to stay <= max (it may round down to max)", """
def exercise1(fmt, n):
    f = fpsim.get_format(fmt)
    s = 0
    while True:
        e = float(fpsim.round_to(np.exp(np.float32(s + 1)), fmt))
        if not np.isfinite(e) or n * e > f.max:
            return s
        s += 1
"""),
        ("returns the first score that breaks, not the last that works", """
def exercise1(fmt, n):
    s = 0
    with np.errstate(over="ignore"):
        while True:
            e = fpsim.round_to(np.exp(np.float32(s)), fmt)
            total = fpsim.round_to(np.float32(n) * np.float32(e), fmt)
            if not (np.isfinite(e) and np.isfinite(total)):
                return s
            s += 1
"""),
    ],
    2: [
        ("a whole ulp at max: -inf indeed, but half of it already is", """
def exercise2(fmt):
    f = fpsim.get_format(fmt)
    return float(fpsim.ulp(f.max, fmt))
"""),
        ("believes any negative score pushes finfo.min over the edge", """
def exercise2(fmt):
    return float(fpsim.get_format(fmt).smallest_subnormal)
"""),
        ("takes bfloat16's max whatever the format", """
def exercise2(fmt):
    return float(fpsim.ulp(fpsim.get_format("bfloat16").max, "bfloat16")) / 2
"""),
        ("float16's edge, 16, for every format", """
def exercise2(fmt):
    return 16.0
"""),
        ("believes the tie at half an ulp rounds back to max: takes the next number above it", """
def exercise2(fmt):
    f = fpsim.get_format(fmt)
    half = float(fpsim.ulp(f.max, fmt)) / 2
    return half + float(fpsim.ulp(half, fmt))
"""),
    ],
    3: [
        ("forgets the sum: only a*a must stay below 65504", """
def exercise3(n):
    import math
    return int(math.sqrt(65504.0))
"""),
        ("takes 2**16 for float16's limit", """
def exercise3(n):
    import math
    return int(math.sqrt(2.0**16 / n))
"""),
        ("sums the squares in float32 (what layer_norm does by default, not what the exercise asks)", """
def exercise3(n):
    import math
    return math.isqrt(int(3.4028234663852886e38) // n)
"""),
        ("the closed form floor(sqrt(65504 / n)): ignores the rounding of the squares and the partial sums", """
def exercise3(n):
    import math
    return int(math.sqrt(65504 / n))
"""),
        ("the exact sum n * a*a must round to a finite float16 (forgets that every partial sum rounds)", """
def exercise3(n):
    a = 1
    while np.isfinite(np.float16(n * float(a + 1) ** 2)):
        a += 1
    return a
"""),
        ("knows values up to 65520 round down, but sums exactly: isqrt(65519 // n)", """
def exercise3(n):
    import math
    return math.isqrt(65519 // n)
"""),
    ],
}
