"""The fast FP8 path (fpsim.tensorcore_fp8: Ada's and Hopper's fp8 into e8m13) bit for bit against
MMA-Sim (Microsoft's bit-accurate model) and against fpsim.tensorcore's general path (the float64
chain every other instruction runs), on random and adversarial inputs: cancellation, exponents
spread over the whole format, subnormal products, inf and NaN, all-zero rows and columns, an
accumulator near overflow or below the fast path's floor, K not a whole number of steps, M > N
(the fast path works on the transpose) and batches."""

import ml_dtypes
import numpy as np
import pytest
from helpers import assert_same_bits as same
from support.tensorcore_reference import mmasim

from fpsim import tensorcore as tc
from fpsim import tensorcore_fp8

E4, E5 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2
NAMES = {E4: "float8_e4m3fn", E5: "float8_e5m2"}
FORMATS = [(E4, E4), (E5, E4), (E4, E5), (E5, E5)]


def general(a, b, c, arch):
    """fpsim.tensorcore's general chain (float64 sums, _block) for the same product."""
    a3, b3, c3, fa, fb, shape = tc._operands(a, b, c)
    ins = tc.instruction(arch, fa[0], fb[0])
    with np.errstate(all="ignore"):
        return tc._chain_any(a3, b3, c3, ins, fa, fb).reshape(shape)


def wide(rng, shape, dt, spread=(-14, 8)):
    """Values with exponents over most of the format's range, some of them fp8 subnormals."""
    return (rng.standard_normal(shape) * np.exp2(rng.integers(*spread, shape))).astype(dt)


@pytest.mark.parametrize("arch", ["hopper", "ada"])
@pytest.mark.parametrize("ta,tb", FORMATS)
def test_random_and_wide_against_mmasim(arch, ta, tb):
    rng = np.random.default_rng(11)
    a = wide(rng, (6, 75), ta)
    b = (rng.standard_normal((75, 5)) * 30).astype(tb)
    c = (rng.standard_normal((6, 5)) * 1000).astype(np.float32)
    got = tc.matmul(a, b, c, arch=arch)
    same(got, mmasim(arch, a, b, c, NAMES[ta], NAMES[tb]), "MMA-Sim")


@pytest.mark.parametrize("arch", ["hopper", "ada"])
def test_special_values_against_mmasim(arch):
    """Zero rows and columns, cancellation, subnormal products, the largest products, inf and NaN
    in the inputs and in c, an accumulator near float32's largest."""
    rng = np.random.default_rng(12)
    a = (rng.standard_normal((8, 64)) * 20).astype(E5)
    b = (rng.standard_normal((64, 6)) * 20).astype(E4)
    a[0] = 0  # a zero row
    b[:, 1] = 0  # a zero column
    a[1, :32] = b[:32, 2].astype(np.float32)  # cancellation: row 1 against column 2 and its negation
    a[1, 32:] = -b[32:, 2].astype(np.float32)
    a[2] = np.float32(2.0**-16)  # e5m2's smallest subnormal, against e4m3 subnormals below
    b[:, 3] = np.float32(2.0**-9) * rng.integers(1, 8, 64)
    a[3, 5] = np.inf
    a[4, 7] = np.nan
    a[5] = 57344.0  # e5m2's largest against e4m3's: the largest products
    b[:, 4] = 448.0
    c = (rng.standard_normal((8, 6)) * 10).astype(np.float32)
    c[6, 0], c[6, 1], c[7, 2] = np.inf, -np.inf, np.nan
    c[7, 3] = np.float32(3e38)
    got = tc.matmul(a, b, c, arch=arch)
    same(got, mmasim(arch, a, b, c, "float8_e5m2", "float8_e4m3fn"), "MMA-Sim")


@pytest.mark.parametrize("arch", ["hopper", "ada"])
def test_small_accumulator_over_zero_products_against_mmasim(arch):
    """An accumulator far below the products (or alone, over slices of zero products) keeps its
    value truncated to 13 fraction bits; below 2^EMAX_FLOOR the general path takes it."""
    a = np.zeros((2, 40), E4)
    b = np.zeros((40, 3), E4)
    a[1, 0], b[0, 0] = 2.0**-8, 1.0
    for c in (np.array([[1e-30, 2.0**-110, -3e-20], [1e-20, -3e-30, 2.0**-60]], np.float32),
              np.array([[2.0**-140, 2.0**-126, 1e-38], [1e-20, -2.0**-149, 5e-36]], np.float32)):
        assert tensorcore_fp8.accumulator_fits(c) == (np.abs(c[c != 0]).min() >= 2.0**tensorcore_fp8.EMAX_FLOOR)
        same(tc.matmul(a, b, c, arch=arch), mmasim(arch, a, b, c, "float8_e4m3fn", "float8_e4m3fn"), "MMA-Sim")


@pytest.mark.parametrize("arch", ["hopper", "ada"])
@pytest.mark.parametrize("ta,tb", FORMATS)
@pytest.mark.parametrize("m,k,n", [(40, 300, 70), (130, 64, 20), (1, 33, 1)])
def test_fast_path_equals_the_general_chain(arch, ta, tb, m, k, n):
    """Larger shapes than MMA-Sim runs in a test: M > N and M < N, K a whole number of steps or not."""
    rng = np.random.default_rng(13 + m + k + n)
    a = wide(rng, (m, k), ta, (-12, 9))
    b = wide(rng, (k, n), tb, (-10, 9))
    if m > 2 and n > 2:
        a[1] = 0
        b[:, 2] = 0
    c = (rng.standard_normal((m, n)) * np.exp2(rng.integers(-20, 20, (m, n)))).astype(np.float32)
    same(tc.matmul(a, b, c, arch=arch), general(a, b, c, arch), "general chain")


def test_batches_and_promotion_equal_the_general_chain():
    rng = np.random.default_rng(14)
    a = (rng.standard_normal((3, 20, 256)) * 40).astype(E4)
    b = (rng.standard_normal((256, 9)) * 40).astype(E5)
    c = (rng.standard_normal((3, 20, 9)) * 100).astype(np.float32)
    same(tc.matmul(a, b, c), general(a, b, c, "hopper"), "batched")
    parts = [general(a[..., k:k + 128], b[k:k + 128], np.zeros((3, 20, 9), np.float32), "hopper") for k in (0, 128)]
    total = (np.zeros((3, 20, 9), np.float32) + parts[0]) + parts[1]
    same(tc.matmul(a, b, promote_every=128), total, "promoted")


def test_long_k_all_positive_against_mmasim():
    """K = 2048, all positive: the accumulator outgrows the products and truncates them away."""
    rng = np.random.default_rng(15)
    a = np.abs(rng.standard_normal((2, 2048)) * 30).astype(E4)
    b = np.abs(rng.standard_normal((2048, 3)) * 30).astype(E4)
    c = np.zeros((2, 3), np.float32)
    same(tc.matmul(a, b, c), mmasim("hopper", a, b, c, "float8_e4m3fn", "float8_e4m3fn"), "MMA-Sim")


def test_matmul_values_reads_float32_values_as_the_formats():
    rng = np.random.default_rng(16)
    a = (rng.standard_normal((50, 96)) * 20).astype(E5)
    b = (rng.standard_normal((96, 30)) * 20).astype(E4)
    got = tc.matmul_values(a.astype(np.float32), b.astype(np.float32), "float8_e5m2", "float8_e4m3fn")
    same(got, tc.matmul(a, b), "matmul_values")
    h = (rng.standard_normal((5, 40))).astype(np.float16)
    g = (rng.standard_normal((40, 4))).astype(np.float16)
    same(tc.matmul_values(h.astype(np.float32), g.astype(np.float32), "float16", "float16"), tc.matmul(h, g), "fp16")
    with pytest.raises(ValueError, match="b_format"):
        tc.matmul_values(h, g, "float16", "float32")


def test_empty_operands():
    a, b = np.zeros((3, 0), E4), np.zeros((0, 4), E4)
    c = np.arange(12, dtype=np.float32).reshape(3, 4)
    same(tc.matmul(a, b, c), c, "K = 0")
    assert tc.matmul(np.zeros((0, 40), E4), np.zeros((40, 2), E5)).shape == (0, 2)


@pytest.mark.parametrize("arch", ["hopper", "ada"])
def test_finite_inputs_near_float32s_largest_against_mmasim(arch):
    """All inputs finite (the compiled loops take them): products near e5m2's largest, an
    accumulator near float32's largest, where the products truncate away (an fp8 product is below
    2^32: no finite chain reaches 2^128)."""
    rng = np.random.default_rng(17)
    a = (rng.standard_normal((4, 64)) * 20).astype(E5)
    b = (rng.standard_normal((64, 3)) * 20).astype(E4)
    a[0], b[:, 0] = 57344.0, 448.0
    c = (rng.standard_normal((4, 3)) * 10).astype(np.float32)
    c[1, 1], c[2, 2], c[3, 0] = 3.3e38, -3.4e38, 2.0**100
    same(tc.matmul(a, b, c, arch=arch), mmasim(arch, a, b, c, "float8_e5m2", "float8_e4m3fn"), "MMA-Sim")


@pytest.mark.parametrize("ta,tb", FORMATS)
def test_every_bit_pattern_equals_the_general_chain(ta, tb):
    """Operands drawn from all 256 bit patterns of each format (zeros of both signs, subnormals,
    the largest values, inf and NaN where the format has them), and once more from the finite ones
    only (the compiled loops take those)."""
    rng = np.random.default_rng(18)
    for finite in (False, True):
        a = rng.integers(0, 256, (24, 96), dtype=np.uint8).view(ta)
        b = rng.integers(0, 256, (96, 40), dtype=np.uint8).view(tb)
        if finite:
            a = np.where(np.isfinite(a.astype(np.float32)), a, ta(1.5))
            b = np.where(np.isfinite(b.astype(np.float32)), b, tb(-2.0))
        c = (rng.standard_normal((24, 40)) * 50).astype(np.float32)
        same(tc.matmul(a, b, c), general(a, b, c, "hopper"), f"finite={finite}")
