"""Every rounding mode, every format, saturating or not, from float32 and float64 input, against
gfloat (tests/support/gfloat_reference.py): the values themselves, the midpoints between neighbours (ties),
points just either side, binade edges, subnormals, max and beyond, zeros, infinities and NaN.
Few-bit stochastic rounding with given random bits equals gfloat's bit for bit, in all four
variants.  The float32 kernels are also held against the float64 path on the same values."""

import math
from fractions import Fraction

import numpy as np
import pytest
from support.gfloat_reference import GMODE, GSR, as_float32_exact, assert_same, info, probes, round_ref, to_odd_ref
from support.sr_reference import rounds_up

import fpsim
from fpsim.formats import ROUNDING_MODES, cast, round_to
from fpsim.formats.modekernels import supports

FORMATS = ["float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn",
           "ocp_int8", "float32", "float64"]
NO_NAN = {"float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn", "ocp_int8"}


def _inputs(name, src):
    fi = info(name)
    v = probes(fi, np.random.default_rng(hash(name) % 2**32))
    if name in NO_NAN:
        v = v[~np.isnan(v)]
    else:
        v = np.r_[v, np.nan]
    if src == "float32":
        with np.errstate(over="ignore"):
            v = as_float32_exact(v) if name != "float32" else v.astype(np.float32)
    return fi, v


def test_the_modes_are_named():
    assert ROUNDING_MODES == ("nearest", "nearest_away", "toward_zero", "toward_positive", "toward_negative", "to_odd",
                              "stochastic")
    assert fpsim.ROUNDING_MODES is ROUNDING_MODES


@pytest.mark.parametrize("src", ["float32", "float64"])
@pytest.mark.parametrize("sat", [False, True])
@pytest.mark.parametrize("mode", list(GMODE))
@pytest.mark.parametrize("name", FORMATS)
def test_modes_match_gfloat(name, mode, sat, src):
    fi, v = _inputs(name, src)
    got = round_to(v, name, mode, saturate=sat)
    assert got.dtype == (np.float64 if name == "float64" else v.dtype)  # float64's values need float64
    assert_same(got, round_ref(fi, v.astype(np.float64), GMODE[mode], sat), v)


@pytest.mark.parametrize("src", ["float32", "float64"])
@pytest.mark.parametrize("name", FORMATS)
def test_to_odd_matches_gfloats_neighbours(name, src):
    """gfloat 0.5 has no ToOdd: the reference is its directed roundings and its encoder's last bit."""
    fi, v = _inputs(name, src)
    v = v[np.abs(v.astype(np.float64)) <= fi.max]  # in range (beyond: the overflow test below)
    assert_same(round_to(v, name, "to_odd"), to_odd_ref(fi, v.astype(np.float64)), v)


def test_to_odd_overflow_as_gfloat_defines_it():
    """gfloat's own ToOdd cases (its test_round.py, RoundMode.ToOdd, added after 0.5)."""
    r = lambda v, fmt, sat=False: float(round_to(v, fmt, "to_odd", saturate=sat))
    fmt = "p3109_k8p4se"
    assert r(224.1, fmt) == np.inf and r(224.1, fmt, True) == 224.0 and r(-232.0, fmt) == -np.inf
    for v, want in ((1.0, 1.0), (1.01, 1.5), (1.5, 1.5), (1.99, 1.5), (2.0, 2.0), (2.01, np.inf)):
        assert r(v, "p3109_k4p2se") == want
    for v, want in ((4.0, 4.0), (4.01, 6.0), (6.0, 6.0), (6.01, 6.0), (7.99, 6.0), (8.0, np.inf)):
        assert r(v, "p3109_k4p2ue") == want
    for v, want in ((3.99, 3.0), (4.01, 6.0), (6.01, 6.0), (7.99, 6.0), (8.0, 8.0), (8.01, 8.0)):
        assert r(v, "p3109_k4p2uf", True) == want
    p4min = 2.0**-10
    for v, want in ((p4min / 4, p4min), (-p4min / 2, -p4min), (63.0, 60.0), (61.0, 60.0), (-58.0, -60.0)):
        assert r(v, fmt) == want


@pytest.mark.parametrize("variant", list(GSR))
@pytest.mark.parametrize("k", [1, 2, 3, 5, 8, 13])
@pytest.mark.parametrize("name", ["float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "float4_e2m1fn", "ocp_int8",
                                  "p3109_k8p3se", "p3109_k6p2uf"])
def test_few_bit_stochastic_equals_gfloat_bit_for_bit(name, k, variant):
    """On float32-exact values, in float32 and float64 arrays: gfloat 0.5 decides in float64
    arithmetic (delta + R * 2**-k >= 1), exact only while delta has few bits (the exact integer
    rule for 53-bit deltas is checked against fractions below)."""
    fi = info(name)
    rng = np.random.default_rng(k)
    v = probes(fi, rng)
    v = as_float32_exact(v[np.isfinite(v)])
    if not fi.is_signed:
        v = np.abs(v)
    for src in (np.float64, np.float32):
        x = v.astype(src)
        bits = rng.integers(0, 2**k, x.shape)
        for sat in (False, True):
            got = round_to(x, name, "stochastic", saturate=sat, sr_bits=k, sr_random=bits, sr_variant=variant)
            want = round_ref(fi, x.astype(np.float64), GSR[variant], sat, bits.astype(np.int64), k)
            assert_same(got, want, x)


def _fewbit_fraction(v: float, ulp: float, k: int, r: int, variant: str) -> float:
    """The P3109 few-bit SR rule in exact rational arithmetic, for a positive v in a binade of spacing ulp."""
    lo = Fraction(v) // Fraction(ulp)
    up = rounds_up(Fraction(v) / Fraction(ulp) - lo, k, r, variant)
    return float((lo + up) * Fraction(ulp))


@pytest.mark.parametrize("variant", list(GSR))
def test_few_bit_stochastic_from_float64_is_exact(variant):
    """53-bit deltas (float64 input into fp16, ulp 2**-10 in [1, 2)): just below a step of 2**-k, on it,
    just above, against fractions."""
    k, ulp = 3, 2.0**-10
    base = np.array([1 + j * ulp / 8 for j in range(8)] + [1 + ulp / 16 * j for j in range(1, 16, 2)])
    v = np.r_[base, np.nextafter(base, 0), np.nextafter(base, 2)]
    for r in range(2**k):
        got = round_to(v, "fp16", "stochastic", sr_bits=k, sr_random=np.full(v.shape, r), sr_variant=variant)
        want = [_fewbit_fraction(float(x), 2.0 ** (math.frexp(x)[1] - 11), k, r, variant) for x in v]
        assert got.tolist() == want, (r, v[got != want])


def test_few_bit_stochastic_draws_reproducibly():
    x = np.linspace(1, 2, 10001, dtype=np.float32)
    a = cast(x, "e4m3", "stochastic", sr_bits=4, seed=5)
    b = cast(x, "e4m3", "stochastic", sr_bits=4, seed=5)
    c = cast(x, "e4m3", "stochastic", sr_bits=4, seed=6)
    assert np.array_equal(a.view(np.uint8), b.view(np.uint8)) and not np.array_equal(a.view(np.uint8), c.view(np.uint8))
    # the bits drawn are the generator's raw words, cut into one byte per value and masked to 4 bits
    raw = np.random.default_rng(5).bit_generator.random_raw(-(-x.size // 8)).view(np.uint8)[: x.size] & 15
    assert np.array_equal(a.view(np.uint8), cast(x, "e4m3", "stochastic", sr_bits=4, sr_random=raw).view(np.uint8))


def test_stochastic_probability_with_k_bits():
    """1 + 3/8 ulp (e4m3, ulp 1/8 at 1): with 2 random bits "fastest" sees delta cut to 1/4 and goes up
    for one of four draws; "rne" rounds 3/2 (of 2**-2 steps) to 2, up for two of four."""
    x = np.full(4, 1 + 3 / 64)
    bits = np.arange(4)
    up = lambda variant: round_to(x, "e4m3", "stochastic", sr_bits=2, sr_random=bits, sr_variant=variant) > 1
    assert up("fastest").sum() == 1 and up("rne").sum() == 2 and up("rto").sum() == 1 and up("fast").sum() == 2


@pytest.mark.parametrize("mode", [m for m in ROUNDING_MODES if m != "stochastic"] + ["sr4", "sr16", "sr21"])
@pytest.mark.parametrize("name", ["float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "float4_e2m1fn", "ocp_int8",
                                  "p3109_k8p4se", "p3109_k7p3uf", "p3109_k3p2se"])
def test_float32_kernel_equals_the_float64_path(name, mode):
    """The same float32 values through the fast kernel and through the float64 algorithm."""
    fi = info(name)
    x = as_float32_exact(probes(fi, np.random.default_rng(1), 20000))
    if not fi.is_signed:
        x = np.abs(x)
    kw = {}
    variants = ["rne"]
    if mode.startswith("sr"):
        k = int(mode[2:])
        mode, variants = "stochastic", list(GSR)
        kw = {"sr_bits": k, "sr_random": np.random.default_rng(2).integers(0, 2**k, x.shape)}
        assert supports(fpsim.get_format(name), mode, (k, None, "rne"))
    else:
        assert supports(fpsim.get_format(name), mode, None)
    for sat in (False, True):
        for variant in variants:
            if mode == "stochastic":
                kw["sr_variant"] = variant
            fast = round_to(x, name, mode, saturate=sat, **kw)
            slow = round_to(x.astype(np.float64), name, mode, saturate=sat, **kw)
            assert_same(fast, slow, x)


@pytest.mark.parametrize("kw, msg", [
    ({"rounding": "up"}, "unknown rounding mode 'up'"),
    ({"rounding": "nearest", "sr_bits": 4}, "sr_bits applies to rounding='stochastic' only"),
    ({"sr_bits": 0}, r"sr_bits must be an integer in \[1, 32\] or None, got"),
    ({"sr_bits": 2.0}, "sr_bits must be an integer"),
    ({"sr_random": [1, 2]}, "sr_random needs sr_bits"),
    ({"sr_variant": "fast"}, "sr_variant='fast' needs sr_bits"),
    ({"sr_bits": 4, "sr_variant": "slow"}, "unknown sr_variant 'slow'"),
    ({"sr_bits": 2, "sr_random": [0, 4, 1]}, r"sr_random must hold integers in \[0, 2\*\*sr_bits\)"),
    ({"sr_bits": 2, "sr_random": [0, 1]}, "does not broadcast"),
])
def test_bad_arguments_name_themselves(kw, msg):
    kw = {"rounding": "stochastic", **kw}
    with pytest.raises(ValueError, match=msg):
        cast([1.0, 2.0, 3.0], "fp16", kw.pop("rounding"), **kw)
    with pytest.raises(TypeError, match="sr_random must be an array of integers"):
        cast([1.0, 2.0], "fp16", "stochastic", sr_bits=2, sr_random=[0.5, 1.0])


def test_nan_into_a_format_without_nan_is_refused_in_every_mode():
    for mode in ROUNDING_MODES:
        with pytest.raises(ValueError, match="ocp_int8 has no NaN"):
            cast([1.0, np.nan], "ocp_int8", mode)


def test_toward_modes_on_both_sides_of_a_value():
    """Exact literals (float16, ulp 2**-10 at 1): 1 + 2**-12 lies a quarter ulp above 1."""
    x = np.array([1 + 2.0**-12, -(1 + 2.0**-12)])
    up, lo = 1 + 2.0**-10, 1.0
    assert round_to(x, "fp16", "toward_positive").tolist() == [up, -lo]
    assert round_to(x, "fp16", "toward_negative").tolist() == [lo, -up]
    assert round_to(x, "fp16", "toward_zero").tolist() == [lo, -lo]
    assert round_to(x, "fp16", "nearest_away").tolist() == [lo, -lo]
    assert round_to(np.array([1 + 2.0**-11]), "fp16", "nearest_away").tolist() == [up]  # the tie goes away
    assert round_to(np.array([1 + 2.0**-11]), "fp16", "nearest").tolist() == [lo]  # ... or to even
    assert round_to(x, "fp16", "to_odd").tolist() == [up, -up]  # 1 is even (0x3C00), 1 + 2**-10 odd
    # overflow: toward_positive sends a negative overflow to -max and a positive one to inf
    assert round_to(np.array([1e6, -1e6]), "fp16", "toward_positive").tolist() == [np.inf, -65504.0]
    assert round_to(np.array([1e6, -1e6]), "fp16", "toward_negative").tolist() == [65504.0, -np.inf]


@pytest.mark.parametrize("name", ["float16", "bfloat16", "float8_e4m3fn", "p3109_k8p4se"])
def test_the_chunked_kernel_keeps_each_value_with_its_random_bits(name):
    """200,000 values (the float32 kernel works 2**16 at a time): the same as the float64 path,
    shape kept, every random integer used by its own value."""
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((400, 500)) * np.exp2(rng.integers(-8, 6, (400, 500)))).astype(np.float32)
    bits = rng.integers(0, 2**6, x.shape, dtype=np.uint8)
    for mode, kw in (("toward_positive", {}), ("stochastic", {"sr_bits": 6, "sr_random": bits, "sr_variant": "rto"})):
        fast = round_to(x, name, mode, **kw)
        assert fast.shape == x.shape
        assert_same(fast.reshape(-1), round_to(x.astype(np.float64), name, mode, **kw).reshape(-1))


@pytest.mark.parametrize("variant", list(GSR))
@pytest.mark.parametrize("name", ["float16", "float8_e4m3fn", "float8_e5m2", "p3109_k8p4se"])
def test_few_bit_sr_at_the_edge_of_the_normal_range(name, variant):
    """Just below and above the smallest normal (the float32 kernel's two methods meet there), every
    random integer, against gfloat."""
    f, fi = fpsim.get_format(name), info(name)
    k = 5
    near = f.tiny * np.array([1 - 2.0**-j for j in range(1, 14)] + [1 + 2.0**-j for j in range(1, 14)] + [1.0])
    x = as_float32_exact(np.r_[near, -near])
    for r in range(2**k):
        bits = np.full(x.shape, r)
        got = round_to(x, name, "stochastic", sr_bits=k, sr_random=bits, sr_variant=variant)
        assert_same(got, round_ref(fi, x.astype(np.float64), GSR[variant], False, bits, k), x)


# -- mode names in any case, as format names are ------------------------------------------------

@pytest.mark.parametrize("mode", list(GMODE))
def test_rounding_mode_names_in_any_case_round_as_gfloat(mode):
    """``cast(..., "TOWARD_ZERO")`` was "unknown rounding mode"; format names were case-free already."""
    fi, v = _inputs("bfloat16", "float64")
    for spelled in (mode.upper(), f" {mode.title()} "):
        assert_same(round_to(v, "BFloat16", spelled), round_ref(fi, v, GMODE[mode], False), v)


@pytest.mark.parametrize("variant", list(GSR))
def test_sr_variant_names_in_any_case_round_as_gfloat(variant):
    fi = info("float8_e4m3fn")
    v = as_float32_exact(probes(fi, np.random.default_rng(5)))
    v = v[np.isfinite(v)]
    bits = np.random.default_rng(6).integers(0, 16, v.shape)
    got = round_to(v, "E4M3", "Stochastic", sr_bits=4, sr_random=bits, sr_variant=variant.upper())
    assert_same(got, round_ref(fi, v, GSR[variant], False, bits.astype(np.int64), 4), v)


def test_the_engine_mode_in_capitals():
    """bfloat16 1 + 2**-20 rounds to 1 to nearest, to 1 + 2**-7 = 1.0078125 toward +inf."""
    one = fpsim.tensor([1.0], "bfloat16")
    tiny = fpsim.tensor([2.0**-20], "bfloat16")
    with fpsim.rounding_mode("TOWARD_POSITIVE"):
        assert (one + tiny).numpy().tolist() == [1.0078125]
    with fpsim.rounding_mode("Nearest"):
        assert (one + tiny).numpy().tolist() == [1.0]


def test_scale_rounding_names_in_any_case():
    """MX: amax 500 in e4m3 blocks (max 448): floor gives the scale 2**(8 - 8) = 1, ceil 2**1 (OCP MX v1.0)."""
    x = np.full(32, 500.0, np.float32)
    assert fpsim.quantize(x, "mxfp8_e4m3", scale_rounding="FLOOR").stats.scale.tolist() == [1.0]
    assert fpsim.quantize(x, "mxfp8_e4m3", scale_rounding=" Ceil").stats.scale.tolist() == [2.0]
    assert fpsim.quantize(x[:16], "nvfp4", scale_rounding="Four_Over_Six").scale_rounding == "four_over_six"


@pytest.mark.parametrize("call, msg", [
    (lambda: cast([1.0], "fp16", "NEAREST_EVEN"), "unknown rounding mode 'NEAREST_EVEN'; known: nearest, nearest_away, "
                                                   "toward_zero, toward_positive, toward_negative, to_odd, stochastic"),
    (lambda: cast([1.0], "fp16", None), "unknown rounding mode None; known: nearest, "),
    (lambda: fpsim.rounding_mode("UP"), "unknown rounding mode 'UP'; known: nearest, "),
    (lambda: cast([1.0], "fp16", "stochastic", sr_bits=2, sr_variant="SLOW"),
     "unknown sr_variant 'SLOW'; known: rne, rto, fast, fastest"),
    (lambda: fpsim.quantize(np.ones(32, np.float32), "mxfp8", scale_rounding="Round"),
     "unknown scale_rounding 'Round'; known: floor, ceil, even, rceil, bump"),
    (lambda: fpsim.quantize(np.ones(16, np.float32), "nvfp4", scale_rounding="SEVEN"),
     r"unknown scale_rounding 'SEVEN' for nvfp4; known: six, four_over_six \(alias 4/6\)"),
])
def test_unknown_mode_names_list_the_known_ones(call, msg):
    with pytest.raises(ValueError, match="^" + msg.replace("(", r"\(").replace(")", r"\)") if "\\(" not in msg else msg):
        call()
