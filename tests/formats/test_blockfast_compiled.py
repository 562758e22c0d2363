"""blockfast's compiled passes (fpsim/numerics/compiled/_blocks.py: the block maxima and the element
pass to nearest) against ``quantize(...).dequantize()`` and against blockfast's numpy path, bit for
bit: every MX element, NVFP4 and the fp8 blocks, blocks along the last and an earlier axis, 2-D
tiles, partial blocks, inf / NaN blocks, zeros, float32 subnormals, sizes either side of the
compiled path's threshold; and the compiled kernels are the ones that ran.  Skipped where numba
is not installed."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import block_values

pytest.importorskip("numba")

from helpers import bits  # noqa: E402

from fpsim.formats import quantize  # noqa: E402
from fpsim.formats.blockfast import fake_quantize  # noqa: E402
from fpsim.numerics import compiled  # noqa: E402
from fpsim.numerics.compiled import use_compiled  # noqa: E402

# FPSIM_NUMBA=0 turns the compiled path off for the process: there is nothing here to compare then
# (the numpy path these tests compare against is what the rest of the suite runs on)
pytestmark = pytest.mark.skipif(not compiled.enabled(), reason="the compiled path is off (FPSIM_NUMBA=0)")

CASES = [("mxfp8_e4m3", {}), ("mxfp8_e5m2", {"scale_rounding": "floor"}), ("mxfp6_e2m3", {}), ("mxfp6_e3m2", {}),
         ("mxfp4_e2m1", {}), ("mxfp4_e2m1", {"block": 8}), ("nvfp4", {}), ("nvfp4", {"block": (16, 16)}),
         ("fp8_block", {}), ("fp8_block", {"block": (128, 128), "pow2_scales": True})]
SHAPES = [((256, 96), -1), ((96, 256), 0), ((70, 450), -1), ((70, 450), 0), ((3, 40, 500), 1), ((2, 130, 260), -1),
          ((256, 256), -1), ((600, 300), 0), ((40, 20), -1)]


def _spy(monkeypatch):
    """Count the calls of the compiled block kernels."""
    calls = {}
    table = compiled.kernels().roundings
    for name in ("block_amax", "block_nearest", "block_stochastic"):
        fn = table[name]
        monkeypatch.setitem(table, name, lambda *a, _fn=fn, _n=name: calls.update({_n: calls.get(_n, 0) + 1}) or _fn(*a))
    return calls


def _check(x, fmt, axis, kw, seed=None):
    """Both paths give quantize's bits; ``seed``: stochastic rounding, each from its own generator."""
    gen = (lambda: {}) if seed is None else (lambda: {"rounding": "stochastic", "rng": np.random.default_rng(seed)})
    want = quantize(x, fmt, axis, **kw, **gen()).dequantize()
    with use_compiled(False):
        r0 = fake_quantize(x, fmt, axis, **kw, **gen())
    with use_compiled(True):
        r1 = fake_quantize(x, fmt, axis, **kw, **gen())
    for got in (r0, r1):
        assert got.dtype == np.float32 and got.shape == x.shape and got.flags.c_contiguous
        assert np.array_equal(bits(got), bits(want)), (fmt, axis, kw, x.shape)


@pytest.mark.parametrize("fmt, kw", CASES, ids=[f"{f}-{'-'.join(map(str, kw.values()))}" for f, kw in CASES])
def test_same_bits_on_both_paths(fmt, kw, monkeypatch):
    calls = _spy(monkeypatch)
    rng = np.random.default_rng(len(fmt) + len(kw))
    tiled = isinstance(kw.get("block"), tuple)
    for shape, axis in SHAPES:
        if tiled and axis % len(shape) != len(shape) - 1:
            continue
        x = block_values(rng, shape)
        for seed in (None, 11):
            _check(x, fmt, axis, kw, seed)
        x.reshape(-1)[[1, x.size // 2]] = [np.inf, -np.inf]  # two blocks of NaN scales, the rest untouched
        x.reshape(-1)[x.size // 3] = np.nan
        for seed in (None, 12):
            _check(x, fmt, axis, kw, seed)
        _check(np.zeros(shape, np.float32), fmt, axis, kw)
    assert all(calls.get(k, 0) > 0 for k in ("block_amax", "block_nearest", "block_stochastic")), calls


def test_small_blocks_keep_the_numpy_path(monkeypatch):
    """Below the size threshold nothing compiled runs, to nearest or stochastically (and the bits
    are quantize's)."""
    calls = _spy(monkeypatch)
    rng = np.random.default_rng(5)
    x = block_values(rng, (8, 64))
    with use_compiled(True):
        assert np.array_equal(bits(fake_quantize(x, "mxfp8_e4m3")), bits(quantize(x, "mxfp8_e4m3").dequantize()))
        got = fake_quantize(x, "nvfp4", rounding="stochastic", seed=3)
    want = quantize(x, "nvfp4", rounding="stochastic", seed=3).dequantize()
    assert np.array_equal(bits(got), bits(want))
    assert calls.get("block_nearest", 0) == calls.get("block_stochastic", 0) == 0


ELEMENTS = ["float8_e4m3fn", "float8_e5m2", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"]


def _patterns() -> np.ndarray:
    """float32 patterns: every exponent with every top 10 mantissa bits, each with six endings of the
    low 13 (exact, just above, below and at the halfway point of a 10-bit grid, ...), signs
    alternating; NaN left out (the caller sets NaN blocks)."""
    top = np.arange(2**18, dtype=np.uint32) << np.uint32(13)
    low = np.array([0, 1, 0x0FFF, 0x1000, 0x1001, 0x1FFF], np.uint32)
    p = (top[:, None] | low).reshape(-1)
    p[1::2] |= np.uint32(0x80000000)
    p = p[(p & np.uint32(0x7FFFFFFF)) <= 0x7F800000]
    return p[: p.size // 32 * 32].view(np.float32).reshape(-1, 32)


@pytest.mark.parametrize("name", ELEMENTS)
def test_the_compiled_rounding_to_nearest_is_the_saturating_cast(name):
    """The compiled element pass rounds by the float32 adder, the numpy path by its table: both the
    saturating round-to-nearest-even cast (ml_dtypes' cast of the value clipped to +-max), on 1.5
    million patterns per format - every exponent and leading mantissa, ties, sticky bits, subnormals,
    +-inf - with encode and decode factors of 1."""
    from fpsim.formats import get_format
    from fpsim.formats.blockfast import _kernel_args, _nearest_table
    from fpsim.formats.kernels import bf16_odd_patterns

    elem = get_format(name)
    x = _patterns()
    one = np.ones(x.shape[0], np.float32)
    got = compiled.kernels().roundings["block_nearest"](x, one, one, _kernel_args(elem))
    with np.errstate(invalid="ignore"):
        want = np.clip(x, -elem.max, elem.max).astype(elem.dtype).astype(np.float32)
    assert np.array_equal(bits(got), bits(want))
    assert np.array_equal(bits(got), bits(_nearest_table(elem).take(bf16_odd_patterns(x))))


def _amaxes(rng) -> np.ndarray:
    """float32 block maxima: every exponent field (subnormals, inf and NaN included) with 40
    mantissas each (0, 1, all ones, the e4m3 halfway bits, random)."""
    mant = np.concatenate([np.uint32([0, 1, 0x7FFFFF, 0x080000, 0x180000, 0x0FFFFF]),
                           rng.integers(0, 2**23, 34).astype(np.uint32)])
    return ((np.arange(256, dtype=np.uint32)[:, None] << np.uint32(23)) | mant).reshape(-1).view(np.float32)


@pytest.mark.parametrize("top", [6.0, 4.0])
def test_nvfp4_scales_on_both_paths_and_the_reference(top, monkeypatch):
    """The compiled NVFP4 scales (e4m3 codes, encode and decode factors) are the numpy path's bits
    for every exponent of amax under tensor scales from 2**-149 to float32's max (and inf, which
    nvfp4_tensor_scale never gives: the numpy path's, whichever runs), and the reference's
    (tests/support/block_reference.py, fractions) on a sample."""
    from fractions import Fraction as Q

    from support.block_reference import f32, nvfp4_block

    from fpsim.formats import block_scales as bs

    rng = np.random.default_rng(int(top))
    amax = _amaxes(rng)
    ran = []
    fn = compiled.kernels().roundings["nvfp4_scales"]
    monkeypatch.setitem(compiled.kernels().roundings, "nvfp4_scales", lambda *a: ran.append(1) or fn(*a))
    for s_enc in np.float32([1.0, 2688.0 / 3.0, 3.4e38, 2.0**-126, 7.3e-21, 1e-45, np.inf]):
        with use_compiled(True), np.errstate(all="ignore"):
            got = bs.nvfp4_scales(amax, s_enc, top)
        with use_compiled(False), np.errstate(all="ignore"):
            want = bs.nvfp4_scales(amax, s_enc, top)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and np.array_equal(g.view(np.uint8), w.view(np.uint8)), s_enc
        if top != 6.0 or not 2.0**-126 <= s_enc < np.inf:  # the reference's rule: amax to 6, a finite 1 / S_enc
            continue
        s_dec = f32(1 / Q(float(s_enc)))
        for i in rng.choice(np.flatnonzero(np.isfinite(amax)), 40, replace=False):
            s = nvfp4_block([float(amax[i])], Q(float(s_enc))).scale
            assert got[0][i].astype(np.float32) == float(s) and got[2][i] == float(f32(s * s_dec)), (amax[i], s_enc)
    assert len(ran) == 5  # the kernel ran for every finite S_enc with a finite 1 / S_enc
