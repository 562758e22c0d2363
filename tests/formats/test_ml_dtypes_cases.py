# Adapted from ml_dtypes' own tests (ml_dtypes/tests/finfo_test.py and custom_float_test.py), ml_dtypes
# version 0.6.0, run here against fpsim's format table and fpsim.cast / round_to / ulp through a thin
# adapter: where ml_dtypes checked its dtype (``float_type(v)``, ``x.astype(float_type)``,
# ``ml_dtypes.finfo``), the same numbers go through fpsim's rounding and fpsim's format record, and
# ml_dtypes' own cast from float32 (which rounds once, correctly) is the reference.
#
# Copyright 2022 The ml_dtypes Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
#
# Modified for fpsim: the cases rewritten for pytest and for fpsim's functions (see above).
"""ml_dtypes' own cast and finfo test cases (version 0.6.0), adapted to fpsim: a departure from
ml_dtypes' numbers shows up as a failing case here.

Each ml_dtypes type is matched with the fpsim format that has its layout: the named ones by name;
``float8_e3m4`` and ``float8_e4m3`` by a hand-built :class:`fpsim.Format` (fpsim does not name them);
the ``fnuz`` types (no -0, one NaN at 0x80, no inf) by their IEEE P3109 twins (``p3109_k8p4sf`` is
``float8_e4m3fnuz``, ``p3109_k8p3sf`` is ``float8_e5m2fnuz``) and ``float8_e4m3b11fnuz`` by a hand-built
P3109-layout format with bias 11.

Not applicable, so not adapted: the cases that test the Python scalar type and numpy's ufunc loops of
ml_dtypes' own dtypes (hash, str / repr, pickling, arithmetic operators, comparisons, sort / argmax,
the unary and binary ufuncs, divmod / modf / frexp / ldexp / nextafter / copysign, can_cast, byteswap,
dlpack), the complex-number casts (fpsim rounds real numbers), and ``testFromStr`` (``fpsim.cast``
does not parse strings)."""

import itertools

import ml_dtypes
import numpy as np
import pytest

import fpsim
from fpsim.formats import Format, get_format

MD = ml_dtypes

# ml_dtypes type -> the fpsim format of the same layout
FORMATS = {
    MD.bfloat16: get_format("bfloat16"),
    MD.float8_e4m3fn: get_format("float8_e4m3fn"),
    MD.float8_e5m2: get_format("float8_e5m2"),
    MD.float8_e8m0fnu: get_format("float8_e8m0fnu"),
    MD.float6_e2m3fn: get_format("float6_e2m3fn"),
    MD.float6_e3m2fn: get_format("float6_e3m2fn"),
    MD.float4_e2m1fn: get_format("float4_e2m1fn"),
    MD.float8_e3m4: Format("float8_e3m4_by_hand", np.dtype(MD.float8_e3m4), 3, 4),
    MD.float8_e4m3: Format("float8_e4m3_by_hand", np.dtype(MD.float8_e4m3), 4, 3),
    MD.float8_e4m3fnuz: get_format("p3109_k8p4sf"),
    MD.float8_e5m2fnuz: get_format("p3109_k8p3sf"),
    MD.float8_e4m3b11fnuz: Format("float8_e4m3b11fnuz_by_hand", np.dtype(np.float32), 4, 3, specials="p3109",
                                  bias_override=11),
}
FLOAT_DTYPES = list(FORMATS)
IDS = [np.dtype(t).name for t in FLOAT_DTYPES]


def dtype_has_inf(dtype):
    try:
        return bool(np.isinf(dtype(float("inf"))))
    except (OverflowError, ValueError):
        return False


def dtype_has_nan(dtype):
    try:
        return bool(np.isnan(dtype(float("nan"))))
    except (OverflowError, ValueError):
        return False


def dtype_is_signed(dtype):
    return MD.finfo(dtype).min < 0


def _float_values(dtype):
    """ml_dtypes' FLOAT_VALUES: values that round-trip exactly."""
    info = MD.finfo(dtype)
    eps, big = float(info.eps), float(info.max)
    if dtype is MD.float8_e8m0fnu:
        return [0.125, 1.0, 0.5, 1.0 + eps, 4, big, float("nan")]
    vals = [0.0, 1.0, -1.0, 0.5, -0.5, eps, 1.0 + eps, 1.0 - eps, -1.0 - eps, -1.0 + eps, 3.5, 4, 5, 7, big, -big,
            float("nan") if dtype_has_nan(dtype) else 0.0, float("-nan") if dtype_has_nan(dtype) else 0.0,
            float("inf") if dtype_has_inf(dtype) else 0.0, float("-inf") if dtype_has_inf(dtype) else 0.0]
    if dtype is MD.float4_e2m1fn:
        vals = [x for x in vals if x not in {3.5, 5, 7}]
    return vals


def _powers(n, step):
    """ml_dtypes' chain of ranges 2**k .. 2**(k+1) in steps 2**(k - step), k < n."""
    return list(itertools.chain.from_iterable(range(1 << k, 2 << k, 1 << max(0, k - step)) for k in range(n)))


INT_VALUES = {
    MD.bfloat16: [0, 1, 2, 10, 34, 47, 128, 255, 256, 512],
    MD.float4_e2m1fn: [0, 1, 2, 3, 4, 6],
    MD.float6_e2m3fn: [0, 1, 2, 3, 4, 5, 6, 7],
    MD.float6_e3m2fn: [0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28],
    MD.float8_e3m4: _powers(4, 3),
    MD.float8_e4m3: _powers(8, 3),
    MD.float8_e4m3b11fnuz: [*range(16), *range(16, 30, 2)],
    MD.float8_e4m3fn: _powers(9, 3)[:-1],
    MD.float8_e4m3fnuz: _powers(8, 3)[:-1],
    MD.float8_e5m2: _powers(16, 2),
    MD.float8_e5m2fnuz: _powers(16, 2),
    MD.float8_e8m0fnu: [1, 2, 256],
}


def _values(x) -> np.ndarray:
    """What an fpsim result holds, as float64 (storage dtype or float32)."""
    return np.asarray(x).astype(np.float64)


def assert_same(got, want):
    """The same numbers, NaN where NaN, and the same sign of zero where the format has -0."""
    g, w = _values(got), _values(want)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    ok = ~np.isnan(w)
    np.testing.assert_array_equal(g[ok], w[ok])
    np.testing.assert_array_equal(np.signbit(g[ok] * (w[ok] != 0)), np.signbit(w[ok] * (w[ok] != 0)))


params = pytest.mark.parametrize("float_type", FLOAT_DTYPES, ids=IDS)


# ------------------------------------------------------------------------------------ finfo_test


@params
def test_finfo(float_type):
    """testFInfo: the format record against ml_dtypes.finfo, and the identities it checks through the
    rounding (max and tiny representable, past max inf or NaN, half the smallest subnormal 0)."""
    info, f = MD.finfo(float_type), FORMATS[float_type]
    assert f.bits == info.bits
    assert f.mantissa_bits == info.nmant and f.exponent_bits == info.nexp
    assert f.bits == info.nmant + info.nexp + (1 if info.min < 0 else 0)  # unsigned: no sign bit
    assert (f.max, f.tiny, f.eps) == (float(info.max), float(info.tiny), float(info.eps))
    if float_type is not MD.float8_e8m0fnu:  # e8m0 has no subnormals: its smallest is the smallest normal
        assert f.smallest_subnormal == float(info.smallest_subnormal)

    def rep(v):
        return _values(fpsim.cast(v, f)).item()

    for v in (info.tiny, info.max, info.min, 2.0 ** (info.maxexp - 1), info.smallest_subnormal):
        assert rep(float(v)) == float(v)
    past = rep(float(info.max) + float(fpsim.ulp(float(info.max), f)))
    if dtype_has_inf(float_type):
        assert past == np.inf
    elif dtype_has_nan(float_type):
        assert np.isnan(past)
    else:
        assert past == float(info.max)  # no inf, no NaN: rounding saturates (OCP MX elements)
    if float_type is not MD.float8_e8m0fnu:
        assert rep(float(info.smallest_subnormal) * 0.5) == 0.0  # the tie goes to the even neighbour, 0
    assert info.tiny == info.smallest_normal
    assert float(info.eps) == 2.0**info.machep and float(info.epsneg) == 2.0**info.negep


# ------------------------------------------------------------------------------ custom_float_test


@params
def test_round_trip_to_float(float_type):
    """testRoundTripToFloat: every FLOAT_VALUES value comes back as itself."""
    vals = _float_values(float_type)
    assert_same(fpsim.cast(vals, FORMATS[float_type]), vals)


@params
@pytest.mark.parametrize("src", [np.float16, np.float32, np.float64])
def test_round_trip_numpy_types(float_type, src):
    """testRoundTripNumpyTypes: from float16, float32 and float64 input alike, and round_to gives the
    values back in the input's float dtype (float16 input: float32, as round_to documents)."""
    vals = [v for v in _float_values(float_type) if not abs(v) > float(np.finfo(src).max)]
    x = np.array(vals, src)
    f = FORMATS[float_type]
    assert_same(fpsim.cast(x, f), x)
    back = fpsim.round_to(x, f)
    assert back.dtype == (np.float32 if src is np.float16 else src)
    assert_same(back, x)


@params
def test_round_trip_to_int(float_type):
    """testRoundTripToInt: integer input, Python ints and numpy integer arrays alike."""
    f = FORMATS[float_type]
    for v in INT_VALUES[float_type]:
        assert int(_values(fpsim.cast(v, f))) == v
        if dtype_is_signed(float_type):
            assert int(_values(fpsim.cast(-v, f))) == -v
    ints = np.array(INT_VALUES[float_type], np.int64)
    assert_same(fpsim.cast(ints, f), ints)


@params
def test_cast_between_custom_types(float_type):
    """testCastBetweenCustomTypes: an array held in another ml_dtypes type rounds as its float64
    values do."""
    f = FORMATS[float_type]
    for dtype in FLOAT_DTYPES:
        if np.dtype(dtype).itemsize > 2 or not str(np.dtype(dtype)).startswith(("float", "bfloat")):
            continue
        x = np.array(_float_values(float_type), dtype=np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            held = x.astype(dtype)
        if not dtype_has_nan(float_type):  # fpsim refuses NaN into a format without one (ml_dtypes: a number)
            held = held[~np.isnan(held.astype(np.float64))]
        assert_same(fpsim.cast(held, f), fpsim.cast(held.astype(np.float64), f))


@params
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
                                   np.uint8, np.uint16, np.uint32, np.uint64], ids=lambda d: np.dtype(d).name)
def test_casts(float_type, dtype):
    """testCasts (the real dtypes): [[1, 2, 4]] of each dtype rounds to itself, shape kept."""
    x = np.array([[1, 2, 4]], dtype=dtype)
    y = fpsim.cast(x, FORMATS[float_type])
    assert y.shape == (1, 3) and np.all(_values(y) == x)


@params
def test_arange(float_type):
    """testArange: 1..99 (and, for signed types, -6..4 step 2 and -0, -0.5, ..., -1.5) as ml_dtypes rounds them."""
    f = FORMATS[float_type]
    cases = [np.arange(1, 100, dtype=np.float32)]
    if float_type is not MD.float8_e8m0fnu:
        cases += [np.arange(-6, 6, 2, dtype=np.float32), np.arange(-0.0, -2.0, -0.5, dtype=np.float32)]
    for x in cases:
        with np.errstate(invalid="ignore", over="ignore"):
            want = x.astype(float_type)
        assert_same(fpsim.cast(x, f), want)


@params
def test_spacing(float_type):
    """testSpacing: ulp at every power of two - the smallest subnormal below the smallest normal, eps
    times the power above it - and its sign ignored (fpsim.ulp is a magnitude)."""
    info, f = MD.finfo(float_type), FORMATS[float_type]
    lo, tiny, top = (int(np.log2(float(v))) for v in (info.smallest_subnormal, info.smallest_normal, info.max))
    for i in range(lo, tiny):
        assert float(fpsim.ulp(2.0**i, f)) == float(info.smallest_subnormal)
    for i in range(tiny, top):
        assert float(fpsim.ulp(2.0**i, f)) == float(info.eps) * 2.0**i
        if dtype_is_signed(float_type):
            assert float(fpsim.ulp(-(2.0**i), f)) == float(info.eps) * 2.0**i


# ------------------------------------------------------------------ the cast itself, every input


@params
def test_rounding_from_float32_matches_ml_dtypes(float_type):
    """ml_dtypes rounds float32 to its types once, to nearest even: fpsim's cast of every value between
    two neighbours (the neighbours, the midpoints and just either side of them, 16 random float32
    patterns per step), over the finite range of the type, matches it."""
    f = FORMATS[float_type]
    width = np.dtype(float_type).itemsize  # every bit pattern of the type, as ml_dtypes decodes it
    patterns = np.arange(1 << (8 * width), dtype=np.uint16 if width == 2 else np.uint8)
    grid = np.unique(patterns.view(np.dtype(float_type)).astype(np.float32))
    grid = grid[np.isfinite(grid)]
    mids = (grid[:-1].astype(np.float64) + grid[1:]) / 2
    x = np.concatenate([grid, mids.astype(np.float32),
                        np.nextafter(mids.astype(np.float32), np.float32(np.inf)),
                        np.nextafter(mids.astype(np.float32), np.float32(-np.inf))])
    rng = np.random.default_rng(0)
    lo, hi = grid[:-1].astype(np.float64), grid[1:].astype(np.float64)
    x = np.concatenate([x, (lo + (hi - lo) * rng.random((16, lo.size))).astype(np.float32).ravel()])
    x = x[np.abs(x) <= float(MD.finfo(float_type).max)]  # in range: overflow conventions differ by type
    if float_type is MD.float8_e8m0fnu:  # ml_dtypes rounds float32 subnormals into e8m0 upward: see below
        x = x[np.abs(x) >= np.finfo(np.float32).tiny]
    assert_same(fpsim.cast(x, f), x.astype(float_type))


def test_e8m0_from_float32_subnormals_rounds_to_nearest():
    """Where fpsim departs from ml_dtypes 0.6.0 on purpose: float32 subnormals between 2**-127 (e8m0's
    smallest) and 2**-126.  ml_dtypes gives 2**-126 for 1.2 * 2**-127 (and for anything above 2**-127);
    the nearest power of two is 2**-127 below the midpoint 1.5 * 2**-127, 2**-126 from it up (the tie
    goes up, as ml_dtypes' own normal-range ties 1.5 -> 2 do)."""
    mid = np.float32(1.5 * 2.0**-127)
    x = np.array([1.2 * 2.0**-127, np.nextafter(mid, np.float32(0)), mid, 1.7 * 2.0**-127], np.float32)
    got = fpsim.cast(x, "float8_e8m0fnu").astype(np.float64) / 2.0**-127
    assert got.tolist() == [1.0, 1.0, 2.0, 2.0]
    assert np.array(1.5, np.float32).astype(MD.float8_e8m0fnu) == 2  # ml_dtypes' tie in the normal range
