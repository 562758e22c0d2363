"""The bfloat16 kernels against ml_dtypes' casts: every bfloat16 pattern widened; every float32
high half (all 65536: every sign, exponent and kept mantissa, subnormals, inf and NaN) with the low
halves at and around the rounding boundary (0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF) and random ones,
rounded; both backends' bfloat16 paths on the same values.  (All 2**32 float32 patterns were also
checked once, outside the suite: no difference.)"""

import ml_dtypes
import numpy as np
import pytest

from fpsim import backend as fb
from fpsim.formats import get_format
from fpsim.formats.bf16kernels import bf16_to_f32, f32_to_bf16, snap_bf16

BF16 = ml_dtypes.bfloat16


def _patterns():
    hi = np.arange(65536, dtype=np.uint32) << 16
    lows = np.r_[[0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF], np.random.default_rng(0).integers(0, 65536, 4)]
    return (hi[:, None] | lows.astype(np.uint32)[None, :]).ravel().view(np.float32)


def _ref(x32):
    with np.errstate(invalid="ignore", over="ignore"):
        return x32.astype(BF16)


def test_rounding_equals_ml_dtypes_on_every_high_half():
    x = _patterns()
    assert np.array_equal(f32_to_bf16(x).view(np.uint16), _ref(x).view(np.uint16))
    assert np.array_equal(snap_bf16(x).view(np.uint32), _ref(x).view(np.uint16).astype(np.uint32) << 16)


def test_widening_equals_ml_dtypes_on_every_pattern():
    b = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(BF16)
    assert np.array_equal(bf16_to_f32(b).view(np.uint32), b.astype(np.float32).view(np.uint32))


@pytest.mark.parametrize("shape", [(), (1,), (3, 5), (70_000,), (2, 40_000)])
def test_shapes_and_chunks(shape):
    """0-d, small and multi-chunk arrays (2**16 values a chunk), NaN in a late chunk."""
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    if x.size > 1:
        x.reshape(-1)[-3] = np.nan
        x.reshape(-1)[-2] = -np.float32(np.nan)
    for got, want in ((f32_to_bf16(x).view(np.uint16), _ref(x).view(np.uint16)),
                      (snap_bf16(x).view(np.uint32), _ref(x).astype(np.float32).view(np.uint32))):
        assert got.shape == np.shape(x) and np.array_equal(got, want)


@pytest.mark.parametrize("name", ["numpy", "numpy-f32"])
def test_backends_round_and_widen_bfloat16_as_ml_dtypes(name):
    be = fb.get_backend(name)
    x = _patterns()[: 2**18]
    stored = be.round(x, get_format("bfloat16"))
    assert np.array_equal(be.to_f32(stored).view(np.uint32), _ref(x).astype(np.float32).view(np.uint32))


def test_non_contiguous_inputs():
    """A transposed or strided float32 input rounds (and a strided bfloat16 array widens) in its own
    shape and element order, as ml_dtypes' cast does."""
    x = _patterns()[: 2**16 * 3].reshape(3 * 256, 256)
    for v in (x.T, x[:, ::3], x[::2].T):
        assert np.array_equal(f32_to_bf16(v).view(np.uint16), _ref(v).view(np.uint16))
        assert np.array_equal(snap_bf16(v).view(np.uint32), _ref(v).astype(np.float32).view(np.uint32))
        b = _ref(v)
        assert np.array_equal(bf16_to_f32(b).view(np.uint32), b.astype(np.float32).view(np.uint32))


@pytest.mark.parametrize("size", [fb.BF16_BITS_MIN_SIZE - 1, fb.BF16_BITS_MIN_SIZE])
def test_numpy_backend_on_both_sides_of_the_size_thresholds(size):
    """Below the threshold the backend widens with ml_dtypes' cast, from it with the shift: the same bits."""
    be = fb.get_backend("numpy")
    x = _patterns()[7 * 2**16 : 7 * 2**16 + size]  # tie-breaking low halves, NaN-free exponents
    x = np.r_[x[:-2], np.float32(np.nan), np.float32(3.4e38)]
    stored = be.round(x, get_format("bfloat16"))
    assert stored.dtype == BF16 and np.array_equal(stored.view(np.uint16), _ref(x).view(np.uint16))
    assert np.array_equal(be.to_f32(stored).view(np.uint32), _ref(x).astype(np.float32).view(np.uint32))


@pytest.mark.parametrize("fmt", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_small_float32_roundings_raise_no_floating_point_flags(fmt):
    """The numpy backend rounds small float32 arrays with ml_dtypes' cast outside ``np.errstate``:
    overflow, inf and NaN must not warn (or raise, with numpy's flags set to raise)."""
    x = np.array([3.4e38, -3.4e38, np.inf, np.nan, 1e-45, 1.0], np.float32)
    with np.errstate(all="raise"):
        stored = fb.get_backend("numpy").round(x, get_format(fmt))
    with np.errstate(all="ignore"):
        want = x.astype(get_format(fmt).dtype)
    assert np.array_equal(stored.view(np.uint8), want.view(np.uint8), equal_nan=False)
