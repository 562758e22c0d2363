"""fpsim.encode / fpsim.decode against gfloat's encoder and decoder, exhaustively over every code
point of every format of up to 16 bits (P3109 k = 2..12 every one, a few of 13..16 bits, ocp_int8,
fp8, fp6, fp4, float16, bfloat16), a sample of float32's and float64's, and round trips."""

import numpy as np
import pytest
from support.gfloat_reference import gfloat, info

import fpsim
from fpsim.formats import P3109_FORMATS
from fpsim.formats.codes import code_dtype

ML = ["float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"]
WIDE = [f"p3109_k{k}p{p}{s}{e}" for k in (2, 9, 10, 11, 12) for p in range(1, k + 1) for s in "su" for e in "ef"
        if k - p <= (11 if s == "s" else 10)]
WIDE += ["p3109_k13p5se", "p3109_k14p7uf", "p3109_k16p5sf", "p3109_k16p6ue", "p3109_k16p16se"]  # float64 / float32
NAMES = ML + ["ocp_int8", *P3109_FORMATS, *WIDE]


@pytest.mark.parametrize("name", NAMES)
def test_every_code_point_decodes_as_gfloat_and_encodes_back(name):
    fi = info(name)
    codes = np.arange(2**fi.k, dtype=np.int64)
    got = fpsim.decode(codes, name)
    want = gfloat.decode_ndarray(fi, codes)
    assert got.dtype == (np.float32 if fpsim.get_format(name).is_ml_dtype else fpsim.get_format(name).dtype)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    nan = np.isnan(want)
    assert same.all() and np.array_equal(np.signbit(got[~nan]), np.signbit(want[~nan])), codes[~same][:5]
    back = fpsim.encode(got, name)
    assert back.dtype == code_dtype(name)
    assert np.array_equal(back[~nan], codes[~nan])
    if nan.any() and not fpsim.get_format(name).is_ml_dtype:
        assert np.all(back[nan] == fi.code_of_nan)  # P3109's one NaN code
    if not nan.any() or not fpsim.get_format(name).is_ml_dtype:
        assert np.array_equal(gfloat.encode_ndarray(fi, want.astype(np.float64)), back.astype(np.uint64))


@pytest.mark.parametrize("name", ["float32", "float64"])
def test_wide_ieee_codes_are_their_bits_as_gfloat_decodes_them(name):
    """float32's and float64's code points are their own bits: a sample of 2**16 + 8 spread over all
    of them (every sign, binade, subnormal, inf and NaN region), against gfloat's decoder."""
    fi = info(name)
    dt = np.uint32 if name == "float32" else np.uint64
    codes = np.r_[np.linspace(0, 2.0**fi.k * (1 - 2.0**-16), 2**16).astype(dt), np.array([0, 1, 2**(fi.k - 1), 2**fi.k - 1], dt),
                  np.array([1, 2, 3, 4], dt) << dt(fi.precision - 1)]
    got = fpsim.decode(codes, name)
    want = gfloat.decode_ndarray(fi, codes)
    assert got.dtype == np.dtype(name) and np.array_equal(got, want, equal_nan=True)
    assert np.array_equal(fpsim.encode(got, name), codes)  # NaN payloads kept: the bits come back whole
    assert fpsim.encode([1.5], "float64").tolist() == [0x3FF8000000000000]


def test_encode_rounds_first_and_float32_codes_are_its_bits():
    assert fpsim.encode(1 + 2.0**-11, "fp16").item() == 0x3C00  # the tie goes to even
    assert fpsim.encode(1 + 2.0**-11, "fp16", "toward_positive").item() == 0x3C01
    assert fpsim.encode(np.float32(1.5), "float32").item() == 0x3FC00000
    assert fpsim.decode(np.array([0x3FC00000], np.uint32), "float32").tolist() == [1.5]
    # P3109 k8p4se: bias 8, 1.0 = 0 1000 000; max 224 = 0x7E; inf 0x7F; NaN 0x80; no -0
    assert fpsim.encode([1.0, 224.0, np.inf, -np.inf, np.nan, -0.0, 1e9], "p3109_k8p4se").tolist() == [
        0x40, 0x7E, 0x7F, 0xFF, 0x80, 0x00, 0x7F]
    assert fpsim.encode([-2.0, 127 / 64, -1 / 64, 5.0], "ocp_int8").tolist() == [0x80, 0x7F, 0xFF, 0x7F]


def test_bad_codes_name_themselves():
    with pytest.raises(ValueError, match=r"codes must lie in \[0, 2\*\*4\) for float4_e2m1fn"):
        fpsim.decode([3, 16], "fp4")
    with pytest.raises(TypeError, match="codes must be an array of integers"):
        fpsim.decode([1.0], "fp16")
