"""``f16_to_f32_scaled`` (GradScaler's unscaling of float16 gradients on numpy): every float16
pattern times a float32 scale, bit for bit as numpy widens and multiplies, and the inf / NaN
flag as numpy's isfinite says."""

from __future__ import annotations

import numpy as np
import pytest

from fpsim.backend import BACKENDS
from fpsim.formats.kernels import f16_to_f32_scaled

ALL = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
SCALES = [1.0, 2.0**-16, 2.0**-24, 1 / 3, 0.1, 3.0, 2.0**15, 2.0**16, 2.0**24, 2.0**-140, 0.0, np.inf]


def _reference(h, scale):
    with np.errstate(over="ignore", invalid="ignore"):
        return h.astype(np.float32) * np.float32(scale)


@pytest.mark.parametrize("scale", SCALES)
def test_every_pattern_times_a_scale(scale):
    for arr in (ALL, np.tile(ALL, 2).reshape(256, 512), ALL[::-7], ALL[:1000]):
        got, special = f16_to_f32_scaled(arr, scale)
        want = _reference(arr, scale)
        assert got.dtype == np.float32 and got.shape == want.shape
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))  # NaN payloads, -0, subnormals
        assert special == bool(not np.isfinite(arr.astype(np.float32)).all())


@pytest.mark.parametrize("scale", [2.0**-16, 0.1])
def test_finite_arrays_and_a_lone_special(scale):
    rng = np.random.default_rng(4)
    h = (rng.standard_normal(40000) * 10.0 ** rng.uniform(-7, 4, 40000)).astype(np.float16)
    h = h[np.isfinite(h)]
    got, special = f16_to_f32_scaled(h, scale)
    assert not special and np.array_equal(got.view(np.uint32), _reference(h, scale).view(np.uint32))
    for bits in (0x7C00, 0xFC00, 0x7E01, 0xFFFF):
        for pos in (0, h.size // 2, -1):
            g = h.copy()
            g.view(np.uint16)[pos] = bits
            got, special = f16_to_f32_scaled(g, scale)
            assert special
            assert np.array_equal(got.view(np.uint32), _reference(g, scale).view(np.uint32))


def test_backends_scale_alike():
    """numpy (folded) and numpy-f32 (widen, then multiply) give the same bits and the same flag."""
    h = np.tile(ALL, 3)
    a, fa = BACKENDS["numpy"].scaled_f32(h, np.float32(2.0**-16))
    b, fb = BACKENDS["numpy-f32"].scaled_f32(h.astype(np.float32), np.float32(2.0**-16))
    assert fa and fb
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_rejects_other_dtypes():
    with pytest.raises(TypeError, match="float16"):
        f16_to_f32_scaled(np.ones(4, np.float32), 1.0)
