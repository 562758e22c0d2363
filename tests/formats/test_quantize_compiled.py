"""fpsim.quantize's compiled path (fpsim/numerics/compiled/_quantize.py, driven by
blockcodes.quantize_compiled) against its numpy path, bit for bit - elements, stored scales, tensor
scale, underflow and saturation counts, decode factors - and against independent references: the
exact-rational block reference of test_block_formats (the OCP MX spec's, TE's NVFP4 and DeepSeek's
fp8 block definitions) on its adversarial and random blocks made large enough for the compiled
path, and ml_dtypes' casts for the element codes of every value of every element format.  Every MX
element format, NVFP4 (1x16 and 16x16) and the fp8 blocks; blocks along the last and earlier axes,
partial blocks, N-D inputs; inf / NaN / zero blocks, float32 subnormal amax, amax near the scales'
limits; to nearest and stochastically (the same draws, the generator left in the same state).
Skipped where numba is not installed or the compiled path is off."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from helpers import block_values

pytest.importorskip("numba")

from support.block_reference import ELEM, MX_ELEM, fp8_block, mx_block, nvfp4_block, nvfp4_tensor_scale  # noqa: E402
from test_block_formats import NONFINITE, adversarial_rows, check_1d, grid, random_rows  # noqa: E402

from fpsim.formats import SCALE_ROUNDINGS, quantize  # noqa: E402
from fpsim.numerics import compiled  # noqa: E402
from fpsim.numerics.compiled import use_compiled  # noqa: E402

pytestmark = pytest.mark.skipif(not compiled.enabled(), reason="the compiled path is off (FPSIM_NUMBA=0)")

MX = list(MX_ELEM)
FORMATS = [*MX, "nvfp4", "fp8_block"]
# (shape, axis, block): sizes not a multiple of the block, blocks along earlier axes, N-D, 2-D tiles
SHAPES = [((64, 100), -1, None), ((3, 50, 40), 1, None), ((37, 33, 5), 0, None), ((5000,), 0, None),
          ((2, 3, 700), -1, None), ((40, 60), -1, 8), ((30, 70), 0, 20), ((130, 70), -1, (16, 16)),
          ((2, 48, 40), -1, (16, 16)), ((40, 300), -1, (128, 128))]


def _pattern(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view({1: np.uint8, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def _arrays(q) -> dict:
    return {"elements": q.elements, "scales": q.scales, "underflow": q.stats.underflow,
            "saturated": q.stats.saturated, "scale": q.stats.scale}


def _spy(monkeypatch) -> dict:
    """Count the calls of the compiled quantize kernels."""
    calls = {}
    table = compiled.kernels().roundings
    for name in ("quantize_amax", "quantize_elements"):
        fn = table[name]
        monkeypatch.setitem(table, name, lambda *a, _fn=fn, _n=name: calls.update({_n: calls.get(_n, 0) + 1}) or _fn(*a))
    return calls


def both(x, fmt, seed=None, **kw):
    """quantize on the compiled path and on the numpy path (``seed``: stochastic elements, each from
    its own generator): every array the same bits, dtype and shape, the same tensor scale, and the
    generators left in the same state.  Returns the compiled result."""
    out, rngs = [], []
    for on in (True, False):
        extra = {} if seed is None else {"rounding": "stochastic", "rng": np.random.default_rng(seed)}
        with use_compiled(on):
            out.append(quantize(x, fmt, **kw, **extra))
        rngs.append(extra.get("rng"))
    fast, ref = out
    for name, a in _arrays(fast).items():
        b = _arrays(ref)[name]
        assert a.dtype == b.dtype and a.shape == b.shape, (fmt, kw, name, a.dtype, b.dtype, a.shape, b.shape)
        assert np.array_equal(_pattern(a), _pattern(b)), (fmt, kw, x.shape, name)
    assert (fast.tensor_scale is None) == (ref.tensor_scale is None)
    if fast.tensor_scale is not None:
        assert _pattern(np.float32(fast.tensor_scale)) == _pattern(np.float32(ref.tensor_scale))
    if seed is not None:
        assert rngs[0].random() == rngs[1].random()  # the same number of draws
    return fast


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_compiled_path_gives_the_numpy_paths_bits(fmt, monkeypatch):
    calls = _spy(monkeypatch)
    rng = np.random.default_rng(FORMATS.index(fmt))
    modes = SCALE_ROUNDINGS if fmt in MX else [None]
    for shape, axis, block in SHAPES:
        if isinstance(block, tuple) and fmt not in ("nvfp4", "fp8_block"):
            continue
        x = block_values(rng, shape)
        for i, mode in enumerate(modes):
            kw = {"axis": axis, "block": block, **({"scale_rounding": mode} if mode else {})}
            both(x, fmt, **kw)
            if i == 0:
                both(x, fmt, seed=7, **kw)
    assert calls["quantize_elements"] == calls["quantize_amax"] >= 16


@pytest.mark.parametrize("fmt", FORMATS)
def test_specials_inf_nan_zeros_subnormal_amax_and_the_scales_limits(fmt):
    k = 16 if fmt == "nvfp4" else 128 if fmt == "fp8_block" else 32
    rows = [np.full(k, v, np.float32) for v in (0.0, -0.0, 1e-40, -1e-45, 2.0**-126, 3.4e38, -np.inf)]
    rows += [np.resize(np.float32([np.nan, 1.0, -2.0]), k), np.resize(np.float32([np.inf, 0.0]), k),
             np.resize(np.float32([1e-40, -3e-42, 0.0]), k), np.resize(np.float32([3.4e38, -1e-30, 1.0]), k),
             np.resize(np.float32([2.0**127, 2.0**-149, -2.0**-133]), k)]
    x = np.tile(np.stack(rows), (8, 1))  # 96 blocks: the compiled path's size
    for mode in SCALE_ROUNDINGS if fmt in MX else [None]:
        q = both(x, fmt, **({"scale_rounding": mode} if mode else {}))
        bad = ~np.isfinite(q.stats.scale)
        assert bad.reshape(-1)[[6, 7, 8]].all() and (q.stats.underflow[bad] == 0).all()
        assert np.isnan(q.dequantize()[np.repeat(bad, k, axis=-1)]).all()
    both(x.T.copy(), fmt, axis=0)  # the same blocks down the columns
    both(x, fmt, seed=3)


def _element_values(elem: str) -> np.ndarray:
    f32 = np.float32
    g = np.array(grid(elem), np.float64)
    mids = ((g[:-1] + g[1:]) / 2).astype(f32)  # ties to even (exact in float32)
    v = np.concatenate([g.astype(f32), mids, np.nextafter(mids, f32(0)), np.nextafter(mids, f32(np.inf)),
                        (g * 1.0009).astype(f32)])
    return np.concatenate([v, -v])


@pytest.mark.parametrize("fmt", MX)
def test_the_codes_of_every_element_value_are_ml_dtypes_casts(fmt):
    """Each block holds max (so floor's scale is 2**s exactly) and the element grid, its ties and their
    neighbours, at scales 2**-100 .. 2**100: the codes are ml_dtypes' saturating cast of x / 2**s."""
    elem = MX_ELEM[fmt]
    vmax = float(ELEM[elem][2])
    v = _element_values(elem)
    v = np.resize(v, (-(-v.size // 31), 31))
    blocks = np.concatenate([np.full((v.shape[0], 1), vmax, np.float32), v], axis=1)
    shifts = np.repeat([-100, -7, 0, 3, 100], blocks.shape[0])
    x = (np.tile(blocks, (5, 1)) * np.ldexp(1.0, shifts)[:, None]).astype(np.float32)  # exact
    q = both(x, fmt)
    scaled = x.astype(np.float64) / np.ldexp(1.0, shifts)[:, None]
    want = np.clip(scaled, -vmax, vmax).astype(np.float32).astype(getattr(ml_dtypes, elem))
    assert np.array_equal(q.elements.view(np.uint8), want.view(np.uint8))
    assert (q.scales.view(np.uint8)[:, 0].astype(int) - 127 == shifts).all()


def _grown(x: np.ndarray) -> np.ndarray:
    """x's rows repeated until there are at least 1024 values (the compiled path's size)."""
    return np.tile(x, (-(-1024 // x.size), 1))


@pytest.mark.parametrize("fmt", MX)
def test_mx_matches_the_exact_reference_on_the_compiled_path(fmt, monkeypatch):
    calls = _spy(monkeypatch)
    elem = MX_ELEM[fmt]
    cases = [(mode, _grown(adversarial_rows(elem)), -1) for mode in SCALE_ROUNDINGS]
    for mode in ("floor", "rceil"):
        cases += [(mode, np.tile(random_rows(1, 6, 70), (3, 1)), -1), (mode, np.tile(random_rows(2, 5, 40).T, (1, 6)), 0),
                  (mode, _grown(NONFINITE), -1)]
    for mode, x, axis in cases:
        q = quantize(x, fmt, axis=axis, scale_rounding=mode)
        check_1d(q, x, axis, 32, lambda v, m=mode: mx_block(v, elem, m))
    assert calls["quantize_elements"] == len(cases)


def test_nvfp4_and_fp8_blocks_match_the_exact_reference_on_the_compiled_path(monkeypatch):
    from fractions import Fraction

    calls = _spy(monkeypatch)
    g = np.array(grid("float4_e2m1fn"), np.float32)
    ties = np.concatenate([[6.0], (g[:-1] + g[1:]) / 2]).astype(np.float32)
    for x in [np.tile(random_rows(6, 5, 70), (3, 1)),
              np.tile(np.stack([np.resize(ties * s, 32) for s in (1.0, 0.37, 2.0**-20, 1e30)]), (8, 1))]:
        q = quantize(x, "nvfp4")
        s_enc = nvfp4_tensor_scale(max(abs(Fraction(float(v))) for v in x.flat))
        assert float(q.tensor_scale) == float(np.float32(1) / np.float32(float(s_enc)))
        check_1d(q, x, -1, 16, lambda v, s=s_enc: nvfp4_block(v, s))
    for pow2 in (False, True):
        x = np.tile(random_rows(8, 3, 300), (2, 1))
        check_1d(quantize(x, "fp8_block", pow2_scales=pow2), x, -1, 128, lambda v, p=pow2: fp8_block(v, p))
    assert calls["quantize_elements"] == 4


def test_pinned_values():
    # OCP MX v1.0 floor: amax 7 in fp4 -> X = 2**0, 7 saturates to 6, 0.2 flushes to 0 (one of each per block)
    x = np.tile(np.float32([7.0, 5.0, 0.2, -1.25]), (64, 8))
    q = quantize(x, "mxfp4")
    assert q.dequantize()[0, :4].tolist() == [6.0, 4.0, 0.0, -1.0]
    assert q.scales.view(np.uint8)[0, 0] == 127 and q.elements.view(np.uint8)[0, :4].tolist() == [7, 6, 0, 10]
    assert (q.stats.saturated == 8).all() and (q.stats.underflow == 8).all()
    # all-zero blocks: e8m0 2**-127 (code 0) and zero elements
    z = quantize(np.zeros((40, 32), np.float32), "mxfp8")
    assert not z.scales.view(np.uint8).any() and not z.elements.view(np.uint8).any()
    # NVFP4: amax 6 -> S_enc = 448, the block scale e4m3(6 * 448 / 6) = 448 (0x7E), elements exact
    y = np.tile(np.float32([6.0, -3.0, 0.5, 0.0]), (64, 4))
    n = quantize(y, "nvfp4")
    assert n.scales.view(np.uint8)[0, 0] == 0x7E and n.elements.view(np.uint8)[0, :4].tolist() == [7, 13, 1, 0]
    assert float(n.tensor_scale) == float(np.float32(1) / np.float32(448))


@pytest.mark.parametrize("n", [1024, 1025, 1087, 4096 + 63, 100_003])
def test_the_compiled_uniforms_are_numpys_draws_and_leave_the_generator_where_numpy_does(n):
    from fpsim.formats.blockcodes import uniforms

    for seed in (0, 12345, 2**63 + 11):
        want, got = np.random.default_rng(seed), np.random.default_rng(seed)
        want.integers(0, 7, 3), got.integers(0, 7, 3)  # a generator part-way through its stream
        assert np.array_equal(uniforms(got, n), want.random(n))
        assert got.bit_generator.state == want.bit_generator.state
        assert got.random() == want.random() and got.integers(2**62) == want.integers(2**62)
    other, same_other = (np.random.Generator(np.random.Philox(3)) for _ in range(2))  # not PCG64: rng.random itself
    assert np.array_equal(uniforms(other, n), same_other.random(n))


@pytest.mark.parametrize("n", [1, 63, 64, 1087, 100_003])
def test_the_compiled_raw_words_are_random_raws_and_leave_the_generator_where_numpy_does(n):
    """``compiled._draws.pcg64_raw``: the words of ``random_raw(n)``, the generator's state after them
    (a buffered 32-bit half kept) the same - what ``sr.draw_bits`` reads for few-bit SR."""
    from fpsim.numerics import compiled

    raw = compiled.kernels().roundings["pcg64_raw"]
    for seed in (0, 12345, 2**63 + 11):
        want, got = np.random.default_rng(seed), np.random.default_rng(seed)
        want.random(dtype=np.float32), got.random(dtype=np.float32)  # half a word buffered
        words = raw(got, n)
        assert words.dtype == np.uint64 and np.array_equal(words, want.bit_generator.random_raw(n))
        assert got.bit_generator.state == want.bit_generator.state
        assert got.random(dtype=np.float32) == want.random(dtype=np.float32) and got.random() == want.random()
