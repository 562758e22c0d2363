"""The element and scale types of block-scaled formats: FP6 E2M3 / E3M2, FP4 E2M1 and the E8M0
scale (OCP Microscaling Formats (MX) Specification v1.0, section 5).

Every limit is pinned by an exact literal; every bit pattern is decoded here from the bit layout
and compared with ml_dtypes' decoding; rounding is compared with ml_dtypes' cast on a float32
sweep, and the one place where ml_dtypes is wrong (float32 subnormal inputs to e8m0) is pinned.
The rational-arithmetic reference and gfloat cover the new formats in formats/test_formats.py.
"""

import math

import ml_dtypes
import numpy as np
import pytest

from fpsim.formats import ALL_FORMATS, ELEMENT_FORMATS, FORMATS, cast, classify, get_format, round_to, ulp

NEW = ["float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn", "float8_e8m0fnu"]


def test_constants_pinned_to_exact_literals():
    e2m3, e3m2, e2m1, e8m0 = (get_format(n) for n in NEW)
    # (bits, bias, max, tiny, smallest subnormal, eps, flush threshold, overflow threshold)
    assert (e2m3.bits, e2m3.bias, e2m3.max, e2m3.tiny, e2m3.smallest_subnormal, e2m3.eps) == (6, 1, 7.5, 1.0, 0.125, 0.125)
    assert (e3m2.bits, e3m2.bias, e3m2.max, e3m2.tiny, e3m2.smallest_subnormal, e3m2.eps) == (6, 3, 28.0, 0.25, 0.0625, 0.25)
    assert (e2m1.bits, e2m1.bias, e2m1.max, e2m1.tiny, e2m1.smallest_subnormal, e2m1.eps) == (4, 1, 6.0, 1.0, 0.5, 0.5)
    assert (e8m0.bits, e8m0.bias, e8m0.max, e8m0.tiny, e8m0.smallest_subnormal, e8m0.eps) == (
        8, 127, 2.0**127, 2.0**-127, 2.0**-127, 1.0)
    assert [f.emax for f in (e2m3, e3m2, e2m1, e8m0)] == [2, 4, 2, 127]  # MX's emax_elem: 2, 4, 2
    assert [f.flush_threshold for f in (e2m3, e3m2, e2m1, e8m0)] == [0.0625, 0.03125, 0.25, 0.0]
    assert [f.overflow_threshold for f in (e2m3, e3m2, e2m1)] == [7.75, 30.0, 7.0]
    assert e8m0.overflow_threshold == 1.5 * 2.0**127
    for f in (e2m3, e3m2, e2m1):
        assert (f.has_inf, f.has_nan, f.saturates, f.signed, f.has_zero) == (False, False, True, True, True)
    assert (e8m0.has_inf, e8m0.has_nan, e8m0.saturates, e8m0.signed, e8m0.has_zero) == (False, True, False, False, False)
    e4, e5 = get_format("e4m3"), get_format("e5m2")
    assert (e4.has_nan, e4.saturates, e5.has_nan, e5.saturates) == (True, False, True, False)


def test_tables():
    assert list(FORMATS) == ["float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"]
    assert list(ALL_FORMATS) == [*FORMATS, *NEW]
    assert ELEMENT_FORMATS == ("float8_e4m3fn", "float8_e5m2", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn")


def decode(bits: int, e: int, m: int, signed: bool, specials: str) -> float:
    """One bit pattern's value, from the layout alone (MX v1.0 section 5.3; e8m0: 2**(E - 127))."""
    s = (bits >> (e + m)) & 1 if signed else 0
    ef, mf = (bits >> m) & ((1 << e) - 1), bits & ((1 << m) - 1)
    bias = 2 ** (e - 1) - 1
    if specials == "e8m0":
        return math.nan if ef == 255 else 2.0 ** (ef - bias)
    mag = mf * 2.0 ** (1 - bias - m) if ef == 0 else (1 + mf / 2**m) * 2.0 ** (ef - bias)
    return -mag if s else mag


LAYOUT = {"float6_e2m3fn": (2, 3, True, "none"), "float6_e3m2fn": (3, 2, True, "none"),
          "float4_e2m1fn": (2, 1, True, "none"), "float8_e8m0fnu": (8, 0, False, "e8m0")}


@pytest.mark.parametrize("name", NEW)
def test_every_bit_pattern_decodes_as_the_layout_says(name):
    f = get_format(name)
    n = 2**f.bits
    codes = np.arange(n, dtype=np.uint8).view(f.dtype)
    got = codes.astype(np.float64)
    want = np.array([decode(b, *LAYOUT[name]) for b in range(n)])
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.array_equal(got[ok], want[ok]) and np.array_equal(np.signbit(got[ok]), np.signbit(want[ok]))
    finite = want[np.isfinite(want)]
    assert finite.max() == f.max and finite[finite > 0].min() == f.smallest_subnormal
    assert np.count_nonzero(np.isnan(want)) == (1 if name == "float8_e8m0fnu" else 0)
    # and fpsim's cast puts every value back on its own pattern
    back = cast(want[ok], name).view(np.uint8)
    assert np.array_equal(back, np.arange(n, dtype=np.uint8)[ok])


def test_e2m1_values():
    codes = np.arange(8, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn)
    assert codes.astype(np.float64).tolist() == [0, 0.5, 1, 1.5, 2, 3, 4, 6]


def float32_sweep(seed=0) -> np.ndarray:
    """Every bfloat16 pattern with four choices of the low 16 bits, and the float32 subnormals in
    steps of 7: every binade, every midpoint of a format with at most 7 mantissa bits and its
    neighbours."""
    rng = np.random.default_rng(seed)
    hi = np.arange(65536, dtype=np.uint32) << 16
    low = [0, 0x8000, 0x7FFF, rng.integers(0, 65536, 65536, dtype=np.uint32)]
    parts = [hi | lo for lo in low] + [np.arange(0, 2**24, 7, dtype=np.uint32)]
    return np.concatenate(parts).view(np.float32)


@pytest.mark.parametrize("name", NEW)
def test_nearest_matches_ml_dtypes_on_float32(name):
    f = get_format(name)
    x = float32_sweep()
    if not f.has_nan:
        x = x[~np.isnan(x)]
    with np.errstate(over="ignore", invalid="ignore"):
        ours, theirs = cast(x, name).view(np.uint8), x.astype(f.dtype).view(np.uint8)
    bad = ours != theirs
    if name == "float8_e8m0fnu" and bad.any():
        # ml_dtypes before 0.7 rounds every float32 subnormal in (2**-127, 2**-126) up to 2**-126; the
        # nearest e8m0 value below 1.5 * 2**-127 is 2**-127.  Newer ml_dtypes agrees everywhere.
        assert np.array_equal(np.unique(ours[bad]), [0]) and np.array_equal(np.unique(theirs[bad]), [1])
        assert (x[bad] > 2.0**-127).all() and (x[bad] < 1.5 * 2.0**-127).all()
        assert bad.sum() > 1000
    else:
        assert not bad.any(), x[bad][:5]


@pytest.mark.parametrize("name", NEW[:3])
def test_nan_is_refused_whole(name):
    x = np.array([1.0, np.nan, 2.0, np.nan])
    for fn in (cast, round_to, classify):
        with pytest.raises(ValueError, match=rf"^{name} has no NaN: 2 NaN values in the input cannot be cast to it$"):
            fn(x, name)
    assert float(cast(np.nan, "e4m3").astype(np.float32)) != float(cast(np.nan, "e4m3").astype(np.float32))


def test_fp4_and_fp6_saturate_in_every_mode():
    v = np.array([5.0, 5.1, 6.0, 6.99, 7.0, 100.0, np.inf, -7.0, -np.inf, 0.25, 0.26, -0.0])
    assert cast(v, "e2m1").astype(np.float64).tolist() == [4, 6, 6, 6, 6, 6, 6, -6, -6, 0, 0.5, -0.0]
    assert cast(v, "e2m1", "toward_zero").astype(np.float64).tolist() == [4, 4, 6, 6, 6, 6, 6, -6, -6, 0, 0, -0.0]
    sr = cast(np.full(1000, 100.0), "e2m1", "stochastic", seed=0).astype(np.float64)
    assert (sr == 6).all()
    assert cast(np.array([7.74, 7.75, 1e9]), "e2m3").astype(np.float64).tolist() == [7.5, 7.5, 7.5]
    assert cast(np.array([29.9, 30.0, -1e9]), "e3m2").astype(np.float64).tolist() == [28, 28, -28]


def test_e8m0_rounding():
    v = np.array([1.0, 1.4, 1.5, 3.0, 6.0, 0.75, 2.0**-128, 2.0**-200, 1e-300, 2.0**127, 1.49 * 2.0**127, 1.5 * 2.0**127,
                  0.0, -0.0, -1.0, np.inf, -np.inf, np.nan])
    nan = math.nan
    near = [1, 1, 2, 4, 8, 1, 2.0**-127, 2.0**-127, 2.0**-127, 2.0**127, 2.0**127, nan, nan, nan, nan, nan, nan, nan]
    zero = [1, 1, 1, 2, 4, 0.5, 2.0**-127, 2.0**-127, 2.0**-127, 2.0**127, 2.0**127, 2.0**127, nan, nan, nan, nan, nan,
            nan]
    sat = near[:11] + [2.0**127, nan, nan, nan, 2.0**127, nan, nan]
    for mode, saturate, want in (("nearest", False, near), ("toward_zero", False, zero), ("nearest", True, sat)):
        got = cast(v, "e8m0", mode, saturate=saturate).astype(np.float64)
        assert np.array_equal(got, np.array(want), equal_nan=True), (mode, saturate, got)
    sr = cast(np.full(20000, 3.0), "e8m0", "stochastic", seed=0).astype(np.float64)
    assert set(np.unique(sr)) == {2.0, 4.0} and abs(np.mean(sr == 4.0) - 0.5) < 0.02  # 3 is halfway: unbiased


def test_ulp_of_the_new_formats():
    assert ulp(np.array([0.0, 0.3, 1.0, 3.0, 4.0, 7.0, 8.0]), "e2m1").tolist() == [0.5, 0.5, 0.5, 1, 2, 2, math.inf]
    assert ulp(np.array([0.1, 1.0, 7.5]), "e2m3").tolist() == [0.125, 0.125, 0.5]
    assert ulp(np.array([1.0, 3.0, 2.0**-127, 2.0**127]), "e8m0").tolist() == [1.0, 2.0, 2.0**-127, 2.0**127]


def test_classify_fp4():
    c = classify(np.array([0.2, 0.3, 1.0, 6.0, 6.9, 7.0, 100.0, -np.inf]), "e2m1")
    assert list(c.names()) == ["zero", "subnormal", "normal", "normal", "normal", "normal", "normal", "normal"]
    assert list(c.underflow) == [True] + [False] * 7
    # fp4 saturates: 7 (a tie that rounds to 8 without the top) and 100 were clamped; 6.9 just rounded to 6
    assert list(c.overflow) == [False] * 5 + [True, True, False]
    e = classify(np.array([0.0, -2.0, 2.0**-130, 1e39]), "e8m0")
    assert list(e.names()) == ["nan", "nan", "normal", "nan"]
    assert list(e.overflow) == [False, False, False, True] and not e.underflow.any()
