"""The compiled roundings from float64 (fpsim/numerics/compiled/_round64.py, its wrappers in _casts64.py)
against the numpy path of fpsim/formats/round.py, bit for bit, and against independent references:
numpy's float64 -> float16 cast (correct), ml_dtypes' casts of the float64 values float32 holds
exactly, and gfloat's round_ndarray.

Inputs: float32 patterns' float64 values and those plus and minus a half and a quarter of float32's
ulp there (float32's ties and the values between: where a rounding by way of float32 to nearest
goes wrong), sampled per binade (every sign and exponent, 2**10 significands each: the first and
last 32 and random ones); every value of each target format, the midpoints between neighbours and
the one past max, and their float64 neighbours; random float64 patterns and log-uniform values
across float64's whole exponent range (subnormals, beyond float32's range); the specials.  Every
float32 pattern (2**32, chunked, with the same offsets) is a slow test, skipped unless
FPSIM_EXHAUSTIVE=1 asks for it.  Skipped where numba is not installed.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from helpers import bits, identical

pytest.importorskip("numba")

from fpsim.formats import cast, get_format, kernels  # noqa: E402
from fpsim.numerics import compiled  # noqa: E402
from fpsim.numerics.compiled import _casts64, use_compiled  # noqa: E402

FORMATS = ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn")
NAN_FREE = ("float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn")  # no NaN: a NaN input is refused
NANS64 = np.array([0x7FF8000000000000, 0x7FF0000000000001, 0x7FF7FFFFFFFFFFFF, 0x7FFFFFFFFFFFFFFF,
                   0x7FF8000020000000, 0x7FF0000100000000, 0x7FFC000000000001, 0x7FF4000000002000], np.uint64)


def _binade_patterns(per: int = 2**10, seed: int = 0) -> np.ndarray:
    """float32 patterns, ``per`` significands in each of the 512 signs and exponents (inf and NaN's too)."""
    rng = np.random.default_rng(seed)
    sig = np.concatenate([np.arange(32), 2**23 - 1 - np.arange(32), rng.integers(0, 2**23, per - 64)]).astype(np.uint32)
    tops = (np.arange(512, dtype=np.uint32) << np.uint32(23))[:, None]
    return (tops | sig[None, :]).reshape(-1)


def _with_offsets(patterns: np.ndarray) -> np.ndarray:
    """The finite float32 patterns' float64 values, and each plus and minus a half and a quarter of
    float32's ulp at it (exact in float64: 26 significant bits)."""
    x32 = patterns.view(np.float32)
    x32 = x32[np.isfinite(x32)]
    ulp = np.ldexp(1.0, np.maximum((x32.view(np.uint32) >> np.uint32(23)) & np.uint32(0xFF), 1).astype(np.int64) - 150)
    x = x32.astype(np.float64)
    return np.concatenate([x, x + ulp / 2, x - ulp / 2, x + ulp / 4, x - ulp / 4])


def _format_edges(name: str) -> np.ndarray:
    """The format's finite values, the midpoints between neighbours (its ties) and the one past max,
    and the float64 neighbours of each, both signs."""
    f = get_format(name)
    n = 2 ** (8 * f.dtype.itemsize)
    codes = np.arange(n, dtype=np.uint32).astype(np.uint8 if n == 256 else np.uint16)
    with np.errstate(invalid="ignore"):
        v = codes.view(f.dtype).astype(np.float64)
    v = np.unique(np.abs(v[np.isfinite(v)]))
    base = np.concatenate([v, (v[:-1] + v[1:]) / 2, [v[-1] + (v[-1] - v[-2]) / 2]])  # exact in float64
    near = np.concatenate([base, np.nextafter(base, np.inf), np.nextafter(base, 0)])
    return np.concatenate([near, -near])


def _random64(n: int = 2**18, seed: int = 1) -> np.ndarray:
    """Random float64 patterns (every exponent, NaNs among them) and log-uniform values of either sign
    from float64's subnormals to its max."""
    rng = np.random.default_rng(seed)
    pats = rng.integers(0, 2**64, n, dtype=np.uint64).view(np.float64)
    mags = 10.0 ** rng.uniform(-325, 308.2, n) * rng.choice([-1.0, 1.0], n)
    return np.concatenate([pats, mags])


def _specials64() -> np.ndarray:
    f64 = np.finfo(np.float64)
    s = np.array([0.0, np.inf, f64.max, f64.smallest_subnormal, f64.tiny, 2.0**-537, 2.0**-538, 2.0**-149,
                  2.0**-150, 2.0**-151, 2.0**-133, 2.0**-134, 2.0**-126, float(np.finfo(np.float32).max),
                  2.0**128, 2.0**128 - 2.0**103, 2.0**128 - 2.0**104, (2 - 2.0**-8) * 2.0**127, 1e300, 65504, 65519.99,
                  65520, 65536, 448, 464, 465, 480, 512, 57344, 61440, 7.5, 7.75, 28, 30, 6, 7, 2.0**-24, 2.0**-25])
    with np.errstate(over="ignore"):  # float64's max steps up to inf
        s = np.concatenate([s, np.nextafter(s, np.inf), np.nextafter(s, 0)])
    return np.concatenate([s, -s, NANS64.view(np.float64), -NANS64.view(np.float64)])


def _inputs64(name: str) -> np.ndarray:
    x = np.concatenate([_with_offsets(_binade_patterns()), _format_edges(name), _random64(), _specials64()])
    return x[~np.isnan(x)] if name in NAN_FREE else x


def both(f, x):
    """f(x) on the numpy path and on the compiled path."""
    with np.errstate(over="ignore", invalid="ignore"):
        with use_compiled(False):
            r0 = f(x)
        with use_compiled(True):
            r1 = f(x)
    return r0, r1


@pytest.fixture(autouse=True)
def _compiled_on():
    assert compiled.numba_installed()
    with use_compiled(True):
        assert compiled.rounding("f64_nearest", np.zeros(compiled.ROUNDING_MIN_SIZE)) is not None
        yield


@pytest.fixture
def calls(monkeypatch):
    """How often each float64 loop was called (the compiled path's table, counting)."""
    seen = {}
    table = compiled.kernels().roundings
    for name in _casts64.ROUNDINGS64:
        fn = table[name]
        monkeypatch.setitem(table, name, lambda *a, _fn=fn, _n=name: seen.update({_n: seen.get(_n, 0) + 1}) or _fn(*a))
    return seen


@pytest.mark.parametrize("saturate", [False, True], ids=["ieee", "saturate"])
@pytest.mark.parametrize("name", FORMATS)
def test_compiled_cast_is_the_numpy_paths_bits(name, saturate, calls):
    """fpsim.cast to nearest from float64: the compiled loop gives the numpy path's bits (its dtype
    and shape) on every input class, NaN payloads, -0, overflow and saturation included."""
    x = _inputs64(name)
    r0, r1 = both(lambda v: cast(v, name, saturate=saturate), x)
    assert calls == {"f64_nearest": 1}
    bad = np.flatnonzero(bits(r0) != bits(r1))
    assert identical(r1, r0), (len(bad), x[bad[:5]], bits(r0)[bad[:5]], bits(r1)[bad[:5]])


def test_float16_is_numpys_float64_cast(calls):
    """float64 -> float16 on the compiled path (fpsim.cast and kernels.f32_to_f16) is numpy's own
    float64 -> float16 cast, which is correct, bit for bit (NaN payloads too); small arrays too."""
    x = np.concatenate([_inputs64("float16"), 10.0 ** np.random.default_rng(3).uniform(-10, -3, 2**16)])
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(np.float16)
    for part in (x, x[:1000]):
        r0, r1 = both(lambda v: cast(v, "float16"), part)
        k0, k1 = both(kernels.f32_to_f16, part)
        assert all(identical(r, want[: part.size]) for r in (r0, r1, k0, k1))
    assert calls == {"f64_nearest": 1, "f64_to_f16": 1}  # the small ones keep the numpy path


@pytest.mark.parametrize("name", FORMATS[1:])
def test_float32_values_are_ml_dtypes_cast(name):
    """float64 inputs that float32 holds exactly: the compiled cast is ml_dtypes' float32 cast of them
    (correct: one rounding), NaNs (from float32 NaNs) included."""
    x32 = np.concatenate([_binade_patterns(2**9, seed=5).view(np.float32), _format_edges(name).astype(np.float32)])
    x32 = x32[~np.isnan(x32)] if name in NAN_FREE else x32
    with np.errstate(over="ignore", invalid="ignore"):  # the signalling NaNs are quietened
        want = x32.astype(get_format(name).dtype)
        x = x32.astype(np.float64)
    assert identical(cast(x, name), want)


def _gfloat_format(name: str):
    formats = pytest.importorskip("gfloat.formats")
    return {"float16": formats.format_info_binary16, "bfloat16": formats.format_info_bfloat16,
            "float8_e4m3fn": formats.format_info_ocp_e4m3, "float8_e5m2": formats.format_info_ocp_e5m2,
            "float6_e2m3fn": formats.format_info_ocp_e2m3, "float6_e3m2fn": formats.format_info_ocp_e3m2,
            "float4_e2m1fn": formats.format_info_ocp_e2m1}[name]


@pytest.mark.parametrize("saturate", [False, True], ids=["ieee", "saturate"])
@pytest.mark.parametrize("name", FORMATS)
def test_against_gfloat(name, saturate):
    """The compiled cast's values are gfloat's round_ndarray (ties to even, gfloat's sat for
    ``saturate``; fp6 / fp4 always saturate) on a sample of every input class, -0 included."""
    gfloat = pytest.importorskip("gfloat")
    rng = np.random.default_rng(7)
    x = _inputs64(name)
    x = np.concatenate([rng.choice(x, 2**15, replace=False), _format_edges(name), _specials64()])
    x = x[~np.isnan(x)]
    with np.errstate(over="ignore"):  # gfloat's scaling of the values beyond float64's range of the format
        want = gfloat.round_ndarray(_gfloat_format(name), x, gfloat.RoundMode.TiesToEven, saturate or name in NAN_FREE)
    with np.errstate(over="ignore", invalid="ignore"):
        got = cast(x, name, saturate=saturate).astype(np.float32).astype(np.float64)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(bits(got[~nan]), bits(want[~nan].astype(np.float64)))


def test_layouts_and_sizes(calls):
    """2-D, strided and Fortran-ordered float64 inputs: the numpy path's values and shape; fewer
    values than ROUNDING_MIN_SIZE keep the numpy path (the loop is not called)."""
    x = np.random.default_rng(4).standard_normal((64, 96)) * 300
    for a in (x, x[:, ::3], x.T, np.asfortranarray(x)):
        for name in ("float16", "bfloat16", "float8_e4m3fn", "float4_e2m1fn"):
            r0, r1 = both(lambda v, _n=name: cast(v, _n), a)
            assert identical(r1, r0), (name, a.shape)
    n = calls["f64_nearest"]
    for name in ("float16", "bfloat16", "float8_e5m2"):
        both(lambda v, _n=name: cast(v, _n), x[:10, :100])  # 1000 values
    assert calls["f64_nearest"] == n


def test_the_comparison_finds_a_wrong_rounding(monkeypatch):
    """The bit comparison above counts a loop that rounds twice (by way of float32 to nearest, as
    ml_dtypes does from float64) or loses -0: they differ from the numpy path."""
    x = np.concatenate([_format_edges("float8_e4m3fn"), [-0.0] * 2048])  # the float64 neighbours of the ties
    r0, r1 = both(lambda v: cast(v, "float8_e4m3fn"), x)
    assert identical(r1, r0)
    table = compiled.kernels().roundings
    monkeypatch.setitem(table, "f64_nearest", lambda v, f, s, n: v.astype(np.float32).astype(f.dtype))
    r0, r1 = both(lambda v: cast(v, "float8_e4m3fn"), x)
    assert np.count_nonzero(bits(r1) != bits(r0)) > 100
    monkeypatch.setitem(table, "f64_nearest", lambda v, f, s, n: np.abs(v).astype(f.dtype))
    r0, r1 = both(lambda v: cast(v, "bfloat16"), x)
    assert not identical(r1, r0)


def test_an_element_format_whose_overflow_is_not_a_clamp_is_refused(monkeypatch):
    """f64_narrow's overflow is a clamp of the codes: a narrowing whose +inf code is neither the
    largest value's nor the next is a ValueError, not a wrong result."""
    monkeypatch.setattr(_casts64, "_CODES", {})
    f = get_format("float8_e4m3fn")
    fake = lambda v: np.array([0x01, 0x80, 0x7E], np.uint8).view(f.dtype)  # noqa: E731
    with pytest.raises(ValueError, match="overflow gives code 0x1"):
        _casts64.f64_narrow(np.ones(2048), f, False, fake)


# ----------------------------------------------------------------------------- every float32 pattern

_CHUNK = 2**22


def _exhaustive_check(name: str, patterns: np.ndarray) -> int:
    """How many of the float64 values of float32 ``patterns`` and their half- and quarter-ulp
    neighbours the compiled cast into ``name`` gives other bits for than the reference: numpy's
    float64 cast for float16; for the others ml_dtypes' float32 cast of the float32 values and the
    numpy path for the neighbours."""
    x = _with_offsets(patterns)
    if name in NAN_FREE:
        x = x[~np.isnan(x)]
    with np.errstate(over="ignore", invalid="ignore"):
        with use_compiled(True):
            got = cast(x, name)
        if name == "float16":
            return int(np.count_nonzero(bits(got) != bits(x.astype(np.float16))))
        k = np.count_nonzero(np.isfinite(patterns.view(np.float32)))
        want_exact = x[:k].astype(np.float32).astype(get_format(name).dtype)
        with use_compiled(False):
            want_near = cast(x[k:], name)
    return int(np.count_nonzero(bits(got[:k]) != bits(want_exact)) + np.count_nonzero(bits(got[k:]) != bits(want_near)))


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("FPSIM_EXHAUSTIVE") != "1", reason="all 2**32 float32 patterns: FPSIM_EXHAUSTIVE=1")
@pytest.mark.parametrize("name", FORMATS)
def test_every_float32_pattern(name):
    bad = 0
    for start in range(0, 2**32, _CHUNK):
        bad += _exhaustive_check(name, np.arange(start, start + _CHUNK, dtype=np.uint32))
    assert bad == 0, f"{bad} float64 values round differently into {name}"


def test_the_exhaustive_check_finds_a_wrong_rounding(monkeypatch):
    """The slow test's comparison, run on two chunks (around 1.125, a tie of e5m2, and float32's
    subnormals), counts a rounding that differs."""
    for start in (0x3F900000 - 2**13, 0x80000000):
        p = np.arange(start, start + 2**14, dtype=np.uint32)
        assert all(_exhaustive_check(name, p) == 0 for name in FORMATS)
    p = np.arange(0x3F900000 - 2**13, 0x3F900000 + 2**13, dtype=np.uint32)
    monkeypatch.setitem(compiled.kernels().roundings, "f64_nearest",
                        lambda v, f, s, n: v.astype(np.float32).astype(f.dtype))
    assert _exhaustive_check("float8_e5m2", p) > 0
