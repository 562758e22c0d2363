"""Block-scaled formats, bit for bit against an independent reference (support/block_reference.py: exact
rationals from the definitions), gfloat's quantize_block (MX, floor) and, where it is installed,
torchao's MX reference code (every element type and scale rounding); Hypothesis properties; bad
input."""

import math

import ml_dtypes
import numpy as np
import pytest
from helpers import same
from hypothesis import given, settings
from hypothesis import strategies as st
from support.block_reference import (
    ELEM,
    MX_ELEM,
    blocks_1d,
    blocks_2d,
    fp8_block,
    mx_block,
    nvfp4_block,
    nvfp4_tensor_scale,
)

import fpsim
from fpsim.formats import SCALE_ROUNDINGS, cast, quantize
from fpsim.formats.kernels import f32_to_fp8

MX = list(MX_ELEM)
F32_TINY = np.float32(2.0**-126)


# ---------------------------------------------------------------------------- inputs


def random_rows(seed: int, rows: int = 6, cols: int = 70) -> np.ndarray:
    """Gaussian rows at magnitudes 1e-30 .. 1e30 (a partial last block when cols % k != 0)."""
    rng = np.random.default_rng(seed)
    mag = 10.0 ** rng.uniform(-30, 30, (rows, 1))
    return (rng.standard_normal((rows, cols)) * mag).astype(np.float32)


def grid(elem: str) -> list[float]:
    """Every non-negative value of the element format, from its layout (not from fpsim)."""
    m, emin, vmax, _ = ELEM[elem]
    vals = {k * 2.0 ** (emin - m) for k in range(2**m)}  # subnormals and 0
    e = emin
    while 2.0**e <= vmax:
        vals |= {(1 + k / 2**m) * 2.0**e for k in range(2**m) if (1 + k / 2**m) * 2.0**e <= vmax}
        e += 1
    return sorted(vals)


def adversarial_rows(elem: str, k: int = 32) -> np.ndarray:
    """Rows of length k, each a block that tests one edge (finite values only)."""
    g = np.array(grid(elem))
    vmax = float(ELEM[elem][2])
    mids = (g[:-1] + g[1:]) / 2  # ties at the element grid once the scale is 1 (amax = max)
    f32 = np.float32
    ulp_up = lambda v: np.nextafter(f32(v), f32(np.inf))  # noqa: E731
    ulp_dn = lambda v: np.nextafter(f32(v), f32(0))  # noqa: E731
    rows = []

    def row(vals):
        vals = list(vals)[:k]
        rows.append(np.resize(np.array(vals, dtype=np.float32), k) if vals else np.zeros(k, np.float32))

    row([vmax, *mids, *(-mids)])  # ties, scale 2**0 for floor
    row([vmax, *(ulp_up(v) for v in mids), *(ulp_dn(v) for v in mids)])  # just beside the ties
    row([vmax * 1.9, *(mids * 1.9)])  # beyond max in the top binade: saturation under floor
    row([1e4, *np.linspace(-1, 1, k - 1) * 1e-3])  # one huge outlier: the rest flush to zero
    row(np.linspace(-1, 1, k) * 1e-40)  # all float32 subnormals
    row(np.full(k, 2.0**-126))  # the smallest float32 normal
    row(np.linspace(-1, 1, k) * 3e38)  # near float32's max
    row([0.0] * k)  # all zeros
    row([-0.0, 0.0] * (k // 2))  # signed zeros
    for p in (1.0, 2.0**20, 2.0**-20):  # the scale boundaries of every rounding mode
        for a in (p, ulp_dn(p), ulp_up(p), vmax * p, ulp_up(vmax * p), ulp_dn(vmax * p),
                  (2 - 2.0 ** -(ELEM[elem][0] + 1)) * p, ulp_dn((2 - 2.0 ** -(ELEM[elem][0] + 1)) * p)):
            row([a, -a / 3, a / 7, a * 2.0**-12, -a * 2.0**-5])
    return np.stack(rows)


NONFINITE = np.array([[np.inf] + [1.0] * 31, [np.nan] + [2.0] * 31, [-np.inf] + [0.0] * 31, [3.0] * 32],
                     dtype=np.float32)


# ---------------------------------------------------------------------------- comparison


def check_1d(q, x, axis, k, ref_block):
    """Every block of q against ref_block(values) -> Block; scales compared by scale_value(q.scales)."""
    el = np.moveaxis(q.elements.astype(np.float64), axis, -1)
    dq = np.moveaxis(q.dequantize().astype(np.float64), axis, -1)
    scales = np.moveaxis(q.scales, axis, -1)
    under, sat = (np.moveaxis(a, axis, -1) for a in (q.stats.underflow, q.stats.saturated))
    for idx, vals in blocks_1d(x, axis, k):
        r = ref_block(vals)
        *lead, j = idx
        sl = (*lead, slice(j * k, j * k + len(vals)))
        assert same(dq[sl], r.dequant), (idx, vals, dq[sl], r.dequant)
        if r.scale is None:
            assert np.isnan(q.stats.scale[...].astype(np.float64)).any()
            continue
        assert same(el[sl], r.elements), (idx, vals, el[sl], r.elements)
        assert scale_value(scales[idx]) == r.scale, (idx, scales[idx], r.scale)
        assert (under[idx], sat[idx]) == (r.underflow, r.saturated), (idx, vals)


def scale_value(s):
    """A stored scale as the reference states it: the e8m0 exponent, or the exact value."""
    if s.dtype == ml_dtypes.float8_e8m0fnu:
        return int(np.asarray(s).view(np.uint8)) - 127
    from fractions import Fraction

    return Fraction(float(s))


# ---------------------------------------------------------------------------- MX


@pytest.mark.parametrize("fmt", MX)
@pytest.mark.parametrize("mode", SCALE_ROUNDINGS)
def test_mx_matches_the_reference_on_random_and_adversarial_blocks(fmt, mode):
    elem = MX_ELEM[fmt]
    cases = [(random_rows(1), -1), (random_rows(2, 5, 40).T.copy(), 0), (adversarial_rows(elem), -1),
             (NONFINITE, -1), (np.concatenate([adversarial_rows(elem)[:8], random_rows(3, 8, 32)], 1), 1)]
    for x, axis in cases:
        q = quantize(x, fmt, axis=axis, scale_rounding=mode)
        assert q.elements.dtype == np.dtype(getattr(ml_dtypes, elem)) and q.elements.shape == x.shape
        assert q.scales.dtype == ml_dtypes.float8_e8m0fnu
        check_1d(q, x, axis, 32, lambda v: mx_block(v, elem, mode))


def test_mx_nonfinite_blocks_are_nan_and_the_rest_untouched():
    q = quantize(NONFINITE, "mxfp4")
    assert q.scales.view(np.uint8)[:, 0].tolist() == [255, 255, 255, 126]
    d = q.dequantize()
    assert np.isnan(d[:3]).all() and (d[3] == 3.0).all()
    assert q.elements[:3].astype(np.float32).tolist() == [[0.0] * 32] * 3  # fp4 has no NaN to store
    assert np.isnan(quantize(NONFINITE, "mxfp8").elements[:3].astype(np.float32)).all()
    assert q.stats.totals() == {"blocks": 4, "underflow": 0, "saturated": 0, "nan_blocks": 3}


def test_mx_worked_examples():
    # amax 7 in fp4: floor(log2 7) - 2 = 0, X = 1: 7 is beyond max 6 and saturates; ceil / rceil pick X = 2.
    x = np.array([[7.0, 5.0, 0.2, -1.25]], np.float32)
    floor = quantize(x, "mxfp4", block=4)
    assert floor.dequantize().tolist() == [[6.0, 4.0, 0.0, -1.0]]
    assert (int(floor.stats.saturated[0, 0]), int(floor.stats.underflow[0, 0])) == (1, 1)
    for mode in ("ceil", "rceil"):
        assert quantize(x, "mxfp4", block=4, scale_rounding=mode).dequantize().tolist() == [[8.0, 4.0, 0.0, -1.0]]
    # even: 7 rounds to 8 at fp4's precision, so the scale goes up as with ceil
    assert quantize(x, "mxfp4", block=4, scale_rounding="even").scales.view(np.uint8).tolist() == [[128]]
    # the all-zero block: the smallest scale, 2**-127, and zeros
    z = quantize(np.zeros((1, 32), np.float32), "mxfp8")
    assert z.scales.view(np.uint8).tolist() == [[0]] and not z.dequantize().any()


def test_gfloat_quantize_block_agrees_on_floor():
    gfloat = pytest.importorskip("gfloat")
    gformats = pytest.importorskip("gfloat.formats")
    infos = {"mxfp8_e4m3": "format_info_mxfp8_e4m3", "mxfp8_e5m2": "format_info_mxfp8_e5m2",
             "mxfp6_e3m2": "format_info_mxfp6_e3m2", "mxfp6_e2m3": "format_info_mxfp6_e2m3",
             "mxfp4_e2m1": "format_info_mxfp4_e2m1"}
    for fmt, info in infos.items():
        fi = getattr(gformats, info)
        x = np.concatenate([random_rows(4, 8, 32), adversarial_rows(MX_ELEM[fmt])])
        x = x[np.abs(x).max(axis=1) < 2.0**127]  # gfloat's scale must fit its e8m0 (it raises otherwise)
        got = quantize(x, fmt).dequantize()
        for i, blk in enumerate(x):
            ref = gfloat.quantize_block(fi, blk.astype(np.float64), gfloat.compute_scale_amax)
            assert np.array_equal(got[i].astype(np.float64), ref), (fmt, i, blk)


def torchao_rceil_is_exact(amax, vmax) -> np.ndarray:
    """Blocks where torchao 0.18's eager rceil (float32 log2 of amax / max) equals the hardware's
    exact round-up of amax * (1 / max) (what fpsim and later torchao compute)."""
    with np.errstate(divide="ignore", invalid="ignore", under="ignore"):
        by_log2 = np.ceil(np.log2(amax / np.float32(vmax)))
        d = (amax * (np.float32(1) / np.float32(vmax))).view(np.uint32)
    exact = np.where(d >> 23 > 0, (d >> 23).astype(int) - 127 + ((d & 0x7FFFFF) != 0), 0)
    return (by_log2 == exact) | (d >> 23 == 0)


TORCHAO_ELEM = {"mxfp8_e4m3": "float8_e4m3fn", "mxfp8_e5m2": "float8_e5m2", "mxfp6_e2m3": "fp6_e2m3",
                "mxfp6_e3m2": "fp6_e3m2", "mxfp4_e2m1": "float4_e2m1fn_x2"}


@pytest.mark.parametrize("fmt", MX)
def test_torchao_mx_reference_agrees(fmt):
    torch = pytest.importorskip("torch")
    mx = pytest.importorskip("torchao.prototype.mx_formats.mx_tensor")
    config = pytest.importorskip("torchao.prototype.mx_formats.config")
    constants = pytest.importorskip("torchao.prototype.mx_formats.constants")
    elem = getattr(torch, TORCHAO_ELEM[fmt], None) or getattr(constants, "DTYPE_" + TORCHAO_ELEM[fmt].upper())
    adv = adversarial_rows(MX_ELEM[fmt])
    adv = adv[: adv.shape[0] // 2 * 2].reshape(-1, 64)  # two blocks a row
    x = np.concatenate([random_rows(5, 16, 64), adv, np.tile(NONFINITE, (1, 2))])
    for mode in (m for m in SCALE_ROUNDINGS if m != "bump"):  # torchao has no bump rule
        ours = quantize(x, fmt, scale_rounding=mode)
        scale, data = mx.to_mx(torch.from_numpy(x), elem, 32, getattr(config.ScaleCalculationMode, mode.upper()))
        theirs = mx.to_dtype(data, scale, elem, 32, torch.float32).numpy()
        # Every other block must agree bit for bit.  Blocks holding inf or NaN: fpsim's scale is NaN
        # (0xFF); torchao 0.18 gives an inf block 2**(128 - emax) (later torchao gives NaN too).
        # Blocks whose scale is 2**-127 (code 0, a float32 subnormal): torchao 0.18 divides by the
        # smallest float32 normal 2**-126 instead, so its elements are half the spec's V / X.
        amax = np.abs(x).reshape(x.shape[0], -1, 32).max(-1)
        ok = np.isfinite(amax) & (ours.scales.view(np.uint8) != 0)
        if mode == "rceil":  # torchao 0.18's CPU fallback: ceil(log2(amax / max)) in float32, which drops
            ok &= torchao_rceil_is_exact(amax, ELEM[MX_ELEM[fmt]][2])  # a last-bit excess over 2**k
        assert np.array_equal(ours.scales.view(np.uint8)[ok], scale.view(torch.uint8).numpy()[ok]), mode
        assert same(ours.dequantize()[np.repeat(ok, 32, axis=1)], theirs[np.repeat(ok, 32, axis=1)]), mode


# ---------------------------------------------------------------------------- NVFP4 and fp8 blocks


def nvfp4_inputs():
    g = np.array(grid("float4_e2m1fn"), np.float32)
    ties = np.concatenate([[6.0], (g[:-1] + g[1:]) / 2]).astype(np.float32)
    return [random_rows(6, 5, 70), random_rows(7, 33, 48) * np.float32(1e-3),
            np.stack([np.resize(ties * s, 32) for s in (1.0, 0.37, 2.0**-20, 1e30)]),
            np.stack([np.resize([1e4, 1e-3, -2e-3, 0.5], 32), np.zeros(32), np.resize([-0.0, 1e-40], 32)]),
            NONFINITE]


def test_nvfp4_1x16_matches_the_reference():
    for x in nvfp4_inputs():
        q = quantize(x, "nvfp4")
        finite = x[np.isfinite(x)]
        s_enc = nvfp4_tensor_scale(max(abs(__import__("fractions").Fraction(float(v))) for v in finite.flat))
        assert q.scales.dtype == ml_dtypes.float8_e4m3fn and q.elements.dtype == ml_dtypes.float4_e2m1fn
        assert float(q.tensor_scale) == float(np.float32(1) / np.float32(float(s_enc)))
        check_1d(q, x, -1, 16, lambda v, s=s_enc: nvfp4_block(v, s))


def test_nvfp4_16x16_tiles_match_the_reference():
    from fractions import Fraction

    for x in nvfp4_inputs()[:2]:
        q = quantize(x, "nvfp4", block=(16, 16))
        s_enc = nvfp4_tensor_scale(max(abs(Fraction(float(v))) for v in x.flat))
        assert q.scales.shape == (-(-x.shape[0] // 16), -(-x.shape[1] // 16))
        dq = q.dequantize().astype(np.float64)
        for (i, j), vals in blocks_2d(x, 16, 16):
            r = nvfp4_block(vals, s_enc)
            tile = dq[i * 16 : i * 16 + 16, j * 16 : j * 16 + 16].reshape(-1)
            assert same(tile, r.dequant) and Fraction(float(q.scales[i, j])) == r.scale
            assert (q.stats.underflow[i, j], q.stats.saturated[i, j]) == (r.underflow, r.saturated)


@pytest.mark.parametrize("pow2", [False, True])
def test_fp8_blocks_match_the_reference(pow2):
    from fractions import Fraction

    for x in [random_rows(8, 3, 300), random_rows(9, 2, 128) * np.float32(1e-38), NONFINITE,
              np.pad(adversarial_rows("float8_e4m3fn"), [(0, 0), (0, 96)])]:
        q = quantize(x, "fp8_block", pow2_scales=pow2)
        assert q.scales.dtype == np.float32
        check_1d(q, x, -1, 128, lambda v: fp8_block(v, pow2))
    w = random_rows(10, 200, 130)
    q = quantize(w, "fp8_block", block=(128, 128), pow2_scales=pow2)
    dq = q.dequantize().astype(np.float64)
    for (i, j), vals in blocks_2d(w, 128, 128):
        r = fp8_block(vals, pow2)
        assert same(dq[i * 128 : (i + 1) * 128, j * 128 : (j + 1) * 128].reshape(-1), r.dequant)
        assert Fraction(float(q.scales[i, j])) == r.scale


# ---------------------------------------------------------------------------- the result object


def test_nbytes_counts_packed_elements_and_scales():
    x = np.ones((64, 128), np.float32)
    assert quantize(x, "mxfp8").nbytes == 64 * 128 + 64 * 4
    assert quantize(x, "mxfp4").nbytes == 64 * 128 // 2 + 64 * 4
    assert quantize(x, "mxfp6").nbytes == 64 * 128 * 6 // 8 + 64 * 4
    assert quantize(x, "nvfp4").nbytes == 64 * 128 // 2 + 64 * 8 + 4
    assert quantize(x, "nvfp4", block=(16, 16)).nbytes == 64 * 128 // 2 + 4 * 8 + 4
    assert quantize(x, "fp8_block").nbytes == 64 * 128 + 64 * 4
    assert quantize(x, "fp8_block", block=(128, 128)).nbytes == 64 * 128 + 4
    assert quantize(x, "mxfp8").bits_per_element == 8.25 and quantize(x, "mxfp4").bits_per_element == 4.25


def test_partial_blocks_axes_and_layouts():
    x = random_rows(11, 7, 45)
    for axis in (0, 1, -1, -2):
        q = quantize(x, "mxfp8", axis=axis)
        n = x.shape[axis]
        assert q.scales.shape[axis] == -(-n // 32) and q.elements.shape == x.shape
    x3 = random_rows(12, 6, 40).reshape(2, 3, 40)
    q = quantize(x3, "mxfp6", axis=1, block=2)
    assert q.scales.shape == (2, 2, 40)
    check_1d(q, x3, 1, 2, lambda v: mx_block(v, "float6_e2m3fn", "floor"))


def test_stochastic_elements_are_seeded_and_unbiased():
    x = np.full((400, 32), 1.25, np.float32)
    x[:, 0] = 4.0  # amax 4: X = 1 in fp4; 1.25 sits a quarter of the way from 1 to 1.5... halfway
    a = quantize(x, "mxfp4", rounding="stochastic", seed=3)
    b = quantize(x, "mxfp4", rounding="stochastic", seed=3)
    assert np.array_equal(a.elements.view(np.uint8), b.elements.view(np.uint8))
    v = a.dequantize()[:, 1:]
    assert set(np.unique(v)) == {1.0, 1.5} and abs(v.mean() - 1.25) < 0.01


def test_f32_to_fp8_table_covers_fp6_and_fp4():
    x = np.random.default_rng(0).standard_normal(200_000).astype(np.float32) * np.float32(3)
    for name in ("float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"):
        assert np.array_equal(f32_to_fp8(x, name).view(np.uint8), cast(x, name).view(np.uint8))
        with pytest.raises(ValueError, match="has no NaN"):
            f32_to_fp8(np.array([np.nan], np.float32), name)


# ---------------------------------------------------------------------------- properties

F32_MAX = float(np.finfo(np.float32).max)
finite32 = st.floats(min_value=-F32_MAX, max_value=F32_MAX, allow_nan=False, width=32)


@settings(max_examples=150, deadline=None)
@given(st.lists(finite32, min_size=1, max_size=70), st.sampled_from(MX), st.sampled_from(SCALE_ROUNDINGS))
def test_mx_property_matches_the_reference(vals, fmt, mode):
    x = np.array(vals, np.float32)
    check_1d(quantize(x, fmt, scale_rounding=mode), x, 0, 32, lambda v: mx_block(v, MX_ELEM[fmt], mode))


@settings(max_examples=150, deadline=None)
@given(st.lists(finite32, min_size=1, max_size=64), st.sampled_from(MX), st.sampled_from(SCALE_ROUNDINGS),
       st.integers(-20, 20))
def test_mx_properties(vals, fmt, mode, shift):
    x = np.array(vals, np.float32)
    q = quantize(x, fmt, scale_rounding=mode)
    d = q.dequantize()
    # the dequantized values are a fixed point: quantizing them again gives them back (unless the
    # product overflowed float32, which ceil / even / rceil scales near 2**128 can do)
    if np.isfinite(d).all():
        assert same(quantize(d, fmt, scale_rounding=mode).dequantize(), d)
    # negation commutes; |elements| never exceed the element's max
    assert same(quantize(-x, fmt, scale_rounding=mode).dequantize(), -d)
    assert np.abs(q.elements.astype(np.float64)).max() <= float(ELEM[MX_ELEM[fmt]][2])
    # scaling by a power of two only moves the scales, away from e8m0's and float32's ends
    e = q.scales.view(np.uint8).astype(int) - 127
    with np.errstate(over="ignore"):
        y = x * np.float32(2.0**shift)
    amax = np.abs(x).max()
    if amax > 0 and np.all(np.abs(e + shift) < 100) and 2.0**-100 < amax * 2.0**shift < 2.0**100 and amax > 2.0**-100:
        qy = quantize(y, fmt, scale_rounding=mode)
        assert np.array_equal(qy.elements.view(np.uint8), q.elements.view(np.uint8))
        assert np.array_equal(qy.scales.view(np.uint8).astype(int) - 127, e + shift)


# ---------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("kwargs,exc,match", [
    ({"fmt": "mxfp7"}, ValueError, r"unknown block format 'mxfp7'; known: mxfp8_e4m3, .*nvfp4"),
    ({"block": 0}, ValueError, "block must be a positive integer"),
    ({"block": -32}, ValueError, "block must be a positive integer"),
    ({"block": 1.5}, ValueError, "block must be a positive integer"),
    ({"block": "32"}, ValueError, "block must be a positive integer"),
    ({"block": True}, ValueError, "block must be a positive integer"),
    ({"block": (16,)}, ValueError, "block must be a positive integer"),
    ({"block": (0, 16)}, ValueError, "block must be a positive integer"),
    ({"axis": 2}, ValueError, "axis 2 does not exist: the input has 2 dimension"),
    ({"axis": -3}, ValueError, "axis -3 does not exist"),
    ({"axis": "0"}, TypeError, "axis must be an integer"),
    ({"axis": 0, "block": (16, 16)}, ValueError, "2-D blocks cover the last two axes"),
    ({"scale_rounding": "round"}, ValueError, "unknown scale_rounding 'round'; known: floor, ceil, even, rceil"),
    ({"fmt": "nvfp4", "scale_rounding": "floor"}, ValueError, "unknown scale_rounding 'floor' for nvfp4"),
    ({"fmt": "fp8_block", "scale_rounding": "floor"}, ValueError, "scale_rounding applies to the MX formats and nvfp4"),
    ({"pow2_scales": True}, ValueError, "pow2_scales applies to fp8_block only"),
    ({"pow2_scales": 1}, TypeError, "pow2_scales must be True or False"),
    ({"rounding": "up"}, ValueError, "unknown rounding 'up'"),
    ({"x": "abc"}, TypeError, "expected"),
    ({"x": np.ones(8, np.float32), "block": (4, 4)}, ValueError, "2-D blocks .* need an input of at least 2"),
])
def test_bad_input_is_one_line_and_changes_nothing(kwargs, exc, match):
    kw = {"x": np.ones((4, 64), np.float32), "fmt": "mxfp8", **kwargs}
    x, fmt = kw.pop("x"), kw.pop("fmt")
    before = x.copy() if isinstance(x, np.ndarray) else x
    fpsim.manual_seed(1)
    with pytest.raises(exc, match=match) as e:
        quantize(x, fmt, rounding=kw.pop("rounding", "stochastic"), **kw)
    assert "\n" not in str(e.value)
    if isinstance(x, np.ndarray):
        assert np.array_equal(x, before)
    after = cast(np.full(64, 1.3), "fp16", "stochastic")  # the shared generator was not drawn from
    fpsim.manual_seed(1)
    assert np.array_equal(after.view(np.uint16), cast(np.full(64, 1.3), "fp16", "stochastic").view(np.uint16))


def test_names_and_aliases():
    assert fpsim.get_block_format("MXFP8").name == "mxfp8_e4m3"
    assert fpsim.get_block_format("mxfp4").name == "mxfp4_e2m1"
    assert fpsim.get_block_format("deepseek_fp8").name == "fp8_block"
    assert list(fpsim.BLOCK_FORMATS) == ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4_e2m1", "mxint8",
                                         "nvfp4", "fp8_block"]
    assert math.isclose(quantize(np.float32([1, 2]), "mxfp8").dequantize()[1], 2.0)


def test_a_block_quantized_whose_elements_do_not_fit_its_scales_is_refused_in_one_line():
    """Elements of another shape than the scales imply (dataclasses.replace, or built by hand) were a
    broadcast error at dequantize, or no error at all where the sizes agreed (4 x 32 under 2 x 2
    scales); now the construction names both shapes."""
    from dataclasses import replace

    q = quantize(np.ones((2, 64), np.float32), "mxfp8_e4m3")
    for elements, want in ((q.elements[:, :32], (2, 1)), (q.elements.reshape(4, 32), (4, 1))):
        shape = rf"\({elements.shape[0]}, {elements.shape[1]}\)"
        with pytest.raises(ValueError, match=rf"elements of shape {shape} in blocks of 32 along axis 1 "
                                             rf"take scales of shape \({want[0]}, {want[1]}\), not \(2, 2\)"):
            replace(q, elements=elements)
    assert replace(q, elements=q.elements[:, :40]).dequantize().shape == (2, 40)  # still two blocks a row
    t = quantize(np.ones((20, 40), np.float32), "fp8_block", block=(16, 16))
    with pytest.raises(ValueError, match=r"elements of shape \(16, 40\) in tiles of \(16, 16\) take scales of "
                                         r"shape \(1, 3\), not \(2, 3\)"):
        replace(t, elements=t.elements[:16])
