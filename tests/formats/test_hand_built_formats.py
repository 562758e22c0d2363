"""A format built by hand with ``fpsim.Format`` and held in float32 is rounded onto its own grid.

Each hand-built layout that ml_dtypes also has is held against ml_dtypes' own float32 cast (correct
from float32): every float32 bit pattern sampled densely, plus every midpoint of the format and its
two float32 neighbours.  A layout ml_dtypes lacks (e2m5) is held against a nearest-value search over
the format's values written out from the bits.  ``fpsim.cast`` also takes ml_dtypes arrays of dtypes
fpsim's table does not name, widened exactly first.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import fpsim
from fpsim import Format

# (exponent bits, mantissa bits, specials) -> the ml_dtypes dtype of that layout
LAYOUTS = {
    (3, 4, "ieee"): ml_dtypes.float8_e3m4,
    (4, 3, "ieee"): ml_dtypes.float8_e4m3,
    (4, 3, "nan"): ml_dtypes.float8_e4m3fn,
    (5, 2, "ieee"): ml_dtypes.float8_e5m2,
    (2, 3, "none"): ml_dtypes.float6_e2m3fn,
    (3, 2, "none"): ml_dtypes.float6_e3m2fn,
    (2, 1, "none"): ml_dtypes.float4_e2m1fn,
    (8, 7, "ieee"): ml_dtypes.bfloat16,
    (5, 10, "ieee"): np.float16,
}
UNNAMED = ("float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz")


def hand_built(e: int, m: int, specials: str = "ieee") -> Format:
    return Format(f"hand_e{e}m{m}_{specials}", np.dtype(np.float32), e, m, specials=specials)


def positive_values(e: int, m: int) -> np.ndarray:
    """Every finite non-negative value of an IEEE layout with e exponent and m mantissa bits, by
    magnitude code (so an even index is an even significand), written out from the definition."""
    bias = 2 ** (e - 1) - 1
    vals = [i * 2.0 ** (1 - bias - m) for i in range(2**m)]  # zero and the subnormals
    for ef in range(1, 2**e - 1):  # the all-ones exponent is inf / NaN
        vals += [(2**m + i) * 2.0 ** (ef - bias - m) for i in range(2**m)]
    return np.array(vals)


def nearest_even(x: np.ndarray, e: int, m: int) -> np.ndarray:
    """x rounded to nearest, ties to even, into the IEEE layout (overflow to inf)."""
    vals = positive_values(e, m)
    a = np.abs(x.astype(np.float64))
    with np.errstate(invalid="ignore"):
        return _nearest(x, a, vals)


def _nearest(x, a, vals):
    hi = np.clip(np.searchsorted(vals, a), 1, len(vals) - 1)
    lo = hi - 1
    dlo, dhi = a - vals[lo], vals[hi] - a
    pick = np.where((dhi < dlo) | ((dhi == dlo) & (hi % 2 == 0)), hi, lo)
    out = vals[pick]
    step = vals[-1] - vals[-2]
    out = np.where(a >= vals[-1] + step / 2, np.inf, out)
    return np.where(np.isnan(a), np.nan, np.copysign(out, x))


def dense_float32(stride: int = 1021) -> np.ndarray:
    """Every ``stride``-th float32 bit pattern, both signs, NaN and inf included."""
    return np.arange(0, 2**32, stride, dtype=np.uint64).astype(np.uint32).view(np.float32)


def midpoints(vals: np.ndarray) -> np.ndarray:
    """The midpoints of consecutive values and their float32 neighbours, both signs."""
    v = vals.astype(np.float64)
    mids = ((v[1:] + v[:-1]) / 2).astype(np.float32)  # exact: one more bit than the format has
    near = np.concatenate([mids, np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(0))])
    return np.concatenate([near, -near])


def same(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return a.shape == b.shape and bool(np.all((a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))))


def test_the_issue_case_is_rounded():
    e3m4 = hand_built(3, 4)
    got = fpsim.cast(np.array([1e9, 0.3], np.float32), e3m4)
    assert got.dtype == np.float32 and not e3m4.is_ml_dtype
    assert got.tolist() == [np.inf, 0.296875]
    assert fpsim.cast([1e9, 0.3], e3m4).tolist() == [np.inf, 0.296875]  # from float64 too


@pytest.mark.parametrize("layout", list(LAYOUTS), ids=lambda k: f"e{k[0]}m{k[1]}_{k[2]}")
def test_hand_built_matches_ml_dtypes(layout):
    e, m, specials = layout
    dt = LAYOUTS[layout]
    f = hand_built(e, m, specials)
    codes = np.arange(2 ** min(f.bits, 16), dtype=np.uint32).astype(np.uint8 if f.bits <= 8 else np.uint16)
    vals = np.unique(np.abs(codes.view(dt).astype(np.float32)))
    vals = vals[np.isfinite(vals)]
    x = np.concatenate([dense_float32(4099 if f.bits > 8 else 1021), midpoints(vals)])
    if specials == "none":  # no NaN to cast to: NaN input is refused, as for fp6 / fp4
        x = x[~np.isnan(x)]
    got = fpsim.cast(x, f)
    assert got.dtype == np.float32
    with np.errstate(over="ignore"):
        ref = x.astype(dt).astype(np.float32)
    assert same(got, ref)
    clamped = np.where(np.isinf(ref) | (np.isnan(ref) & ~np.isnan(x)), np.copysign(np.float32(f.max), x), ref)
    assert same(fpsim.cast(x, f, saturate=True), clamped)  # overflow and +-inf to +-max, NaN stays NaN


@pytest.mark.parametrize("e,m", [(2, 5), (3, 4), (6, 1)])
def test_hand_built_matches_a_nearest_value_search(e, m):
    """Layouts with and without an ml_dtypes twin, from float32 and from float64 input."""
    f = hand_built(e, m)
    vals = positive_values(e, m)
    x32 = np.concatenate([dense_float32(65537), midpoints(vals.astype(np.float32))])
    assert same(fpsim.cast(x32, f), nearest_even(x32, e, m))
    rng = np.random.default_rng(5)
    x64 = np.concatenate([rng.standard_normal(20000) * vals[-1] / 4, vals[1:] - np.diff(vals) / 2 * (1 - 2**-40)])
    assert same(fpsim.cast(x64, f), nearest_even(x64, e, m))
    assert (f.max, f.tiny, f.smallest_subnormal) == (vals[-1], vals[2**m], vals[1])


@pytest.mark.parametrize("m", [1, 2, 7, 10, 13, 16, 22])
def test_float32_ranged_layouts_match_the_float64_path_and_keep_nan(m):
    """Layouts with float32's exponent field (the narrow GEMM accumulators e8m<m>) round float32
    input on its bit patterns: the same bits as the float64 input's exact path on 2**18 random
    patterns, every midpoint at m bits and its neighbours, and the top of the range (to inf); a
    NaN of any payload stays NaN (no cut payload becomes an inf or a zero)."""
    f = hand_built(8, m)
    rng = np.random.default_rng(m)
    pats = rng.integers(0, 2**32, 2**18, dtype=np.uint64).astype(np.uint32)
    mids = (rng.integers(0, 2**31, 4096, dtype=np.uint64).astype(np.uint32) >> (23 - m) << (23 - m)) | (
        np.uint32(1 << (22 - m)))
    x = np.concatenate([pats, mids, mids - 1, mids + 1, [0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0x00000001]]).astype(
        np.uint32).view(np.float32)
    nan = np.isnan(x)
    got = fpsim.cast(x, f)
    ref = fpsim.cast(x[~nan].astype(np.float64), f)
    assert same(got[~nan], ref) and np.isnan(got[nan]).all() and nan.sum() > 100
    assert fpsim.cast(np.float32(np.finfo(np.float32).max), f) == np.inf


@pytest.mark.parametrize("layout", [k for k in LAYOUTS if 2 ** k[0] * 2 ** k[1] <= 256],
                         ids=lambda k: f"e{k[0]}m{k[1]}_{k[2]}")
def test_hand_built_codes_are_ml_dtypes_bits(layout):
    f = hand_built(*layout)
    dt = LAYOUTS[layout]
    n = 2**f.bits
    ref = np.arange(n, dtype=np.uint8).view(dt).astype(np.float32)
    assert same(fpsim.decode(np.arange(n), f), ref)
    finite = ref[np.isfinite(ref)]
    assert np.array_equal(fpsim.encode(finite, f), finite.astype(dt).view(np.uint8))


@pytest.mark.parametrize("name", UNNAMED)
def test_cast_takes_ml_dtypes_arrays_fpsim_does_not_name(name):
    dt = np.dtype(getattr(ml_dtypes, name))
    x = np.arange(256, dtype=np.uint8).view(dt)
    wide = x.astype(np.float32)  # ml_dtypes' widening is exact
    assert same(fpsim.cast(x, "float32"), wide)
    assert same(fpsim.round_to(x, "bfloat16"), wide.astype(ml_dtypes.bfloat16).astype(np.float32))
    assert same(fpsim.cast(x, "float16").astype(np.float32), wide.astype(np.float16).astype(np.float32))
    assert fpsim.round_to(x, "float16").dtype == np.float32


def test_cast_takes_ml_dtypes_integers():
    x = np.array([-8, 3, 7]).astype(ml_dtypes.int4)
    assert fpsim.cast(x, "float16").tolist() == [-8.0, 3.0, 7.0]
