"""Reference solutions to lab 13, "Rounding modes".

Every solution works on Python floats (float64), where each step is exact: ``ldexp`` scales by a
power of two and ``floor`` of a float is exact, so a format's grid is reached without rounding.
"""

from __future__ import annotations

import math

import fpsim


def _grid(a, f):
    """For |x| = a > 0: (a measured in ulps of its binade, that ulp as a power-of-two exponent)."""
    _, e = math.frexp(a)  # a = m * 2**e, m in [0.5, 1): a lies in binade 2**(e-1)
    binade = max(e - 1, f.emin)  # subnormals share emin's ulp
    ulp_exp = binade - f.mantissa_bits
    return math.ldexp(a, -ulp_exp), ulp_exp


def exercise1(x, fmt):
    """``x`` (a finite Python float) rounded toward zero into ``fmt``, as a Python float: the
    magnitude cut to the format's grid; beyond the largest number it stays at +-max."""
    f = fpsim.get_format(fmt)
    if x == 0:
        return x
    units, ulp_exp = _grid(abs(x), f)
    return math.copysign(min(math.ldexp(math.floor(units), ulp_exp), f.max), x)


def exercise2(x, fmt):
    """``x`` (a finite Python float within ``fmt``'s range) rounded to odd into ``fmt``, as a
    Python float: x itself if ``fmt`` holds it, else whichever of its two neighbours has an odd
    last bit (the one whose significand, counted in ulps, is odd)."""
    f = fpsim.get_format(fmt)
    if x == 0:
        return x
    units, ulp_exp = _grid(abs(x), f)
    n = math.floor(units)
    if n != units and n % 2 == 0:
        n += 1  # inexact and the lower neighbour is even: the odd one is the upper
    return math.copysign(math.ldexp(n, ulp_exp), x)


def exercise3(v, fmt, k):
    """E[round(v)] - v, in ulps of v's binade, for stochastic rounding into ``fmt`` with ``k``
    random bits, variant "fastest": the fraction delta of the gap above the lower neighbour is cut
    to k bits, and the rounding goes up with probability floor(delta * 2**k) / 2**k."""
    f = fpsim.get_format(fmt)
    units, _ = _grid(abs(v), f)
    delta = units - math.floor(units)
    p_up = math.floor(math.ldexp(delta, k)) / 2**k
    bias = p_up - delta  # on the magnitude: never above 0
    return -bias if v < 0 else bias  # a negative v is rounded as -round(|v|)
