"""The IEEE P3109 formats (k = 3..8 bits, every precision, signed / unsigned, extended / finite):
limits pinned to literals, and every rounding mode with and without saturation against gfloat on
every code point's value, the midpoints between neighbours, points either side of them, beyond
max, zeros, infinities and NaN, from float32 and float64 input."""

import numpy as np
import pytest
from support.gfloat_reference import GMODE, GSR, as_float32_exact, assert_same, info, probes, round_ref, to_odd_ref

import fpsim
from fpsim.formats import P3109_FORMATS, get_format, p3109_format, round_to, tensor_format


def test_the_table_holds_every_width_and_precision():
    assert len(P3109_FORMATS) == sum(k * 4 for k in range(3, 9)) == 132
    assert "p3109_k8p4se" in P3109_FORMATS and "p3109_k3p3uf" in P3109_FORMATS
    assert get_format("P3109_K8P4SE") is P3109_FORMATS["p3109_k8p4se"]


def test_limits_pinned_to_literals():
    # (bits, bias, max, smallest subnormal, smallest normal, has inf)
    f = get_format("p3109_k8p4se")  # 1 sign, 4 exponent, 3 mantissa bits, bias 8
    assert (f.bits, f.bias, f.max, f.smallest_subnormal, f.tiny, f.has_inf) == (8, 8, 224.0, 2.0**-10, 2.0**-7, True)
    f = get_format("p3109_k8p4sf")  # finite: 0x7F is a number, 1.875 * 2**7
    assert (f.max, f.has_inf, f.has_nan) == (240.0, False, True)
    f = get_format("p3109_k8p3se")  # 5 exponent bits, bias 16
    assert (f.bias, f.max, f.smallest_subnormal) == (16, 49152.0, 2.0**-17)
    f = get_format("p3109_k8p1se")  # no mantissa: powers of two 2**-63 .. 2**62 (0x7E), bias 64
    assert (f.bias, f.max, f.smallest_subnormal) == (64, 2.0**62, 2.0**-63)
    f = get_format("p3109_k8p4ue")  # unsigned: 5 exponent, 3 mantissa bits, bias 16; 0xFF NaN, 0xFE inf
    assert (f.bias, f.max, f.smallest_subnormal, f.signed) == (16, 2.0**15 * 1.625, 2.0**-18, False)  # 0xFD
    f = get_format("p3109_k3p3se")  # all subnormal: 0, 0.5, 1 (0x2), inf (0x3)
    assert (f.bias, f.max, f.smallest_subnormal) == (0, 1.0, 0.5)
    for name, f in P3109_FORMATS.items():
        assert not f.has_nz and f.has_zero and f.has_nan and f.dtype == np.float32
        assert f.has_inf == name.endswith("e") and f.signed == (name[-2] == "s")


@pytest.mark.parametrize("name", list(P3109_FORMATS))
def test_limits_equal_gfloats(name):
    f, fi = get_format(name), info(name)
    assert (f.bits, f.bias, f.precision, f.max, f.emax, f.smallest_subnormal) == (
        fi.k, fi.bias, fi.precision, fi.max, fi.emax, fi.smallest_subnormal)
    assert f.has_inf == (fi.num_posinfs > 0) and f.signed == fi.is_signed


@pytest.mark.parametrize("name", list(P3109_FORMATS))
def test_every_mode_matches_gfloat(name):
    fi = info(name)
    v = np.r_[probes(fi, np.random.default_rng(len(name)), 500), np.nan]
    if not fi.is_signed:
        v = v[~(v < 0)]  # gfloat does not define negative input to an unsigned format (fpsim: NaN, below)
    for src in ("float64", "float32"):
        x = v if src == "float64" else as_float32_exact(v)
        x64 = x.astype(np.float64)
        for sat in (False, True):
            for mode, gmode in GMODE.items():
                assert_same(round_to(x, name, mode, saturate=sat), round_ref(fi, x64, gmode, sat), x)
            bits = np.random.default_rng(1).integers(0, 2**5, x.shape)
            got = round_to(x, name, "stochastic", saturate=sat, sr_bits=5, sr_random=bits, sr_variant="rne")
            assert_same(got, round_ref(fi, x64, GSR["rne"], sat, bits, 5), x)
        ok = np.abs(x64) <= fi.max
        assert_same(round_to(x[ok], name, "to_odd"), to_odd_ref(fi, x64[ok]), x[ok])


def test_no_negative_zero_and_unsigned_negatives_are_nan():
    assert np.signbit(round_to(np.array([-0.0, -1e-30]), "p3109_k8p4se")).tolist() == [False, False]
    assert np.isnan(round_to(np.array([-1.0, -1e-30]), "p3109_k8p4ue")).all()
    assert round_to(np.array([-0.0]), "p3109_k8p4ue").tolist() == [0.0]


def test_element_formats_only_with_clear_errors():
    with pytest.raises(ValueError, match="p3109_k8p4se is not a tensor format but an element format"):
        tensor_format("p3109_k8p4se")
    with pytest.raises(ValueError, match="P3109 precision p must be 1..k = 1..8, got 9"):
        get_format("p3109_k8p9se")
    with pytest.raises(ValueError, match="P3109 width k must be one of 3..8, got 9"):
        p3109_format(9, 4)
    with pytest.raises(ValueError, match="unknown format 'p3109'"):
        get_format("p3109")
    with pytest.raises(ValueError):
        fpsim.tensor([1.0], "p3109_k8p4se")
