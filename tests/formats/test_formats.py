"""The format layer: constants, exhaustive round trips, and ONE correct rounding.

References are independent of fpsim: exact rational arithmetic (fractions.Fraction) written
here from the format's bit layout, gfloat's round_ndarray, ml_dtypes / numpy where they are
known to be correct (float32 input).
"""

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from helpers import same_values as same  # elementwise
from hypothesis import given, settings
from hypothesis import strategies as st
from support.gfloat_reference import gfloat, info  # gfloat is a [test] extra: the module is skipped without it

import fpsim
from fpsim.formats import ALL_FORMATS, cast, classify, get_format, round_to, ulp

NAMES = list(ALL_FORMATS)
NEW = ["float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn", "float8_e8m0fnu"]  # block element and scale types
# (mantissa bits, emin, max, what the top holds) written out by hand: the reference does not read
# fpsim.  "inf": IEEE inf and NaN; "nan": NaN only; "none": no inf, no NaN (overflow saturates);
# "e8m0": NaN only, unsigned, no zero (emin is the exponent of the smallest value, 2**-127).
LAYOUT = {
    "float32": (23, -126, (2 - 2**-23) * 2.0**127, "inf"),
    "float16": (10, -14, 65504.0, "inf"),
    "bfloat16": (7, -126, (2 - 2**-7) * 2.0**127, "inf"),
    "float8_e4m3fn": (3, -6, 448.0, "nan"),
    "float8_e5m2": (2, -14, 57344.0, "inf"),
    "float6_e2m3fn": (3, 0, 7.5, "none"),
    "float6_e3m2fn": (2, -2, 28.0, "none"),
    "float4_e2m1fn": (1, 0, 6.0, "none"),
    "float8_e8m0fnu": (0, -127, 2.0**127, "e8m0"),
}
NO_NAN = {n for n, lay in LAYOUT.items() if lay[3] == "none"}
GMODE = {"nearest": gfloat.RoundMode.TiesToEven, "toward_zero": gfloat.RoundMode.TowardZero}


def exact_round(v: float, name: str, mode: str = "nearest") -> float:
    """Round one float to the format with rational arithmetic: the definition, nothing more.

    (NaN into a format without NaN is an error, tested on its own; here it gives NaN.)"""
    m, emin, fmax, top = LAYOUT[name]
    if math.isnan(v) or (top == "e8m0" and not v > 0):  # e8m0: no sign, no zero
        return math.nan
    if math.isinf(v):
        return v if top == "inf" else math.copysign(fmax, v) if top == "none" else math.nan
    if v == 0:
        return v
    a = Fraction(abs(v))
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    q = Fraction(2) ** (max(e, emin) - m)
    y = a / q
    fl = y.numerator // y.denominator
    rem = y - fl
    if mode == "nearest" and (rem > Fraction(1, 2) or (rem == Fraction(1, 2) and fl % 2 == 1)):
        fl += 1
    r = fl * q
    if r == 0 and top == "e8m0":
        r = Fraction(2) ** emin  # no zero: below the smallest value is the smallest value
    if r > Fraction(fmax):
        if mode == "toward_zero" or top == "none":
            r = Fraction(fmax)
        else:
            return math.copysign(math.inf if top == "inf" else math.nan, v)
    return math.copysign(float(r), v)


def finite_only(name, v):
    """v without its NaNs where the format has none to cast them to (that is an error)."""
    return v[~np.isnan(v)] if name in NO_NAN else v


# ---------------------------------------------------------------------------- constants


def test_constants_pinned_to_exact_literals():
    f16, bf16, f32 = get_format("float16"), get_format("bfloat16"), get_format("float32")
    e4, e5 = get_format("float8_e4m3fn"), get_format("float8_e5m2")
    assert (f16.smallest_subnormal, f16.tiny, f16.max, f16.eps) == (2.0**-24, 2.0**-14, 65504.0, 2.0**-10)
    assert (bf16.smallest_subnormal, bf16.tiny, bf16.eps) == (2.0**-133, 2.0**-126, 2.0**-7)
    assert bf16.max == 3.3895313892515355e38 == float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    assert (f32.smallest_subnormal, f32.tiny, f32.eps) == (2.0**-149, 2.0**-126, 2.0**-23)
    assert f32.max == float(np.finfo(np.float32).max)
    assert (e4.smallest_subnormal, e4.tiny, e4.max, e4.eps, e4.has_inf) == (2.0**-9, 0.015625, 448.0, 0.125, False)
    assert (e5.smallest_subnormal, e5.tiny, e5.max, e5.eps, e5.has_inf) == (2.0**-16, 2.0**-14, 57344.0, 0.25, True)
    assert f16.flush_threshold == 2.0**-25 and f16.overflow_threshold == 65520.0
    assert bf16.flush_threshold == pytest.approx(4.59e-41, rel=1e-3)
    assert e4.flush_threshold == pytest.approx(9.77e-4, rel=1e-3)
    assert e5.flush_threshold == pytest.approx(7.63e-6, rel=1e-3)
    assert [f.bias for f in (f32, f16, bf16, e4, e5)] == [127, 15, 127, 7, 15]


@pytest.mark.parametrize("name", NAMES)
def test_layout_invariants_and_agreement_with_ml_dtypes(name):
    f = get_format(name)
    assert f.exponent_bits + f.mantissa_bits + f.signed == f.bits
    assert f.dtype.itemsize * 8 == max(f.bits, 8)  # fp6 and fp4 take a byte each in numpy
    fi = ml_dtypes.finfo(f.dtype)
    assert fi.bits == f.bits
    assert (f.max, f.tiny, f.eps) == (float(fi.max), float(fi.smallest_normal), float(fi.eps))
    assert f.smallest_subnormal == float(fi.smallest_subnormal)


@pytest.mark.parametrize("alias,name", [("fp32", "float32"), ("fp16", "float16"), ("half", "float16"),
                                        ("bf16", "bfloat16"), ("e4m3", "float8_e4m3fn"),
                                        ("e5m2", "float8_e5m2"), ("BF16", "bfloat16"),
                                        ("e2m3", "float6_e2m3fn"), ("e3m2", "float6_e3m2fn"),
                                        ("fp4", "float4_e2m1fn"), ("e2m1", "float4_e2m1fn"),
                                        ("e8m0", "float8_e8m0fnu"), (ml_dtypes.float4_e2m1fn, "float4_e2m1fn"),
                                        (np.float16, "float16"), (ml_dtypes.bfloat16, "bfloat16")])
def test_aliases(alias, name):
    assert get_format(alias).name == name


def test_unknown_format_lists_names_and_aliases():
    with pytest.raises(ValueError) as e:
        get_format("fp17")
    msg = str(e.value)
    assert "'fp17'" in msg
    for n in NAMES + ["fp32", "fp16", "half", "bf16", "e4m3", "e5m2"]:
        assert n in msg
    with pytest.raises(ValueError, match="unknown format"):
        cast(1.0, "float128")


def test_binary64_is_in_the_table_for_reference_not_as_a_tensor_format():
    """float64 (gfloat's binary64): limits written out, numpy's own finfo, every rounding exact on
    float64 values, float32 input widened; named only (a float64 array's dtype still names no format:
    tensors and checkpoints read such arrays as numbers), and no tensor is stored in it."""
    f = get_format("binary64")
    assert f is get_format("fp64") is get_format("double") is get_format("float64") and f.dtype == np.float64
    assert (f.bits, f.exponent_bits, f.mantissa_bits, f.bias, f.emax) == (64, 11, 52, 1023, 1023)
    assert (f.max, f.tiny, f.smallest_subnormal, f.eps) == ((2 - 2**-52) * 2.0**1023, 2.0**-1022, 2.0**-1074, 2.0**-52)
    fi = np.finfo(np.float64)
    assert (f.max, f.tiny, f.smallest_subnormal, f.eps) == (fi.max, fi.smallest_normal, fi.smallest_subnormal, fi.eps)
    x = np.array([0.1, -5e-324, 1e308, -0.0, np.inf, np.nan])
    for mode in ("nearest", "toward_zero", "to_odd"):
        assert np.array_equal(cast(x, f, mode), x, equal_nan=True) and np.signbit(cast(x, f, mode)[3])
    assert cast(np.float32([0.1]), f).tolist() == [float(np.float32(0.1))] and cast([1], f).dtype == np.float64
    assert round_to(np.float32([np.inf]), f, saturate=True).tolist() == [fi.max]
    assert ulp(1.0, f) == 2.0**-52 and ulp(1e308, f) == 2.0**971 and ulp(np.inf, f) == np.inf
    assert classify(np.array([1e-320, 0.5]), f).names().tolist() == ["subnormal", "normal"]
    with pytest.raises(ValueError, match="unknown format"):
        get_format(np.float64)
    with pytest.raises(ValueError, match="float64 is not a tensor format: fpsim holds it for reference"):
        fpsim.tensor([1.0], "float64")


@pytest.mark.parametrize("bad", ["abc", object(), {"a": 1}, None, ["x", 1]])
def test_non_numeric_input_is_a_type_error_naming_the_type(bad):
    with pytest.raises(TypeError, match=type(bad).__name__ if not isinstance(bad, str) else "str"):
        cast(bad, "fp16")


def test_unknown_rounding_mode():
    with pytest.raises(ValueError, match="toward_zero"):
        cast(1.0, "fp16", rounding="up")


# ---------------------------------------------------------------------------- exhaustive


def all_patterns(name):
    f = get_format(name)
    width = {1: np.uint8, 2: np.uint16}[f.dtype.itemsize]
    return np.arange(2 ** f.bits, dtype=np.uint32).astype(width).view(f.dtype), width


@pytest.mark.parametrize("name", ["float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", *NEW])
@pytest.mark.parametrize("via", ["self", "float32", "float64"])
@pytest.mark.parametrize("rounding", ["nearest", "toward_zero", "stochastic"])
def test_every_bit_pattern_survives(name, via, rounding):
    x, width = all_patterns(name)
    src = x if via == "self" else x.astype(np.float32).astype(via)
    out = cast(src, name, rounding, seed=0)
    assert out.dtype == get_format(name).dtype
    nan = np.isnan(x.astype(np.float32))
    assert np.array_equal(np.isnan(out.astype(np.float32)), nan)
    assert np.array_equal(out.view(width)[~nan], x.view(width)[~nan])  # -0 included, bit for bit
    back = round_to(src, name, rounding, seed=0)
    assert back.dtype == (np.float32 if via == "self" else np.dtype(via))
    assert same(back, x.astype(np.float32)).all()


# ---------------------------------------------------------------------------- correct rounding


def random_values(n=10**6, seed=0):
    rng = np.random.default_rng(seed)
    mag = np.exp(rng.uniform(np.log(1e-12), np.log(1e6), n))
    return mag * rng.choice([-1.0, 1.0], n)


def midpoints(name):
    """Every midpoint between neighbours of the format (positive and negative), +- one float64 ulp."""
    f = get_format(name)
    if f.bits == 32:
        rng = np.random.default_rng(1)
        lo = rng.integers(0, 0x7F7FFFFF, 200_000, dtype=np.uint32).view(np.float32).astype(np.float64)
        hi = np.nextafter(lo.astype(np.float32), np.float32(np.inf)).astype(np.float64)
    else:
        x, _ = all_patterns(name)
        with np.errstate(invalid="ignore"):
            v = np.unique(x.astype(np.float64))
        v = v[np.isfinite(v) & (v >= 0)]
        lo, hi = v[:-1], v[1:]
    mid = (lo + hi) / 2  # exact: both are short binary fractions
    top = f.max + 2.0 ** (f.emax - f.mantissa_bits) / 2  # the midpoint beyond max
    m = np.concatenate([mid, [top]])
    m = np.concatenate([m, np.nextafter(m, np.inf), np.nextafter(m, 0)])
    return np.concatenate([m, -m])


def edge_values(name):
    f = get_format(name)
    step = 2.0 ** (f.emax - f.mantissa_bits)
    base = [0.0, -0.0, np.inf, -np.inf, np.nan, f.max, f.max + step / 4, f.max + step / 2,
            f.max + step, 2 * f.max, f.smallest_subnormal, f.smallest_subnormal / 2,
            f.smallest_subnormal * 0.75, f.smallest_subnormal * 1.5, f.tiny, f.tiny * (1 - 2**-30), 1e300,
            5e-324]
    v = np.array(base)
    v = np.concatenate([v, np.nextafter(v, np.inf), np.nextafter(v, -np.inf)])
    return np.concatenate([v, -v])


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("mode", ["nearest", "toward_zero"])
def test_edges_and_midpoints_match_exact_rationals(name, mode):
    v = finite_only(name, np.concatenate([edge_values(name), midpoints(name)]))
    if v.size > 40_000:  # Fractions are slow: every edge plus a deterministic sample of the rest
        v = np.concatenate([edge_values(name), np.random.default_rng(2).choice(v, 40_000, replace=False)])
    want = np.array([exact_round(float(a), name, mode) for a in v])
    with np.errstate(over="ignore"):
        v32 = v.astype(np.float32)
    for src in (v, v32):
        if src.dtype == np.float32:
            exact32 = src.astype(np.float64) == v
            got, ref = cast(src[exact32], name, mode), want[exact32]
        else:
            got, ref = cast(src, name, mode), want
        bad = ~same(got.astype(np.float64), ref)
        assert not bad.any(), f"{bad.sum()} disagreements, e.g. {src[bad][:5]}"


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("mode", ["nearest", "toward_zero"])
@pytest.mark.parametrize("src_dtype", [np.float64, np.float32])
def test_random_and_midpoints_match_gfloat(name, mode, src_dtype):
    with np.errstate(over="ignore"):
        v = np.concatenate([random_values(), midpoints(name), edge_values(name)]).astype(src_dtype)
    v = finite_only(name, v)
    if name == "float8_e8m0fnu":
        # gfloat's e8m0 keeps values below 2**-127 and rounds ties to the even exponent code; fpsim (like
        # ml_dtypes) takes 2**-127 as the floor and rounds ties up: compare everywhere else.
        with np.errstate(divide="ignore", invalid="ignore"):
            tie = np.ldexp(v, -np.floor(np.log2(v)).astype(int)) == 1.5
        v = v[(v >= 2.0**-127) & ~tie]
    with np.errstate(over="ignore"):
        ref = gfloat.round_ndarray(info(name), v.astype(np.float64), GMODE[mode], sat=name in NO_NAN)
    got = cast(v, name, mode).astype(np.float64)
    bad = ~same(got, ref)
    assert not bad.any(), f"{bad.sum()} disagreements with gfloat, e.g. {v[bad][:5]}"


def test_ml_dtypes_double_rounding_is_not_inherited():
    # A float64 just above a bfloat16 midpoint: float32 rounding lands on the midpoint, and the
    # second rounding (ties to even) goes down. Correct single rounding goes up.
    lo = 1.0
    mid = lo + 2.0**-8
    x = mid + 2.0**-40
    assert float(np.float64(x).astype(np.float32).astype(ml_dtypes.bfloat16)) == 1.0  # ml_dtypes: wrong
    assert float(cast(x, "bfloat16")) == 1.0 + 2.0**-7


@pytest.mark.parametrize("name", [n for n in NAMES if n != "float8_e8m0fnu"])
@pytest.mark.parametrize("saturate", [True, False])
def test_saturate_clamps_overflow_and_infinities(name, saturate):
    f = get_format(name)
    if not saturate and name not in NO_NAN:
        return  # IEEE overflow: test_ieee_overflow_without_saturate
    v = np.array([f.max * 4, -f.max * 4, np.inf, -np.inf, np.nan, f.max, 1.0, -0.0])
    v = finite_only(name, v)  # fp6 / fp4: no NaN; and they saturate with or without being asked
    for mode in ("nearest", "toward_zero", "stochastic"):
        out = cast(v, name, mode, saturate=saturate, seed=0).astype(np.float64)
        assert list(out[:4]) == [f.max, -f.max, f.max, -f.max]
        out = out[4:] if name in NO_NAN else out[5:]
        assert out[0] == f.max and out[1] == 1.0
        assert out[2] == 0 and np.signbit(out[2])


def test_ieee_overflow_without_saturate():
    assert np.isinf(cast(65520.0, "fp16")) and float(cast(65519.99, "fp16")) == 65504.0
    assert np.isnan(float(cast(1000.0, "e4m3"))) and float(cast(464.0, "e4m3")) == 448.0
    assert np.isnan(float(cast(np.inf, "e4m3")))
    assert float(cast(1e6, "e5m2")) == np.inf
    assert float(cast(1e6, "fp16", "toward_zero")) == 65504.0  # IEEE: toward zero never overflows


def test_flush_threshold_float16():
    assert float(cast(2.0**-25, "fp16")) == 0.0  # the tie goes to the even neighbour, 0
    assert float(cast(np.nextafter(2.0**-25, 1), "fp16")) == 2.0**-24
    assert float(cast(3e-8, "fp16")) == float(cast(6e-8, "fp16")) == 2.0**-24
    assert float(cast(1e-8, "fp16")) == 0.0


# ---------------------------------------------------------------------------- stochastic


def test_stochastic_is_reproducible_and_unbiased():
    x = np.full(200_000, 1.0 + 0.3 * 2.0**-10)  # 30% of the way from 1.0 to its upper neighbour
    a = cast(x, "fp16", "stochastic", seed=7)
    b = cast(x, "fp16", "stochastic", seed=7)
    assert np.array_equal(a.view(np.uint16), b.view(np.uint16))
    vals = np.unique(a.astype(np.float64))
    assert set(vals) == {1.0, 1.0 + 2.0**-10}
    frac_up = np.mean(a.astype(np.float64) > 1.0)
    assert abs(frac_up - 0.3) < 4 * math.sqrt(0.3 * 0.7 / x.size)
    assert abs(a.astype(np.float64).mean() - x[0]) < 1e-5 * 2.0**-10 * 100
    rng = np.random.default_rng(3)
    c = cast(x, "fp16", "stochastic", rng=rng)  # a generator is accepted and used
    assert set(np.unique(c.astype(np.float64))) == {1.0, 1.0 + 2.0**-10}
    assert not np.array_equal(c.view(np.uint16), a.view(np.uint16))
    fpsim.manual_seed(5)
    d = cast(x[:100], "bf16", "stochastic")
    fpsim.manual_seed(5)
    e = cast(x[:100], "bf16", "stochastic")
    assert np.array_equal(d.view(np.uint16), e.view(np.uint16))


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=-6e4, max_value=6e4, allow_nan=False, width=64), st.sampled_from(NAMES[1:]))
def test_stochastic_result_is_always_a_neighbour(v, name):
    down = exact_round(v, name, "toward_zero")
    out = cast(np.full(64, v), name, "stochastic", seed=1).astype(np.float64)
    f = get_format(name)
    up_mag = abs(down) + float(ulp(down, name)) if abs(v) != abs(down) else abs(down)
    allowed = {down, math.copysign(up_mag, v)}
    if up_mag > f.max:
        allowed.add(math.copysign(math.inf, v) if f.has_inf else math.nan)
    ok = [o in allowed or (math.isnan(o) and any(math.isnan(a) for a in allowed)) for o in out]
    assert all(ok), (v, name, set(out), allowed)


@settings(max_examples=500, deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True, width=64), st.sampled_from(NAMES))
def test_nearest_matches_exact_rationals_property(v, name):
    if math.isnan(v) and name in NO_NAN:
        with pytest.raises(ValueError, match="has no NaN"):
            cast(v, name)
        return
    got = float(cast(v, name))
    want = exact_round(v, name)
    assert same(got, want), (v, name, got, want)


# ---------------------------------------------------------------------------- ulp, classify


def test_ulp():
    assert float(ulp(1.0, "fp16")) == 2.0**-10
    assert float(ulp(1.0, "bf16")) == 2.0**-7
    assert float(ulp(1.0, "fp32")) == 2.0**-23
    assert float(ulp(0.0, "fp16")) == 2.0**-24
    assert float(ulp(1e-7, "fp16")) == 2.0**-24  # subnormal band: constant spacing
    assert float(ulp(65504.0, "fp16")) == 32.0
    assert float(ulp(-3.0, "e4m3")) == 0.25
    assert float(ulp(1e6, "fp16")) == math.inf
    # ulp agrees with the distance to the next representable value, for every float16 finite value
    x, _ = all_patterns("float16")
    v = x.astype(np.float64)
    v = v[np.isfinite(v) & (v >= 0) & (v < 65504)]
    nxt = np.nextafter(v.astype(np.float16), np.float16(np.inf)).astype(np.float64)
    assert np.array_equal(ulp(v, "fp16"), nxt - v)


def test_classify_counts():
    v = np.array([1e-8, 3e-8, 1e-6, 1.0, 7e4, np.nan, 0.0, -np.inf])
    c = classify(v, "fp16")
    assert list(c.names()) == ["zero", "subnormal", "subnormal", "normal", "inf", "nan", "zero", "inf"]
    assert list(c.underflow) == [True] + [False] * 7
    assert list(c.overflow) == [False] * 4 + [True, False, False, False]
    counts = c.counts()
    assert counts["zero"] == 2 and counts["subnormal"] == 2 and counts["underflow"] == 1
    assert counts["overflow"] == 1 and counts["total"] == 8
    b = classify(np.full(100, 7e4), "bf16").counts()
    assert b["overflow"] == 0 and b["normal"] == 100
    s = classify(np.array([1e4, 1e6]), "e5m2", saturate=True)
    assert list(s.overflow) == [False, True]


def test_classify_saturated_overflow_respects_the_tie_at_the_top():
    # e4m3fn: 464 is halfway between max 448 and the (NaN) pattern above; the tie goes to 448
    assert list(classify(np.array([448.0, 464.0, 464.5, 1e4]), "e4m3", saturate=True).overflow) == [
        False, False, True, True]
    # float16: 65520 is the tie above max 65504 whose even neighbour is 2^16 - an overflow
    assert list(classify(np.array([65519.0, 65520.0]), "fp16", saturate=True).overflow) == [False, True]


def test_eps_is_the_gap_above_one_in_every_format():
    """eps = ulp(1.0) = the next value above 1.0 minus 1.0, read off the code points (gfloat's
    decoder) - also where 1.0 is subnormal: ocp_int8 holds i/64, so 1 + 2^-6 follows 1 (the OCP
    MX spec's INT8 element: two's complement with an implicit scale of 2^-6)."""
    gfloat = pytest.importorskip("gfloat")
    from gfloat.formats import format_info_ocp_int8, format_info_p3109

    assert fpsim.get_format("ocp_int8").eps == 2.0**-6
    cases = [("ocp_int8", format_info_ocp_int8)] + [
        (f"p3109_k{k}p{p}se", format_info_p3109(k, p)) for k in (6, 8) for p in (2, 3, 4, 5)]
    for name, fi in cases:
        values = sorted(v for v in (gfloat.decode_float(fi, c).fval for c in range(2**fi.k)) if np.isfinite(v))
        above = next(v for v in values if v > 1.0)
        assert fpsim.get_format(name).eps == above - 1.0, name
