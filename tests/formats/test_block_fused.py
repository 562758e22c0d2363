"""fake_quantize (quantize-then-dequantize in one go) against quantize(...).dequantize() bit for bit
- every family and scale rule, both axes, partial blocks, tiles, zeros, inf / NaN, float32
subnormals, the saturation edge, stochastic rounding's draws - and against the independent
exact reference of tests/support/block_reference.py."""

import math
from fractions import Fraction

import numpy as np
import pytest
from helpers import bits, exact_matmul_f32, same
from hypothesis import given, settings
from hypothesis import strategies as st
from support.block_reference import MX_ELEM, blocks_1d, blocks_2d, fp8_block, mx_block, nvfp4_block, nvfp4_tensor_scale

import fpsim
from fpsim.formats import SCALE_ROUNDINGS, quantize
from fpsim.formats.blockfast import fake_quantize
from fpsim.formats.kernels import bf16_odd_patterns
from fpsim.lowp import BlockScaling, hadamard_matrix, hadamard_transform

# (format, quantize keywords): every family, scale rule and element type the recipes use
CASES = ([(f, {"scale_rounding": m}) for f in MX_ELEM for m in SCALE_ROUNDINGS]
         + [("nvfp4", {}), ("nvfp4", {"block": (16, 16)}), ("fp8_block", {}), ("fp8_block", {"pow2_scales": True}),
            ("fp8_block", {"block": (128, 128), "pow2_scales": True}), ("mxfp4", {"block": 8}),
            ("mxint8", {}), ("nvfp4", {"scale_rounding": "four_over_six"})])
CASE_IDS = [f"{f}-{'-'.join(map(str, kw.values()))}" for f, kw in CASES]


def edge_values(rng, shape) -> np.ndarray:
    """Gaussians at magnitudes 1e-42 .. 1e38 per row (float32 subnormals to near float32's max),
    with zeros, signed zeros, e4m3 / e2m1 grid ties and values at the saturation edge mixed in."""
    mag = 10.0 ** rng.uniform(-42, 37, (shape[0],) + (1,) * (len(shape) - 1))
    x = (rng.standard_normal(shape) * mag).astype(np.float32)
    flat = x.reshape(-1)
    special = np.array([0.0, -0.0, 448.0, 464.0, 479.99, 480.0, 6.0, 5.0, 7.0, -6.5, 0.25, 0.75, 2.0**-9, 2.0**-10,
                        1e-45, -3e38, 3.4e38], np.float32)
    pos = rng.choice(flat.size, min(flat.size, 3 * special.size), replace=False)
    with np.errstate(over="ignore"):
        flat[pos] = np.resize(special, pos.size) * np.float32(2.0 ** rng.integers(-3, 4))
    return x


def check_same(x, fmt, axis=-1, rng_seed=None, **kw):
    """The same bits from both; ``rng_seed``: each gets its own generator seeded with it."""
    gen = (lambda: {}) if rng_seed is None else (lambda: {"rng": np.random.default_rng(rng_seed)})
    want = quantize(x, fmt, axis, **kw, **gen()).dequantize()
    got = fake_quantize(x, fmt, axis, **kw, **gen())
    assert got.shape == np.shape(x) and got.flags.c_contiguous
    diff = bits(want) != bits(got)
    assert not diff.any(), (fmt, axis, kw, np.flatnonzero(diff)[:5], want[diff][:5], got[diff][:5])
    return got


SHAPES = [((64, 96), -1), ((64, 96), 0), ((70, 45), -1), ((70, 45), 0), ((3, 40, 50), 1), ((3, 40, 50), 0),
          ((5, 33), 0), ((33,), 0), ((2, 130, 260), -1)]


@pytest.mark.parametrize("fmt, kw", CASES, ids=CASE_IDS)
def test_same_bits_as_quantize_dequantize(fmt, kw):
    rng = np.random.default_rng(CASES.index((fmt, kw)))
    tiled = isinstance(kw.get("block"), tuple)
    for shape, axis in SHAPES:
        if tiled and (axis % len(shape) != len(shape) - 1 or len(shape) < 2):
            continue
        x = edge_values(rng, shape)
        check_same(x, fmt, axis, **kw)
        x.reshape(-1)[[1, x.size // 2]] = [np.inf, -np.inf]  # two blocks of NaN scales, the rest untouched
        if fmt not in ("mxint8",) and kw.get("scale_rounding") != "four_over_six":
            assert np.isnan(check_same(x, fmt, axis, **kw)).any()
        x.reshape(-1)[x.size // 3] = np.nan
        check_same(x, fmt, axis, **kw)
        check_same(np.zeros(shape, np.float32), fmt, axis, **kw)


@pytest.mark.parametrize("fmt, kw", [c for c in CASES if c[0] != "mxint8"][::3] + [("nvfp4", {"block": (16, 16)})])
def test_stochastic_rounding_draws_the_same_numbers(fmt, kw):
    rng = np.random.default_rng(7)
    tiled = isinstance(kw.get("block"), tuple)
    for shape, axis in SHAPES[:7]:
        if tiled and axis % len(shape) != len(shape) - 1:
            continue
        x = edge_values(rng, shape)
        check_same(x, fmt, axis, rounding="stochastic", seed=11, **kw)
        check_same(x, fmt, axis, rounding="stochastic", rng_seed=3, **kw)
    # the module generator, left where quantize leaves it
    x = edge_values(rng, (96, 64))
    first = -1 if tiled else 0
    fpsim.manual_seed(5)
    a = quantize(x, fmt, first, rounding="stochastic", **kw).dequantize()
    a2 = quantize(x, fmt, -1, rounding="stochastic", **kw).dequantize()
    fpsim.manual_seed(5)
    b = fake_quantize(x, fmt, first, rounding="stochastic", **kw)
    b2 = fake_quantize(x, fmt, -1, rounding="stochastic", **kw)
    assert np.array_equal(bits(a), bits(b)) and np.array_equal(bits(a2), bits(b2))


def test_stochastic_rounding_really_draws():
    x = np.full((64, 32), 1.25, np.float32)
    x[:, 0] = 4.0
    v = fake_quantize(x, "mxfp4", 0, rounding="stochastic", seed=1)[1:, 1:]
    assert set(np.unique(v)) == {1.0, 1.5}
    assert not np.array_equal(v, fake_quantize(x, "mxfp4", 0, rounding="stochastic", seed=2)[1:, 1:])


def test_hadamard_inputs():
    rng = np.random.default_rng(4)
    h = hadamard_matrix(3)
    for shape in ((64, 48), (45, 40)):
        x = hadamard_transform(edge_values(rng, shape), h)
        for fmt in ("nvfp4", "mxfp4"):
            check_same(x, fmt, 0)
            check_same(x, fmt, 0, rounding="stochastic", seed=1)


def test_other_rounding_modes_and_inputs_go_through_quantize():
    x = edge_values(np.random.default_rng(5), (8, 40))
    for mode in ("toward_zero", "nearest_away", "to_odd"):
        check_same(x, "mxfp8", -1, rounding=mode)
    check_same(x.astype(np.float64) * 1.0000001, "mxfp6", 0)  # float64 rounds to float32 first
    with np.errstate(over="ignore"):
        check_same(x.astype(np.float16), "nvfp4")
    check_same(np.zeros((0, 32), np.float32), "mxfp8")
    check_same(x[:, ::3], "mxfp8", 0)  # a strided input


@pytest.mark.parametrize("kwargs, exc", [({"fmt": "mxfp9"}, ValueError), ({"axis": 2}, ValueError),
                                         ({"rounding": "up"}, ValueError), ({"block": 0}, ValueError),
                                         ({"seed": -1}, ValueError), ({"rng": 3}, TypeError),
                                         ({"pow2_scales": True}, ValueError),
                                         ({"scale_rounding": "six", "fmt": "mxfp4"}, ValueError)])
def test_bad_arguments_raise_as_quantize_does(kwargs, exc):
    kw = {"fmt": "mxfp8", **kwargs}
    x = np.ones((4, 32), np.float32)
    with pytest.raises(exc) as want:
        quantize(x, **kw)
    with pytest.raises(exc) as got:
        fake_quantize(x, **kw)
    assert str(got.value) == str(want.value)


# ---------------------------------------------------------------------------- the independent reference


@pytest.mark.parametrize("fmt", list(MX_ELEM))
@pytest.mark.parametrize("mode", SCALE_ROUNDINGS)
def test_mx_against_the_exact_reference(fmt, mode):
    x = edge_values(np.random.default_rng(8), (40, 6))
    x[3, 2] = np.inf
    got = np.moveaxis(fake_quantize(x, fmt, 0, scale_rounding=mode), 0, -1)
    for (j, b), vals in blocks_1d(x, 0, 32):
        assert same(got[j, b * 32 : b * 32 + len(vals)], mx_block(vals, MX_ELEM[fmt], mode).dequant), (j, b)


def test_nvfp4_and_fp8_blocks_against_the_exact_reference():
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((20, 48)) * 10.0 ** rng.uniform(-8, 3, (20, 1))).astype(np.float32)
    x.reshape(-1)[rng.choice(x.size, 12, replace=False)] = [0.0, -0.0, 1e-40, -1e-44, 6.0, 448.0] * 2
    s_enc = nvfp4_tensor_scale(max(abs(Fraction(float(v))) for v in x.flat))
    got = fake_quantize(x, "nvfp4")
    for (i, b), vals in blocks_1d(x, -1, 16):
        assert same(got[i, b * 16 : b * 16 + len(vals)], nvfp4_block(vals, s_enc).dequant), (i, b)
    got = fake_quantize(x, "nvfp4", block=(16, 16))
    for (i, j), vals in blocks_2d(x, 16, 16):
        tile = got[i * 16 : i * 16 + 16, j * 16 : j * 16 + 16].reshape(-1)
        assert same(tile, nvfp4_block(vals, s_enc).dequant), (i, j)
    for pow2 in (False, True):
        got = fake_quantize(x.T, "fp8_block", 0, pow2_scales=pow2)
        for (j, _), vals in blocks_1d(x.T, 0, 128):
            assert same(got[:, j], fp8_block(vals, pow2).dequant), j


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(width=32, allow_nan=True, allow_infinity=True), min_size=1, max_size=70),
       st.sampled_from([c for c in CASES if not isinstance(c[1].get("block"), tuple)]), st.booleans())
def test_property_same_bits(vals, case, stochastic):
    fmt, kw = case
    x = np.array(vals, np.float32)
    x = np.stack([x, -x[::-1]], axis=1)  # blocks along axis 0, two columns
    rounding = "stochastic" if stochastic and fmt != "mxint8" and kw.get("scale_rounding") != "four_over_six" else "nearest"
    check_same(x, fmt, 0, rounding=rounding, seed=0, **kw)


# ---------------------------------------------------------------------------- the recipes


@pytest.mark.parametrize("recipe", [BlockScaling("mxfp8_e4m3"), BlockScaling("mxfp6_e2m3", grad_format="mxfp6_e3m2",
                                                                             scale_rounding="rceil"),
                                    BlockScaling("nvfp4", weight_block=(16, 16), grad_rounding="stochastic"),
                                    BlockScaling("fp8_block", weight_block=(128, 128), pow2_scales=True),
                                    BlockScaling("nvfp4", four_over_six=True)])
def test_block_scaling_q_is_quantize_dequantize(recipe):
    rng = np.random.default_rng(10)
    x = edge_values(rng, (160, 64))
    fmt = fpsim.get_block_format(recipe.format)
    gfmt = fpsim.get_block_format(recipe.grad_format or recipe.format)
    rule = (lambda f: ("four_over_six" if recipe.four_over_six else None) if f.family == "nvfp4"
            else recipe.scale_rounding if f.family == "mx" else None)
    for axis in (0, -1):
        got = recipe.quantize_operand(x, axis)
        want = quantize(x, fmt, axis, block=fmt.block, scale_rounding=rule(fmt),
                        pow2_scales=recipe.pow2_scales).dequantize()
        assert np.array_equal(bits(got), bits(want))
        fpsim.manual_seed(1)
        got = recipe.quantize_operand(x, axis, grad=True)
        fpsim.manual_seed(1)
        want = quantize(x, gfmt, axis, block=gfmt.block, scale_rounding=rule(gfmt), pow2_scales=recipe.pow2_scales,
                        rounding=recipe.grad_rounding).dequantize()
        assert np.array_equal(bits(got), bits(want))
    if isinstance(recipe.weight_block, tuple):
        got = recipe.quantize_operand(x, -1, block=recipe.weight_block)
        want = quantize(x, fmt, -1, block=recipe.weight_block, scale_rounding=rule(fmt),
                        pow2_scales=recipe.pow2_scales).dequantize()
        assert np.array_equal(bits(got), bits(want))
    assert math.isfinite(float(np.abs(got[np.isfinite(got)]).max()))


# ---------------------------------------------------------------------------- the element kernels


@pytest.mark.parametrize("elem", ["float8_e4m3fn", "float8_e5m2", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"])
def test_element_kernels_on_float32_patterns(elem):
    """The two roundings fake_quantize runs, on a spread of all float32 patterns (NaN left out:
    NaN blocks are NaN whatever the kernel gives), against cast's saturating rounding, widened by
    ml_dtypes: to nearest even, and stochastic with the same uniforms."""
    from fpsim.formats import blockfast, cast, get_format

    f = get_format(elem)
    x = (np.arange(0, 2**32, 4099, dtype=np.uint64).astype(np.uint32)).view(np.float32)
    x = x[~np.isnan(x)]
    want = cast(x, f, saturate=True).astype(np.float32)
    got = blockfast._nearest_table(f).take(bf16_odd_patterns(x))
    assert np.array_equal(bits(got), bits(want))
    with np.errstate(invalid="ignore", over="ignore"):
        want = cast(x, f, "stochastic", saturate=True, rng=np.random.default_rng(1)).astype(np.float32)
        got = blockfast._stochastic(x.copy(), f, np.random.default_rng(1).random(x.size))
    assert np.array_equal(bits(got), bits(want))


def test_hadamard_transform_sums():
    """hadamard_transform against its definition: each output the exact sum of h[i, j] * a[j]
    over the group (fractions), rounded once to float32 - whatever the spread of magnitudes,
    including zeros of both signs, float32 subnormals, a cancellation of 2**60, and inf."""
    rng = np.random.default_rng(12)
    for spread, shape in ((4, (37, 3)), (20, (32, 4)), (60, (40, 3)), (140, (21, 2))):
        a = (rng.standard_normal(shape) * 2.0 ** rng.integers(-spread, spread + 1, shape)).astype(np.float32)
        a[rng.random(shape) < 0.2] = 0.0
        a[rng.random(shape) < 0.1] = -0.0
        a[0, 0] = 1e-44 if spread > 20 else a[0, 0]
        a[1, 0], a[2, 0] = (2.0**60, -(2.0**60)) if spread == 60 else (a[1, 0], a[2, 0])
        for h in (hadamard_matrix(spread), hadamard_matrix(spread).T.copy()):
            got = hadamard_transform(a, h)
            n, (t, c) = h.shape[0], a.shape
            padded = np.zeros((t + (-t % n), c), np.float32)
            padded[:t] = a
            want = np.concatenate([exact_matmul_f32(h, g) for g in padded.reshape(-1, n, c)])
            assert np.array_equal(bits(got), bits(want)), spread
    a = np.ones((16, 2), np.float32)
    a[3, 1] = np.inf
    assert np.isinf(hadamard_transform(a, hadamard_matrix(0))[:, 1]).all()
