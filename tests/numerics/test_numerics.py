"""fpsim.numerics against exact rational arithmetic (fractions) and mpmath: every matmul and sum
is the exact value rounded once to float32, every elementary function the correctly rounded
float32 value - on inputs chosen to be hard: exact ties (float16 and bfloat16 products with a
short K land on halfway points), cancellation, huge dynamic range, subnormals, overflow, inf, NaN.
"""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from helpers import same

from fpsim import numerics
from fpsim.numerics import exactsum, highprec
from fpsim.numerics.matmul import chunk_of
from fpsim.numerics.random import normal
from fpsim.numerics.scalars import powi

mpmath = pytest.importorskip("mpmath")

F32_MAX = Fraction(float(np.finfo(np.float32).max))
THRESHOLD = F32_MAX + Fraction(2) ** 103  # halfway to 2**128: from here up, inf


def rne_f32(q: Fraction) -> np.float32:
    """The reference rounding, written from the definition: the float32 nearest to q, ties to the
    even significand, +-inf at and beyond the overflow threshold.  Shares nothing with fpsim."""
    if q == 0:
        return np.float32(0.0)
    sign = -1 if q < 0 else 1
    a = abs(q)
    if a >= THRESHOLD:
        return np.float32(sign * np.inf)
    e = max(math.floor(math.log2(a)) if a.numerator and a.denominator else 0, -126)
    while Fraction(2) ** e > a:  # log2 of a Fraction can be off by one
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    e = max(e, -126)
    ulp = Fraction(2) ** (e - 23)
    k, rem = divmod(a, ulp)
    if rem * 2 > ulp or (rem * 2 == ulp and k % 2 == 1):
        k += 1
    return np.float32(sign * float(k * ulp))


def ref_matmul(a, b) -> np.ndarray:
    fa = [[Fraction(float(v)) for v in row] for row in a]
    fb = [[Fraction(float(v)) for v in col] for col in np.asarray(b).T]
    return np.array([[rne_f32(sum((x * y for x, y in zip(r, c)), Fraction(0))) for c in fb] for r in fa],
                    np.float32).reshape(len(fa), len(fb))


def low(x, dtype):
    return np.asarray(x).astype(dtype).astype(np.float32)


def _cases(seed: int):
    """(name, a, b, grid_a, grid_b): the shapes and value kinds the engine meets, and worse."""
    rng = np.random.default_rng(seed)
    for _ in range(12):
        m, k, n = (int(v) for v in rng.integers(1, 7, 3))
        k = int(rng.integers(1, 48))
        yield "float16", low(rng.standard_normal((m, k)), np.float16), low(rng.standard_normal((k, n)), np.float16), \
            (10, 2.0**-24), (10, 2.0**-24)
        yield "bfloat16", low(rng.standard_normal((m, k)) * 8, ml_dtypes.bfloat16), \
            low(rng.standard_normal((k, n)) / 8, ml_dtypes.bfloat16), (7, 2.0**-133), (7, 2.0**-133)
        yield "bfloat16 without its grid", low(rng.standard_normal((m, k)), ml_dtypes.bfloat16), \
            low(rng.standard_normal((k, n)), ml_dtypes.bfloat16), None, None
        wide = (rng.standard_normal((m, k)) * np.exp2(rng.integers(-60, 60, (m, k)))).astype(np.float32)
        yield "float32, 120 binades", wide, (rng.standard_normal((k, n)) *
                                             np.exp2(rng.integers(-60, 60, (k, n)))).astype(np.float32), None, None
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        a[:, 0] = np.float32(2.0**40)
        b[0, :] = np.float32(1.0)
        if k > 1:
            a[:, 1] = np.float32(-(2.0**40))
            b[1, :] = np.float32(1.0)
        yield "float32, a cancellation of 2**40", a, b, None, None
        yield "small integers (ties)", rng.integers(-3, 4, (m, k)).astype(np.float32) * np.float32(2.0**-12), \
            rng.integers(-3, 4, (k, n)).astype(np.float32) * np.float32(1 + 2.0**-12), None, None


@pytest.mark.parametrize("seed", range(4))
def test_matmul_is_the_exact_sum_rounded_once(seed):
    for name, a, b, ga, gb in _cases(seed):
        got = numerics.matmul_f32(a, b, ga, gb)
        assert same(got, ref_matmul(a, b)), (name, a.shape, b.shape)


def test_matmul_at_the_edges_of_float32():
    tiny = np.float32(2.0**-149)
    big = np.float32(np.finfo(np.float32).max)
    a = np.array([[tiny, tiny], [big, big], [big, -big], [2.0**64, 2.0**64], [-0.0, -0.0]], np.float32)
    b = np.array([[0.5, 1.0], [0.5, 1.0]], np.float32)
    assert same(numerics.matmul_f32(a, b), ref_matmul(a, b))
    assert np.signbit(numerics.matmul_f32(a, b)[4]).sum() == 0  # an exact zero is +0
    # just below and at the overflow threshold
    half_up = np.float32(2.0**103)
    for extra, want in ((np.float32(0), big), (half_up, np.float32(np.inf))):
        a = np.array([[big, half_up, -half_up, extra]], np.float32)
        got = numerics.matmul_f32(a, np.ones((4, 1), np.float32))
        assert same(got, [[want]]), (extra, got)


def test_matmul_inf_and_nan_follow_ieee():
    inf, nan = np.float32(np.inf), np.float32(np.nan)
    a = np.array([[inf, 1], [inf, -inf], [nan, 1], [inf, 0], [1, 1]], np.float32)
    b = np.array([[1, 0], [1, 1]], np.float32)
    got = numerics.matmul_f32(a, b)
    with np.errstate(invalid="ignore"):
        want = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    assert same(got, want)
    assert not np.signbit(got[np.isnan(got)]).any()  # the one positive quiet NaN


def test_batched_and_broadcast_matmul():
    rng = np.random.default_rng(7)
    a = low(rng.standard_normal((2, 3, 4, 9)), np.float16)
    b = low(rng.standard_normal((3, 9, 5)), np.float16)
    got = numerics.matmul_f32(a, b, (10, 2.0**-24), (10, 2.0**-24))
    assert got.shape == (2, 3, 4, 5)
    for i in range(2):
        for j in range(3):
            assert same(got[i, j], ref_matmul(a[i, j], b[j]))


def test_a_long_k_is_chunked_and_still_exact():
    rng = np.random.default_rng(3)
    k = 4096 + 37  # chunks of 64 and a tail
    assert chunk_of(k) == 64
    a = rng.standard_normal((3, k)).astype(np.float32)
    b = rng.standard_normal((k, 2)).astype(np.float32)
    a[0, :2] = [2.0**30, -(2.0**30)]
    b[:2, 0] = 1
    got = numerics.matmul_f32(a, b)
    assert same(got, ref_matmul(a, b))


def test_matmul_refuses_shapes_that_do_not_fit():
    with pytest.raises(ValueError, match=r"\(2, 3\) and \(4, 5\)"):
        numerics.matmul_f32(np.zeros((2, 3), np.float32), np.zeros((4, 5), np.float32))


@pytest.mark.parametrize("seed", range(3))
def test_sum_is_the_exact_sum_rounded_once(seed):
    rng = np.random.default_rng(seed)
    for n in (1, 2, 5, 31, 300, 5000):
        x = (rng.standard_normal((3, n)) * np.exp2(rng.integers(-40, 40, (3, n)))).astype(np.float32)
        for axis in (1, None):
            got = numerics.sum_f32(x, axis=axis)
            rows = [x.ravel()] if axis is None else list(x)
            want = np.array([rne_f32(sum((Fraction(float(v)) for v in r), Fraction(0))) for r in rows], np.float32)
            assert same(np.ravel(got), want), (n, axis)
        ties = low(rng.integers(-9, 9, (2, n)) * 2.0**-20, np.float16)
        got = numerics.sum_f32(ties, axis=1, grid=(10, 2.0**-24))
        want = [rne_f32(sum((Fraction(float(v)) for v in r), Fraction(0))) for r in ties]
        assert same(got, np.array(want, np.float32))


def test_sum_axes_keepdims_and_special_values():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    assert np.array_equal(numerics.sum_f32(x, axis=(0, 2), keepdims=True), x.sum(axis=(0, 2), keepdims=True))
    assert numerics.sum_f32(np.float32([-0.0, -0.0])) == 0 and not np.signbit(numerics.sum_f32(np.float32([-0.0])))
    got = numerics.sum_f32(np.float32([[np.inf, 1], [np.inf, -np.inf], [np.nan, 1], [3e38, 3e38]]), axis=1)
    assert same(got, [np.inf, np.nan, np.nan, np.inf])
    assert np.isnan(numerics.mean_f32(np.zeros((0,), np.float32)))


def test_exactsum_rows_with_ties_and_remainders():
    rng = np.random.default_rng(11)
    for _ in range(300):
        k = int(rng.integers(1, 24))
        t = rng.integers(-50, 50, k).astype(np.float64) * np.exp2(rng.integers(-30, 0, k))
        if rng.random() < 0.3:
            t = np.concatenate([t, [2.0**80, -(2.0**80)], rng.standard_normal(2) * 2.0**-90])
        rows = np.stack([t, -t, t * 2.0**-140])
        got = exactsum.round_rows(rows)
        want = [rne_f32(sum((Fraction(v) for v in r), Fraction(0))) for r in rows]
        assert same(got, np.array(want, np.float32)), t


def _mp_f32(f, x: float) -> np.float32:
    """f(x) at 60 digits (mpmath), rounded by the reference rounding."""
    with mpmath.workdps(60):
        return rne_f32(Fraction(str(f(mpmath.mpf(x)))))


FUNCS = {"exp": (numerics.exp_f32, mpmath.exp), "log": (numerics.log_f32, mpmath.log), "tanh": (numerics.tanh_f32, mpmath.tanh),
         "log1p": (numerics.log1p_f32, mpmath.log1p), "expm1": (numerics.expm1_f32, mpmath.expm1),
         "cos": (numerics.cos_f32, mpmath.cos), "sin": (numerics.sin_f32, mpmath.sin)}


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_elementary_functions_are_correctly_rounded(name):
    ours, ref = FUNCS[name]
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(400) * np.exp2(rng.integers(-20, 7, 400))).astype(np.float32)
    if name in ("log", "log1p"):
        x = np.abs(x)
    got = ours(x)
    want = np.array([_mp_f32(ref, float(v)) for v in x], np.float32)
    assert same(got, want)


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_the_decimal_path_is_correctly_rounded(name):
    """The values the float64 shortcut leaves to ``decimal``, forced on ordinary inputs."""
    rng = np.random.default_rng(6)
    x = (rng.standard_normal(60) * np.exp2(rng.integers(-12, 4, 60))).astype(np.float32)
    if name in ("log", "log1p"):
        x = np.abs(x)
    exact = getattr(highprec, f"{name}_decimal")
    ref = FUNCS[name][1]
    for v in x:
        assert same(exact(float(v)), _mp_f32(ref, float(v))), (name, v)


def test_elementary_special_values():
    z = np.float32([0.0, -0.0, np.inf, -np.inf, np.nan])
    with np.errstate(all="ignore"):
        for f, ref in ((numerics.exp_f32, np.exp), (numerics.log_f32, np.log), (numerics.tanh_f32, np.tanh),
                       (numerics.log1p_f32, np.log1p), (numerics.expm1_f32, np.expm1)):
            assert same(f(z), ref(z.astype(np.float64)).astype(np.float32)), f.__name__
    assert np.signbit(numerics.tanh_f32(np.float32([-0.0])))[0]


def test_pow():
    x = np.float32([0.5, 2.0, 3.0, 1 + 2.0**-12, 7.0, 1e-3])
    for p in (1, 2, 0.5, -1):
        with np.errstate(all="ignore"):
            want = {1: x, 2: x * x, 0.5: np.sqrt(x), -1: np.float32(1) / x}[p]
        assert same(numerics.pow_f32(x, p), want)
    for p in (3, -2, 1.5, 0.3):
        want = np.array([_mp_f32(lambda v, p=p: v ** mpmath.mpf(p), float(v)) for v in x], np.float32)
        assert same(numerics.pow_f32(x, p), want), p
    # an exact power that lands on a halfway point rounds to even: (1 + 2**-12)**3 has 37 bits
    assert same(highprec.pow_decimal(1 + 2.0**-12, 3), rne_f32(Fraction(1 + 2.0**-12) ** 3))


def test_normal_draws_are_built_from_integer_bits():
    z = normal(np.random.default_rng(0), (4, 5))
    bits = np.random.default_rng(0).integers(0, 2**24, size=(2, 10), dtype=np.int64)
    u1 = (bits[0] + 1).astype(np.float32) * np.float32(2.0**-24)
    r = np.sqrt(np.float32(-2) * numerics.log_f32(u1))
    t = np.float32(2 * np.pi) * (bits[1].astype(np.float32) * np.float32(2.0**-24))
    assert same(z.ravel()[0::2], r * numerics.cos_f32(t)) and same(z.ravel()[1::2], r * numerics.sin_f32(t))
    big = normal(np.random.default_rng(1), 200_000)
    assert abs(float(big.mean())) < 0.01 and abs(float(big.std()) - 1) < 0.01


def test_powi_is_correctly_rounded():
    for b, n in ((0.9, 1), (0.9, 150), (0.999, 2000), (0.95, 0)):
        assert powi(b, n) == float(Fraction(b) ** n)
    with pytest.raises(ValueError, match="n must be >= 0"):
        powi(0.9, -1)
