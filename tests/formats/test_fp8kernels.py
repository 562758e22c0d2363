"""formats.fp8kernels.scaled_fp8 against ml_dtypes' float32 -> fp8 cast of the float32 product,
clamped to +-max first (the saturating conversion): every float32 pattern class."""

import contextlib

import ml_dtypes
import numpy as np
import pytest

from fpsim.formats import get_format
from fpsim.formats.fp8kernels import scaled_fp8

FP8 = ("float8_e4m3fn", "float8_e5m2")
SCALES = (1.0, 2.0**-12, 2.0**9, 2.0**40, 3.0, 0.7, 2.0**-100)


def _reference(x, scale, f):
    """ml_dtypes' cast of x * scale (float32), saturated: |y| > max -> +-max (max is on the grid,
    so clamping first and rounding once is the saturating conversion)."""
    with np.errstate(over="ignore"):
        y = x * np.float32(scale)
    y = np.clip(y, np.float32(-f.max), np.float32(f.max))
    codes = y.astype(f.dtype)
    return codes, codes.astype(np.float32)


def _patterns(f):
    """Every finite fp8 value, its float32 neighbours, the midpoints between neighbouring values
    (ties) and their neighbours, the same negated; float32 subnormals, +-0, +-inf, float32's
    extremes, values beyond max, and random float32 patterns of every exponent."""
    vals = np.unique(np.arange(256, dtype=np.uint8).view(f.dtype).astype(np.float32))
    vals = vals[np.isfinite(vals) & (vals >= 0)]
    mids = (vals[:-1].astype(np.float64) + vals[1:]) / 2
    mids = np.concatenate([mids, [f.max + (f.max - vals[-2]) / 2]]).astype(np.float32)  # the tie above max
    base = np.concatenate([vals, mids])
    near = np.concatenate([base, np.nextafter(base, np.float32(np.inf)), np.nextafter(base, np.float32(0))])
    specials = np.float32([0.0, np.inf, 2.0**-149, 2.0**-127, 3 * 2.0**-140, np.finfo(np.float32).max,
                           f.max * 2, 1e30, f.smallest_subnormal / 2, f.smallest_subnormal / 4])
    rnd = np.random.default_rng(0).integers(0, 2**31, 200_000, dtype=np.int64).astype(np.uint32).view(np.float32)
    mags = np.concatenate([near, specials, rnd[~np.isnan(rnd)]])
    return np.concatenate([mags, -mags])


@pytest.mark.parametrize("name", FP8)
@pytest.mark.parametrize("scale", SCALES)
def test_scaled_fp8_matches_ml_dtypes(name, scale):
    f = get_format(name)
    with np.errstate(over="ignore"):  # inf / scale stays inf; float32's max / a small scale overflows
        x = _patterns(f) / np.float32(scale) if scale > 2.0**-20 else _patterns(f)
    ref, ref32 = _reference(x, scale, f)
    codes, codes32, flushed = scaled_fp8(x, np.float32(scale), f)
    assert codes.dtype == f.dtype and codes.shape == x.shape
    np.testing.assert_array_equal(codes.view(np.uint8), ref.view(np.uint8))
    np.testing.assert_array_equal(codes32.view(np.uint32), ref32.view(np.uint32))
    assert flushed == int(np.count_nonzero((ref32 == 0) & (x != 0)))


@pytest.mark.parametrize("name", FP8)
def test_scaled_fp8_without_saturation_when_nothing_exceeds_max(name):
    f = get_format(name)
    x = _patterns(f)
    x = x[np.abs(x) <= f.max]
    ref, ref32 = _reference(x, 1.0, f)
    codes, codes32, flushed = scaled_fp8(x, np.float32(1.0), f, saturate=False)
    np.testing.assert_array_equal(codes.view(np.uint8), ref.view(np.uint8))
    np.testing.assert_array_equal(codes32.view(np.uint32), ref32.view(np.uint32))
    assert flushed == int(np.count_nonzero((ref32 == 0) & (x != 0)))


def test_scaled_fp8_pins_a_few_values():
    """Exact literals: ties to even, the smallest subnormal, saturation, -0 of a negative flush;
    two flushes (the 0 was 0 already)."""
    f = get_format("float8_e4m3fn")
    x = np.float32([1.0625, 1.1875, 2.0**-9, 2.0**-10, -(2.0**-11), 460.0, -np.inf, 0.0])
    codes, codes32, flushed = scaled_fp8(x, np.float32(1.0), f)
    np.testing.assert_array_equal(codes32, np.float32([1.0, 1.25, 2.0**-9, 0.0, -0.0, 448.0, -448.0, 0.0]))
    assert np.signbit(codes32[4]) and not np.signbit(codes32[3])
    assert codes.view(np.uint8).tolist() == [0x38, 0x3A, 0x01, 0x00, 0x80, 0x7E, 0xFE, 0x00]
    assert flushed == 2


def test_scaled_fp8_flushes_with_a_product_that_underflows():
    """A scale below 1 can make a non-zero x's product 0 in float32: a flush too; a zero x is not."""
    f = get_format("e5m2")
    x = np.float32([2.0**-149, -(2.0**-140), 0.0, -0.0, 1024.0, 2.0**-120])
    codes, codes32, flushed = scaled_fp8(x, np.float32(2.0**-20), f)
    np.testing.assert_array_equal(codes32, np.float32([0.0, -0.0, 0.0, -0.0, 2.0**-10, 0.0]))
    assert flushed == 3


@pytest.mark.parametrize("shape", [(), (0,), (3, 0), (70_000,), (5, 7, 3)])
def test_scaled_fp8_shapes(shape):
    """0-d, empty, more than one chunk (2**16 values), n-d: the shape is kept."""
    f = get_format("float8_e5m2")
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    ref, ref32 = _reference(x, 8.0, f)
    codes, codes32, _ = scaled_fp8(x, np.float32(8.0), f)
    assert codes.shape == codes32.shape == np.shape(x)
    np.testing.assert_array_equal(codes.view(np.uint8), ref.view(np.uint8))
    np.testing.assert_array_equal(codes32, ref32)


def test_scaled_fp8_reference_is_ml_dtypes():
    """The reference above is ml_dtypes' own dtype (not fpsim's table)."""
    assert get_format("e4m3").dtype == np.dtype(ml_dtypes.float8_e4m3fn)


@pytest.mark.parametrize("name", FP8)
def test_scaled_fp8_values_only(name):
    f = get_format(name)
    x = _patterns(f)
    ref, ref32 = _reference(x, 4.0, f)
    codes, codes32, flushed = scaled_fp8(x, np.float32(4.0), f, codes=False)
    assert codes is None
    np.testing.assert_array_equal(codes32.view(np.uint32), ref32.view(np.uint32))
    assert flushed == int(np.count_nonzero((ref32 == 0) & (x != 0)))


@pytest.mark.parametrize("backend", ["numpy", "numpy-f32"])
def test_scaling_state_bytes_with_and_without_hooks(backend):
    """Without a hook the numpy backend's cast makes only the values and narrows them when the
    bytes are first read; with one the hook sees the bytes: the same as ml_dtypes' either way,
    and the counts (flushes, saturations) agree."""
    from fpsim import state
    from fpsim.backend import get_backend
    from fpsim.lowp import DelayedScaling, ScalingState

    be = get_backend(backend)
    f = get_format("e4m3")
    x = np.float32([1.0625, -(2.0**-11), 1000.0, 0.0, 3.0, -0.0, 2.0**-9])
    ref, ref32 = _reference(x * np.float32(2.0), 1.0, f)
    seen = []
    results = []
    for hooked in (False, True):
        st = ScalingState("t", f, DelayedScaling(amax_init=False), init_scale=2.0)
        with state.hooked(seen.append) if hooked else contextlib.nullcontext():
            q = st.to_fp8(x, be)
        assert (q.stored is None) == (backend == "numpy" and not hooked)
        np.testing.assert_array_equal(q.numpy().view(np.uint8), ref.view(np.uint8))
        np.testing.assert_array_equal(np.asarray(q.codes_f32()).view(np.uint32), ref32.view(np.uint32))
        results.append(dict(st._current))
    assert results[0] == results[1] == {"n": 7, "saturated": 1, "underflow": 1}
    assert len(seen) == 1 and seen[0].op == "fp8.cast"
    np.testing.assert_array_equal(np.asarray(be.to_f32(seen[0].stored)), ref32)


def test_step_amax_max_is_numpys():
    """The step's amax accumulates as np.max of the two did: NaNs and zero signs bit for bit."""
    import itertools

    from fpsim.lowp.scaling import _max_nan

    vals = [-0.0, 0.0, 1.0, 2.0, float("nan"), float("-nan"), float("inf"), 5e-324]
    for a, b in itertools.product(vals, vals):
        assert np.float64(_max_nan(a, b)).tobytes() == np.float64(float(np.max([a, b]))).tobytes(), (a, b)


def test_history_amax_is_numpys():
    """ScalingState.amax over the history (the "max" algorithm) is np.max's, bit for bit."""
    import itertools

    from fpsim.lowp import DelayedScaling, ScalingState

    st = ScalingState("t", get_format("e4m3"), DelayedScaling(amax_history_len=4))
    vals = [-0.0, 0.0, 1.5, 3.0, float("nan"), float("-nan"), float("inf")]
    for hist in itertools.product(vals, repeat=3):
        st.amax_history = list(hist)
        assert np.float64(st.amax).tobytes() == np.float64(float(np.max(hist))).tobytes(), hist
