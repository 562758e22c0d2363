"""Lab 13's reference solutions against independent references: gfloat's TowardZero rounding and
stochastic rounding with given bits ("fastest"), and exact fractions for round to odd.  The notebook
itself, its self-checks and wrong answers run in tests/test_labs.py."""

import math
from fractions import Fraction

import numpy as np
import pytest

from fpsim.labs.solutions import lab13

gfloat = pytest.importorskip("gfloat")
from gfloat import RoundMode  # noqa: E402
from gfloat.formats import format_info_bfloat16, format_info_binary16, format_info_binary32  # noqa: E402

GFLOAT = {"float16": format_info_binary16, "bfloat16": format_info_bfloat16, "float32": format_info_binary32}
# name: (mantissa bits, emin, max)
LAYOUT = {"float16": (10, -14, 65504.0), "bfloat16": (7, -126, 3.3895313892515355e38),
          "float32": (23, -126, 3.4028234663852886e38)}


def _values(fmt, n=400, seed=0):
    """Random values across the format's range, subnormals included, both signs, plus the lab's cases."""
    rng = np.random.default_rng(seed)
    m, emin, fmax = LAYOUT[fmt]
    hi = math.frexp(fmax)[1]
    xs = rng.uniform(1, 2, n) * np.exp2(rng.integers(emin - m, hi, n)) * rng.choice([-1, 1], n)
    return [float(x) for x in xs if abs(x) < fmax] + [1 + 2.0**-9, 1 + 2.0**-8 + 2.0**-30, 0.3, -0.3, 1.5]


def _grid(x, fmt):
    """|x| as an exact Fraction, and the format's gap at x as a Fraction."""
    m, emin, _ = LAYOUT[fmt]
    a = Fraction(abs(x))
    e = max(math.frexp(abs(x))[1] - 1, emin)
    return a, Fraction(2) ** (e - m)


@pytest.mark.parametrize("fmt", LAYOUT)
def test_toward_zero_matches_gfloat(fmt):
    for x in _values(fmt) + [1e5, -1e5, 1e-6, 1.3 * 2.0**-130]:
        want = gfloat.round_float(GFLOAT[fmt], x, RoundMode.TowardZero, sat=True)
        assert lab13.exercise1(x, fmt) == want, (x, fmt)


@pytest.mark.parametrize("fmt", LAYOUT)
def test_round_to_odd_against_fractions(fmt):
    """To odd: x itself if the grid holds it, else the neighbour with an odd number of gaps."""
    for x in _values(fmt, seed=1):
        a, gap = _grid(x, fmt)
        n = math.floor(a / gap)
        want = n * gap if a == n * gap else (n if n % 2 else n + 1) * gap
        got = lab13.exercise3(x, fmt)
        assert Fraction(abs(got)) == want and math.copysign(1, got) == math.copysign(1, x), (x, fmt)


@pytest.mark.parametrize("fmt", ["float16", "bfloat16"])
@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_few_bit_sr_bias_is_gfloats_average_over_every_random_integer(fmt, k):
    """E[round(v)] over all 2**k values of the random bits, gfloat's StochasticFastest, exactly."""
    rng = np.random.default_rng(k)
    for v in [float(x) for x in rng.uniform(0.5, 4, 12) * rng.choice([-1, 1], 12)] + [1 + 2.0**-10, 1.0]:
        _, gap = _grid(v, fmt)
        mean = sum(Fraction(gfloat.round_float(GFLOAT[fmt], v, RoundMode.StochasticFastest, srbits=r, srnumbits=k))
                   for r in range(2**k)) / 2**k
        assert lab13.exercise2(v, fmt, k) == float((mean - Fraction(v)) / gap), (v, fmt, k)


def test_the_quoted_double_rounding_example_against_fractions():
    """Section 6: x = 1 + 2^-8 + 2^-30 rounds once to 1 + 2^-7 in bfloat16; through float32 to
    nearest it lands on the midpoint and goes to the even 1.0; through float32 to odd it is right."""
    x = 1 + 2.0**-8 + 2.0**-30
    assert gfloat.round_float(format_info_bfloat16, x) == 1 + 2.0**-7
    f32 = gfloat.round_float(format_info_binary32, x)
    assert f32 == 1 + 2.0**-8 and gfloat.round_float(format_info_bfloat16, f32) == 1.0
    odd = lab13.exercise3(x, "float32")
    assert odd == 1 + 2.0**-8 + 2.0**-23 and gfloat.round_float(format_info_bfloat16, odd) == 1 + 2.0**-7
