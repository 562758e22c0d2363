"""The IEEE P3109 formats (k = 2..16 bits, every precision, signed / unsigned, extended / finite):
limits pinned to literals, and every rounding mode with and without saturation against gfloat on
every code point's value (k <= 12; a sample of them for 13..16 bits), the midpoints between
neighbours, points either side of them, beyond max, zeros, infinities and NaN, from float32 and
float64 input.  The widths float32 cannot hold are held in float64; those float64 cannot hold
either are refused."""

import numpy as np
import pytest
from support.gfloat_reference import (
    GMODE,
    GSR,
    as_float32_exact,
    assert_same,
    gfloat,
    info,
    probes,
    round_ref,
    to_odd_ref,
)

import fpsim
from fpsim.formats import P3109_FORMATS, get_format, p3109_format, round_to, tensor_format

# every (k, p, signedness, domain) of k = 2..16 with the range rule written out: float64 holds the values
# of a signed format with k - p <= 11 exponent bits (bias 2**(k-p-1)), an unsigned one with k - p <= 10
ALL_NAMES = [f"p3109_k{k}p{p}{s}{e}" for k in range(2, 17) for p in range(1, k + 1) for s in "su" for e in "ef"
             if k - p <= (11 if s == "s" else 10)]
REFUSED = [f"p3109_k{k}p{p}{s}{e}" for k in range(2, 17) for p in range(1, k + 1) for s in "su" for e in "ef"
           if k - p > (11 if s == "s" else 10)]
# gfloat's max of a format with no finite value above 0 (k2p1se, k2p2se) or one (k2p2ue) is no value of it
# (0.5, a math domain error, 0.75), and its roundings go there: test_two_bit_formats... holds them to literals
GFLOAT_MAX_WRONG = ("p3109_k2p1se", "p3109_k2p2se", "p3109_k2p2ue")


def test_the_table_holds_every_width_and_precision():
    assert len(P3109_FORMATS) == sum(k * 4 for k in range(3, 9)) == 132  # what `fpsim formats --all` lists
    assert "p3109_k8p4se" in P3109_FORMATS and "p3109_k3p3uf" in P3109_FORMATS
    assert get_format("P3109_K8P4SE") is P3109_FORMATS["p3109_k8p4se"]
    assert len(ALL_NAMES) == 4 * sum(range(2, 17)) - 50 == 490 and len(REFUSED) == 50
    made = {n: get_format(n) for n in ALL_NAMES}
    assert all(made[n] is get_format(n.upper()) for n in ALL_NAMES)  # one record a format
    assert p3109_format(11, 3, signed=False) is made["p3109_k11p3ue"]


@pytest.mark.parametrize("name", [n for n in ALL_NAMES if int(n[7:].split("p")[0]) <= 12])
def test_values_are_held_in_float32_where_it_holds_them_else_in_float64(name):
    """The carrier, against gfloat's decoding of every code point: float32 exactly where every value
    is a float32 value, float64 otherwise (and it is exact)."""
    fi = info(name)
    v = gfloat.decode_ndarray(fi, np.arange(2**fi.k))
    v = v[np.isfinite(v)]
    with np.errstate(over="ignore"):
        in_f32 = bool(np.all(v.astype(np.float32).astype(np.float64) == v))
    assert get_format(name).dtype == (np.float32 if in_f32 else np.float64)
    assert np.array_equal(fpsim.decode(np.arange(2**fi.k), name)[np.isfinite(fpsim.decode(np.arange(2**fi.k), name))],
                          v.astype(get_format(name).dtype))


def test_the_widths_float64_cannot_hold_are_refused_in_one_line():
    for name in REFUSED:
        with pytest.raises(ValueError, match=rf"{name}: its values span 2\*\*-\d+ \.\. 2\*\*\d+, beyond float64"):
            get_format(name)
    with pytest.raises(ValueError, match="P3109 width k must be one of 2..16, got 17"):
        get_format("p3109_k17p3se")
    with pytest.raises(ValueError, match="P3109 width k must be one of 2..16, got 1"):
        p3109_format(1, 1)


def test_a_wide_format_gives_its_values_in_float64_whatever_the_input():
    """p3109_k11p3ue (9 exponent bits, bias 256) holds 2**128 and 2**-257: float32 input comes back as
    float64, as encode / decode see it (0 1 1000 0000 0 00: exponent field 384 - 256 = 128)."""
    f = get_format("p3109_k11p3ue")
    x = np.array([3.3e38, 2.0**-257, 2.0**-258], np.float64)
    out = round_to(np.float32([3.4e38]), f)
    assert out.dtype == np.float64 and out.tolist() == [2.0**128]
    assert round_to(x, f).tolist() == [2.0**128, 2.0**-257, 0.0]  # the tie 2**-258 goes to even, 0
    assert fpsim.encode([2.0**128], f).tolist() == [384 << 2] and fpsim.decode([384 << 2], f).tolist() == [2.0**128]
    assert fpsim.cast([1.0], "p3109_k11p3se").dtype == np.float32


def test_two_bit_formats_round_onto_their_few_values():
    """k = 2: p3109_k2p1se and k2p2se hold 0, +-inf and NaN (max 0: every non-zero rounds up to inf or, saturated,
    to 0); p3109_k2p2ue holds 0 and 0.5 (0.75 = max + half an ulp overflows).  gfloat's max of these
    two is no value of theirs (0.5, 0.75), so these literals are the reference."""
    assert fpsim.decode(np.arange(4), "p3109_k2p1se").tolist()[:2] == [0.0, np.inf]
    assert np.isnan(fpsim.decode([2], "p3109_k2p1se")).all() and fpsim.decode([3], "p3109_k2p1se").tolist() == [-np.inf]
    x = np.array([0.4, 0.5, 0.6, -3.0])
    assert round_to(x, "p3109_k2p1se").tolist() == [0.0, 0.0, np.inf, -np.inf]
    assert round_to(x, "p3109_k2p1se", saturate=True).tolist() == [0.0, 0.0, 0.0, 0.0]
    for mode in ("nearest", "toward_zero", "toward_positive"):  # k2p2se: the same values, 1 = 0.1b * 2**1 is inf
        assert round_to(x, "p3109_k2p2se", mode).tolist() == round_to(x, "p3109_k2p1se", mode).tolist()
    assert fpsim.decode(np.arange(3), "p3109_k2p2ue").tolist() == [0.0, 0.5, np.inf]
    y = np.array([0.2, 0.25, 0.26, 0.74, 0.75, 5.0])
    assert round_to(y, "p3109_k2p2ue").tolist() == [0.0, 0.0, 0.5, 0.5, np.inf, np.inf]
    assert round_to(y, "p3109_k2p2ue", saturate=True).tolist() == [0.0, 0.0, 0.5, 0.5, 0.5, 0.5]
    assert round_to(y, "p3109_k2p2ue", "toward_zero").tolist() == [0.0, 0.0, 0.0, 0.5, 0.5, 0.5]
    assert get_format("p3109_k2p1se").max == 0.0 and get_format("p3109_k2p2ue").max == 0.5


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


@pytest.mark.parametrize("name", [n for n in ALL_NAMES if n not in GFLOAT_MAX_WRONG])
def test_limits_equal_gfloats(name):
    f, fi = get_format(name), info(name)
    assert (f.bits, f.bias, f.precision, f.max, f.emax, f.smallest_subnormal) == (
        fi.k, fi.bias, fi.precision, fi.max, fi.emax, fi.smallest_subnormal)
    assert f.has_inf == (fi.num_posinfs > 0) and f.signed == fi.is_signed


@pytest.mark.parametrize("name", [n for n in ALL_NAMES if n not in GFLOAT_MAX_WRONG])
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
    with pytest.raises(ValueError, match="P3109 width k must be one of 2..16, got 17"):
        p3109_format(17, 4)
    with pytest.raises(ValueError, match="unknown format 'p3109'"):
        get_format("p3109")
    with pytest.raises(ValueError):
        fpsim.tensor([1.0], "p3109_k8p4se")
