"""MXINT8 (OCP MX v1.0, section 5.3.3 and 6.3): blocks of 32 two's complement int8 elements i / 64
sharing an e8m0 scale 2**(floor(log2 amax) - 0), against gfloat's quantize_block on format_info_mxint8
(the elements, the scale, the dequantized values), and the details that set int8 apart: -2 is a
value and +2 is not, elements round to nearest even and saturate."""

import numpy as np
import pytest
from support.gfloat_reference import gfloat, gformats

import fpsim
from fpsim.formats import get_block_format, quantize


def _gfloat_blocks(x: np.ndarray, mode=None) -> np.ndarray:
    fi = gformats.format_info_mxint8
    kw = {} if mode is None else {"round": mode}
    return np.concatenate([gfloat.quantize_block(fi, b.astype(np.float64), gfloat.compute_scale_amax, **kw)
                           for b in x.reshape(-1, 32)])


def _data(rng, n_blocks=64):
    x = rng.standard_normal((n_blocks, 32)) * np.exp2(rng.integers(-20, 20, (n_blocks, 1)))
    x[0] = np.linspace(-2, 2, 32)  # a block whose largest magnitude is a power of two
    x[1, :] = 1.0
    x[1, 5] = -2.0  # -2 * 2**0: the element -2 exactly
    x[2] = 0.0
    x[3, 0] = 1.9921875  # rounds to 2.0 on the grid: saturates to 127/64
    return x.astype(np.float32)


def test_the_format():
    bf = get_block_format("mxint8")
    assert (bf.family, bf.block, bf.element.name, bf.scale.name) == ("mx", 32, "ocp_int8", "float8_e8m0fnu")
    assert (bf.element.max, bf.element.max_negative, bf.element.emax, bf.element.bits) == (127 / 64, 2.0, 0, 8)


@pytest.mark.parametrize("mode", ["nearest", "toward_zero", "nearest_away", "toward_positive", "toward_negative"])
def test_matches_gfloat_quantize_block(mode):
    x = _data(np.random.default_rng(0))
    gmode = {"nearest": gfloat.RoundMode.TiesToEven, "toward_zero": gfloat.RoundMode.TowardZero,
             "nearest_away": gfloat.RoundMode.TiesToAway, "toward_positive": gfloat.RoundMode.TowardPositive,
             "toward_negative": gfloat.RoundMode.TowardNegative}[mode]
    q = quantize(x, "mxint8", rounding=mode)
    got = q.dequantize().reshape(-1).astype(np.float64)
    assert np.array_equal(got, _gfloat_blocks(x, gmode))
    codes = q.scales.view(np.uint8).astype(np.int64).reshape(-1) - 127  # the shared exponents
    amax = np.abs(x).max(axis=1).astype(np.float64)
    want = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1))), -127)
    assert np.array_equal(codes, want)


def test_int8_details():
    x = np.zeros(32, np.float32)
    x[:4] = [1.0, -2.0, 1.9921875, 1 + 3 / 128]  # 3/128 is half a step of 1/64 above 1 + 1/64: even -> 1 + 2/64
    q = quantize(x, "mxint8")
    assert q.elements[:4].tolist() == [0.5, -1.0, 1.0, 0.5 + 1 / 64]  # scale 2**1 (amax 2)
    y = np.zeros(32, np.float32)
    y[:3] = [1.0, -1.0 - 127 / 128, 1.9921875]  # amax < 2: scale 2**0; 1.9921875 -> 2.0 -> saturates
    q = quantize(y, "mxint8")
    assert q.elements[:3].tolist() == [1.0, -2.0, 127 / 64]
    assert q.stats.saturated.tolist() == [1] and q.nbytes == 33 and q.bits_per_element == 8.25
    assert fpsim.encode(q.elements[:3], "ocp_int8").tolist() == [64, 128, 127]
    with pytest.raises(ValueError, match="unknown block format"):
        quantize(y, "mxint4")


def test_a_block_with_nan_dequantizes_to_nan():
    x = np.ones((2, 32), np.float32)
    x[1, 3] = np.nan
    q = quantize(x, "mxint8")
    d = q.dequantize()
    assert np.all(d[0] == 1) and np.isnan(d[1]).all() and q.elements[1].tolist() == [0.0] * 32


@pytest.mark.parametrize("mode", ["toward_zero", "nearest_away", "toward_positive", "toward_negative"])
@pytest.mark.parametrize("fmt", ["mxfp8_e4m3", "mxfp6_e2m3", "mxfp4_e2m1"])
def test_every_mx_format_rounds_its_elements_in_every_mode_as_gfloat(fmt, mode):
    gmode = {"toward_zero": gfloat.RoundMode.TowardZero, "nearest_away": gfloat.RoundMode.TiesToAway,
             "toward_positive": gfloat.RoundMode.TowardPositive, "toward_negative": gfloat.RoundMode.TowardNegative}
    fi = getattr(gformats, f"format_info_{fmt}")
    x = _data(np.random.default_rng(1))[3:]  # (gfloat's e8m0 scale of an all-zero block differs by convention)
    got = quantize(x, fmt, rounding=mode).dequantize().reshape(-1).astype(np.float64)
    want = np.concatenate([gfloat.quantize_block(fi, b.astype(np.float64), gfloat.compute_scale_amax, gmode[mode])
                           for b in x.reshape(-1, 32)])
    assert np.array_equal(got, want)
