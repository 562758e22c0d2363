"""Lab 13's reference solutions against independent references: gfloat's TowardZero rounding and
stochastic rounding with given bits ("fastest"), and exact fractions for round to odd.  The notebook
itself, its self-checks and wrong answers run in tests/labs/test_labs.py."""

import math
from fractions import Fraction

import numpy as np
import pytest

import fpsim
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
        got = lab13.exercise2(x, fmt)
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
        assert lab13.exercise3(v, fmt, k) == float((mean - Fraction(v)) / gap), (v, fmt, k)


def test_the_quoted_double_rounding_example_against_fractions():
    """Section 5: x = 1 + 2^-8 + 2^-30 rounds once to 1 + 2^-7 in bfloat16; through float32 to
    nearest it lands on the midpoint and goes to the even 1.0; through float32 to odd it is right."""
    x = 1 + 2.0**-8 + 2.0**-30
    assert gfloat.round_float(format_info_bfloat16, x) == 1 + 2.0**-7
    f32 = gfloat.round_float(format_info_binary32, x)
    assert f32 == 1 + 2.0**-8 and gfloat.round_float(format_info_bfloat16, f32) == 1.0
    odd = lab13.exercise2(x, "float32")
    assert odd == 1 + 2.0**-8 + 2.0**-23 and gfloat.round_float(format_info_bfloat16, odd) == 1 + 2.0**-7


U = float(np.float32(1e-4))  # the lab's update: the float32 number nearest 1e-4
GFLOAT_MODES = {"nearest": RoundMode.TiesToEven, "nearest_away": RoundMode.TiesToAway,
                "toward_zero": RoundMode.TowardZero}


def _reference_sum(fmt, mode, u, steps, start):
    """s <- round(s + u) one value at a time with gfloat (to odd: the solution checked above);
    s + u is exact in float64 for these formats and updates.  Stops once a step changes nothing."""
    s = gfloat.round_float(GFLOAT[fmt], start)
    for _ in range(steps):
        exact = Fraction(s) + Fraction(u)
        assert Fraction(s + u) == exact  # one rounding, from the exact sum
        new = lab13.exercise2(s + u, fmt) if mode == "to_odd" else gfloat.round_float(GFLOAT[fmt], s + u, GFLOAT_MODES[mode])
        if new == s:
            return s
        s = new
    return s


@pytest.mark.parametrize(("fmt", "mode", "u", "steps", "start", "quoted"), [
    ("float16", "nearest", U, 10_000, 0.0, 0.25), ("float16", "nearest_away", U, 10_000, 0.0, 0.25),
    ("float16", "toward_zero", U, 10_000, 0.0, 0.125), ("float16", "to_odd", U, 10_000, 0.0, 0.125 + 2.0**-13),
    ("bfloat16", "nearest", U, 10_000, 0.0, 2.0**-5), ("bfloat16", "toward_zero", U, 10_000, 0.0, 2.0**-6),
    ("bfloat16", "to_odd", U, 10_000, 0.0, 2.0**-6 + 2.0**-13),
    ("bfloat16", "nearest", -U, 1000, 1.0, 1.0), ("bfloat16", "nearest", U, 1000, 1.0, 1.0),
    ("bfloat16", "toward_zero", U, 1000, 1.0, 1.0), ("bfloat16", "to_odd", -U, 1000, 1.0, 1 - 2.0**-8),
    ("bfloat16", "to_odd", U, 1000, 1.0, 1 + 2.0**-7)])
def test_the_long_sums_and_weight_streams_the_lab_quotes(fmt, mode, u, steps, start, quoted):
    """Where sections 2 and 3 say each deterministic mode stalls, against gfloat; and fpsim.round_to
    (what the notebook runs) reaches the same value."""
    assert _reference_sum(fmt, mode, u, steps, start) == quoted
    s = fpsim.round_to(start, fmt)
    for _ in range(steps):
        new = fpsim.round_to(s + u, fmt, mode)
        if new == s:
            break
        s = new
    assert float(s) == quoted


def test_toward_zero_drags_a_weight_below_zero():
    """Section 3: a bfloat16 weight of 1.0 after 1000 updates of -1e-4 toward zero ends below 0
    (each update moves it a whole gap down), at the value the lab prints (-0.008728)."""
    s = 1.0
    for _ in range(1000):
        s = gfloat.round_float(format_info_bfloat16, s - U, RoundMode.TowardZero)
    assert s < 0 and f"{s:.6f}" == "-0.008728"


def test_two_random_bits_never_move_the_float16_sum_from_one_half():
    """The optional extension: in [0.5, 1) the update is 0.2048 of float16's gap 2^-11; with 2 random bits,
    truncated ("fastest"), no value of the bits rounds 0.5 + u up."""
    assert f"{U / 2.0**-11:.4f}" == "0.2048"
    assert {gfloat.round_float(format_info_binary16, 0.5 + U, RoundMode.StochasticFastest, srbits=r, srnumbits=2)
            for r in range(4)} == {0.5}
    assert sum(Fraction(gfloat.round_float(format_info_binary16, 0.5 + U, RoundMode.StochasticFastest, srbits=r,
                                           srnumbits=4)) - Fraction(1, 2) for r in range(16)) / 16 \
        == Fraction(3, 16) * Fraction(2) ** -11  # 4 bits: 0.1875 of a gap a step on average
