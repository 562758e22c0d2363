"""The compiled fused rounding modes (fpsim/numerics/compiled/_fused_modes.py: the magnitude rounding,
``modes.finish`` and the store in one loop) against the numpy path of ``fpsim.cast`` (``use_compiled(False)``:
modekernels, finish and round._store; kernels.narrow_cast to nearest) bit for bit, and against gfloat.

Inputs: every float32 binade (each exponent field, both signs) sampled densely (its edges, the patterns
with few low bits set, which hold the ties, and random mantissas), every format's values, midpoints and
their neighbours (gfloat's decoding), zeros, infinities and NaNs.  Every mode and saturation into float16,
the fp8 / fp6 / fp4 element formats and P3109 formats (signed extended, unsigned finite); few-bit SR with
given bits (k = 1, 8, 13, every variant, several bit arrays); exact SR from one seed.  Every float32
pattern is a slow test, skipped unless FPSIM_EXHAUSTIVE=1.  Skipped where numba is not installed.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("numba")

from support.gfloat_reference import GMODE, GSR, info, probes, round_ref  # noqa: E402

from fpsim.formats import cast, get_format, round_to  # noqa: E402
from fpsim.formats.modes import ROUNDING_MODES  # noqa: E402
from fpsim.numerics import compiled  # noqa: E402
from fpsim.numerics.compiled import use_compiled  # noqa: E402


@pytest.fixture(autouse=True)
def _compiled_path_on():
    """The compiled path on for every test, FPSIM_NUMBA=0 or not (each test switches to the numpy path
    itself where it compares the two)."""
    with use_compiled(True):
        yield

FORMATS = ("float16", "float8_e4m3fn", "float8_e5m2", "float4_e2m1fn", "float6_e3m2fn", "float6_e2m3fn",
           "p3109_k8p4se", "p3109_k8p3uf")
NANS = np.array([0x7FC00000, 0x7F800001, 0x7FBFFFFF, 0xFFC00000, 0xFF812345], np.uint32).view(np.float32)


def _binades(per: int = 24, seed: int = 0) -> np.ndarray:
    """Every float32 exponent field and sign: its edges, mantissas with one or two low bits set around
    each bit position (the ties and their neighbours in every format), and ``per`` random ones."""
    m = np.unique(np.r_[0, 1, 2, 3, 0x7FFFFF, 0x7FFFFE, [1 << b for b in range(23)], [(1 << b) - 1 for b in range(24)],
                        [(1 << b) + 1 for b in range(1, 23)], [3 << b for b in range(22)],
                        np.random.default_rng(seed).integers(0, 1 << 23, per)]).astype(np.uint32) & np.uint32(0x7FFFFF)
    e = np.arange(255, dtype=np.uint32) << np.uint32(23)  # 255: inf and NaN come separately
    pats = (e[:, None] | m[None, :]).reshape(-1)
    return np.concatenate([pats, pats | np.uint32(0x80000000)]).view(np.float32)


def _inputs(name: str) -> np.ndarray:
    with np.errstate(over="ignore"):
        edges = probes(info(name), np.random.default_rng(1), 500).astype(np.float32)
    x = np.concatenate([_binades(), edges, np.float32([0.0, -0.0, np.inf, -np.inf])])
    return np.concatenate([x, NANS]) if get_format(name).has_nan else x


def _bits(a) -> np.ndarray:
    a = np.asarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


def _both(fn, fused_runs: bool = True):
    """fn's result on the compiled path (asserting the fused loop ran, where it should) and on the numpy path."""
    k = compiled.kernels()
    calls = []
    fused = k.roundings["modes_cast"]
    k.roundings["modes_cast"] = lambda *a: calls.append(1) or fused(*a)
    try:
        with np.errstate(all="ignore"), use_compiled(True):
            got = fn()
    finally:
        k.roundings["modes_cast"] = fused
    assert bool(calls) == fused_runs, "the fused loop did not run" if fused_runs else "the fused loop ran"
    with np.errstate(all="ignore"), use_compiled(False):
        want = fn()
    return got, want


def _assert_same(got, want, what):
    assert got.dtype == want.dtype and got.shape == want.shape, what
    bad = np.flatnonzero(_bits(got) != _bits(want))
    assert bad.size == 0, f"{what}: {bad.size} differ, first at {bad[:4]}"


@pytest.mark.parametrize("name", FORMATS)
def test_every_mode_on_both_paths(name):
    """Every deterministic mode and exact SR, saturating or not: the same bits, NaN payloads and -0 too."""
    x = _inputs(name)
    for mode in ROUNDING_MODES:
        for sat in (False, True):
            got, want = _both(lambda mode=mode, sat=sat: cast(x, name, mode, saturate=sat, seed=3),
                              fused_runs=(name, mode) != ("float16", "nearest"))  # float16's own kernel
            _assert_same(got, want, (name, mode, sat))


@pytest.mark.parametrize("name", ("float16", "float8_e4m3fn", "float4_e2m1fn", "p3109_k8p4se", "p3109_k8p3uf"))
@pytest.mark.parametrize("k", (1, 8, 13))
def test_few_bit_sr_with_given_bits_on_both_paths(name, k):
    x = _inputs(name)
    for seed, dtype in ((0, np.uint8 if k <= 8 else np.uint16), (1, np.int64), (2, np.int64)):
        bits = np.random.default_rng(seed).integers(0, 2**k, x.size).astype(dtype)
        for variant in ("rne", "rto", "fast", "fastest"):
            for sat in (False, True):
                got, want = _both(lambda b=bits, v=variant, s=sat: cast(x, name, "stochastic", saturate=s, sr_bits=k,
                                                                       sr_random=b, sr_variant=v))
                _assert_same(got, want, (name, k, dtype, variant, sat))



@pytest.mark.parametrize("bitgen", [np.random.PCG64, np.random.Philox])
def test_few_bit_sr_with_drawn_bits_takes_the_same_integers(bitgen):
    """sr_bits without sr_random: sr.draw_bits' integers (on the compiled path from PCG64's compiled
    twin, ``compiled._draws.pcg64_raw``; from random_raw on the numpy path and for Philox) - the same
    bits on both paths and the generator left in the same state (its buffered 32-bit half too)."""
    x = _inputs("float16")[: 50_005]  # not a multiple of 8 or of 4 words
    for name in ("float16", "p3109_k8p4se", "float8_e5m2"):
        for k, variant in ((1, "rne"), (8, "rto"), (8, "fast"), (5, "fastest"), (13, "rne")):
            gens = []
            for _ in range(2):
                g = np.random.Generator(bitgen(21))
                g.random(dtype=np.float32)  # one 32-bit draw: half a word kept in the generator
                gens.append(g)
            pair = list(gens)
            got, want = _both(lambda g=gens, n=name, k=k, v=variant: cast(x, n, "stochastic", sr_bits=k, sr_variant=v,
                                                                          rng=g.pop(0)))
            _assert_same(got, want, (name, k, variant))
            a, b = pair  # left in the same state: the same next draws, the buffered half first
            assert a.random(dtype=np.float32) == b.random(dtype=np.float32) and a.random() == b.random(), (name, k)
    if bitgen is np.random.PCG64:  # the whole state, pinned
        a, b = (np.random.Generator(bitgen(4)) for _ in range(2))
        with use_compiled(True):
            cast(x, "float16", "stochastic", sr_bits=8, rng=a)
        with use_compiled(False):
            cast(x, "float16", "stochastic", sr_bits=8, rng=b)
        assert a.bit_generator.state == b.bit_generator.state

def test_nan_into_a_format_without_nan_is_refused_before_anything_is_drawn():
    """The fused loop counts the NaNs itself: the numpy path's ValueError, and no draw taken."""
    x = np.linspace(-7, 7, 5000, dtype=np.float32)
    x[[3, 99]] = np.nan
    for mode, kw in (("nearest", {}), ("toward_zero", {}), ("stochastic", {"sr_bits": 4})):
        errors = []
        for on in (True, False):
            rng = np.random.default_rng(5)
            with use_compiled(on), pytest.raises(ValueError) as e:
                cast(x, "float4_e2m1fn", mode, rng=rng, **kw)
            errors.append((str(e.value), rng.random()))
        assert errors[0] == errors[1]
        assert errors[0][0] == "float4_e2m1fn has no NaN: 2 NaN values in the input cannot be cast to it"




def test_given_bits_out_of_range_are_refused_as_on_the_numpy_path():
    """The fused loop finds the largest given integer itself (cast skips check_sr's pass): the same
    ValueError, before the NaN refusal, for a bit too large and for a negative one."""
    x = np.linspace(-7, 7, 5000, dtype=np.float32)
    ok = np.random.default_rng(0).integers(0, 16, x.size)
    for bad_at, value in ((17, 16), (4999, -1), (0, 2**40)):
        bits = ok.copy()
        bits[bad_at] = value
        for xs in (x, np.where(np.arange(x.size) == 3, np.float32(np.nan), x)):
            errors = []
            for on in (True, False):
                with use_compiled(on), pytest.raises(ValueError) as e:
                    cast(xs, "float4_e2m1fn", "stochastic", sr_bits=4, sr_random=bits)
                errors.append(str(e.value))
            assert errors[0] == errors[1] and errors[0].startswith("sr_random must hold integers in [0, 2**sr_bits)")

def test_pinned_values_against_gfloat():
    """A few values per mode into e2m1, e4m3fn and P3109 (arrays large enough for the compiled loop)."""
    v = np.float32([2.5, -2.5, 2.75, 0.3, -0.26, 5.5, 7.0, 100.0, -100.0, 1e-9, -1e-9, 0.0, 465.0, -465.0])
    x = np.repeat(v, 100)
    for name in ("float4_e2m1fn", "float8_e4m3fn", "p3109_k8p4se"):
        for mode, gmode in GMODE.items():
            for sat in (False, True):
                with use_compiled(True):
                    got = round_to(x, name, mode, saturate=sat)[::100]
                want = round_ref(info(name), v.astype(np.float64), gmode, sat)
                same = (got == want) | (np.isnan(got) & np.isnan(want))
                assert same.all() and np.array_equal(np.signbit(got[~np.isnan(got)]), np.signbit(want[~np.isnan(want)])), \
                    (name, mode, sat, got, want)
    # and a few pinned literals: e2m1 ties to even, away, truncation; e4m3fn's 464 tie and 465's overflow
    with use_compiled(True):
        assert list(round_to(x, "e2m1")[::100][:4]) == [2.0, -2.0, 3.0, 0.5]
        assert list(round_to(x, "e2m1", "nearest_away")[::100][:4]) == [3.0, -3.0, 3.0, 0.5]
        assert list(round_to(x, "e2m1", "toward_zero")[::100][:6]) == [2.0, -2.0, 2.0, 0.0, -0.0, 4.0]
        e4 = round_to(np.repeat(np.float32([464, 465, -465]), 400), "e4m3")[::400]
        assert e4[0] == 448 and np.isnan(e4[1:]).all()


def test_few_bit_sr_against_gfloat():
    """Given bits into e2m1, every variant: gfloat's round_ndarray with the same integers."""
    v = np.float32(np.random.default_rng(2).uniform(-6, 6, 4096))
    for k in (1, 3, 8):
        bits = np.random.default_rng(k).integers(0, 2**k, v.size)
        for variant, gmode in GSR.items():
            with use_compiled(True):
                got = round_to(v, "e2m1", "stochastic", sr_bits=k, sr_random=bits, sr_variant=variant)
            want = round_ref(info("float4_e2m1fn"), v.astype(np.float64), gmode, True, bits, k)
            assert np.array_equal(got, want), (k, variant)


# ----------------------------------------------------------------------------- every float32 pattern

_CHUNK = 2**24


def _exhaustive_bad(name: str, mode: str, x: np.ndarray) -> int:
    f = get_format(name)
    if not f.has_nan:
        x = x[~np.isnan(x)]
    got, want = _both(lambda: cast(x, name, mode), fused_runs=(name, mode) != ("float16", "nearest"))
    return int(np.count_nonzero(_bits(got) != _bits(want)))


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("FPSIM_EXHAUSTIVE") != "1", reason="all 2**32 float32 patterns: FPSIM_EXHAUSTIVE=1")
@pytest.mark.parametrize("mode", ("nearest", "toward_zero", "toward_positive", "toward_negative", "nearest_away", "to_odd"))
@pytest.mark.parametrize("name", FORMATS)
def test_every_float32_pattern(name, mode):
    bad = sum(_exhaustive_bad(name, mode, np.arange(s, s + _CHUNK, dtype=np.uint32).view(np.float32))
              for s in range(0, 2**32, _CHUNK))
    assert bad == 0, f"{bad} float32 patterns round differently into {name} ({mode})"


def test_the_exhaustive_check_finds_a_wrong_rounding(monkeypatch):
    """The slow test's comparison, on one chunk, counts a fused rounding that differs."""
    x = np.arange(0x3F800000, 0x3F800000 + 2**16, dtype=np.uint32).view(np.float32)
    assert _exhaustive_bad("float8_e5m2", "toward_zero", x) == 0
    fused = compiled.kernels().roundings["modes_cast"]

    def off_by_one(x32, *a):
        out, nan, most = fused(x32, *a)
        out.view(np.uint8)[::7] += np.uint8(1)
        return out, nan, most
    monkeypatch.setitem(compiled.kernels().roundings, "modes_cast", off_by_one)
    assert _exhaustive_bad("float8_e5m2", "toward_zero", x) > 0
