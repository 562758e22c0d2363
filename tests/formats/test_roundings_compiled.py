"""The compiled element roundings (fpsim/numerics/compiled/_round.py) against the numpy path of
fpsim/formats/kernels.py and fp8kernels.py and against the libraries' own casts (numpy's
float32 -> float16, ml_dtypes' float32 -> bfloat16 / fp8 / fp6 / fp4 and their widenings).

Every value of each narrow format, every midpoint between neighbouring values and its float32
neighbours, the special values (+-0, +-inf, NaNs with several payloads, the overflow and underflow
edges, float32 subnormals) and 2**20 random float32 bit patterns, on both paths: the same bits,
the same dtype and shape.  The whole float32 range (2**32 patterns, chunked) is a slow test,
skipped unless FPSIM_EXHAUSTIVE=1 asks for it.  Skipped where numba is not installed.
"""

from __future__ import annotations

import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
from helpers import bits, identical

pytest.importorskip("numba")

from fpsim.backend import BACKENDS  # noqa: E402
from fpsim.formats import cast, fp8kernels, get_format, kernels, modekernels  # noqa: E402
from fpsim.formats import round_to as fpsim_round_to  # noqa: E402
from fpsim.formats.modes import ROUNDING_MODES, round_magnitudes  # noqa: E402
from fpsim.numerics import compiled  # noqa: E402
from fpsim.numerics.compiled import use_compiled  # noqa: E402

F32_MAX = np.float32(np.finfo(np.float32).max)
NARROW = ("float8_e4m3fn", "float8_e5m2", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn")
NAN_FREE = ("float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn")  # no NaN: a NaN input is refused
NANS = np.array([0x7FC00000, 0x7F800001, 0x7FBFFFFF, 0x7FFFFFFF, 0x7FC02000, 0x7F802000, 0x7FE00000],
                np.uint32).view(np.float32)


def _values(name: str) -> np.ndarray:
    """Every value of a one- or two-byte format, widened by the library's own cast (float32)."""
    dt = np.dtype(np.float16) if name == "float16" else get_format(name).dtype
    n = 2 ** (8 * dt.itemsize)
    codes = np.arange(n, dtype=np.uint32).astype(np.uint8 if n == 256 else np.uint16)
    with np.errstate(invalid="ignore"):
        return codes.view(dt).astype(np.float32)


def _edges(name: str) -> np.ndarray:
    """The format's finite values, the midpoints between neighbours (the ties) and the one above
    max, and the float32 neighbours of each, both signs."""
    v = np.unique(np.abs(_values(name)[np.isfinite(_values(name))])).astype(np.float64)
    mids = np.concatenate([(v[:-1] + v[1:]) / 2, [v[-1] + (v[-1] - v[-2]) / 2]]).astype(np.float32)  # exact
    base = np.concatenate([v.astype(np.float32), mids])
    near = np.concatenate([base, np.nextafter(base, np.float32(np.inf)), np.nextafter(base, np.float32(0))])
    return np.concatenate([near, -near])


def _specials(nans: bool = True) -> np.ndarray:
    s = np.float32([0.0, np.inf, F32_MAX, 2.0**-149, 2.0**-126, 3 * 2.0**-140, 2.0**-126 * (1 - 2.0**-20), 1e-45,
                    65504, 65519.99, 65520, 65536, 1e30, 2.0**-25, 2.0**-24, 2.0**-14, 448, 464, 465, 57344, 61440])
    s = np.concatenate([s, -s])
    return np.concatenate([s, NANS, -NANS]) if nans else s


def _random_patterns(n: int = 2**20, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)


def _inputs(name: str, nans: bool = True) -> np.ndarray:
    x = np.concatenate([_edges(name), _specials(nans), _random_patterns()])
    return x if nans else x[~np.isnan(x)]


def both(f, *args):
    """f's results on the numpy path and on the compiled path."""
    with use_compiled(False):
        r0 = f(*args)
    with use_compiled(True):
        r1 = f(*args)
    return r0, r1


def _quiet(f):
    def run(*args):
        with np.errstate(over="ignore", invalid="ignore"):
            return f(*args)
    return run


@pytest.fixture(autouse=True)
def _compiled_on():
    assert compiled.numba_installed()
    with use_compiled(True):
        assert compiled.rounding("f32_to_f16", np.zeros(compiled.ROUNDING_MIN_SIZE, np.float32)) is not None
        yield


def test_float16_rounding_is_numpys_cast_on_both_paths():
    x = _inputs("float16")
    want = _quiet(x.astype)(np.float16)
    r0, r1 = both(kernels.f32_to_f16, x)
    assert identical(r0, want) and identical(r1, want)


def test_snap_f16_is_the_float16_rounding_kept_in_float32():
    x = _inputs("float16")
    r0, r1 = both(kernels.snap_f16, x)
    assert identical(r1, r0)  # NaN too: the same float32 payload
    nan = np.isnan(x)
    want = _quiet(x.astype)(np.float16).astype(np.float32)
    assert np.array_equal(bits(r1)[~nan], bits(want)[~nan]) and np.isnan(r1[nan]).all()


def test_bfloat16_rounding_is_ml_dtypes_cast_on_both_paths():
    x = np.concatenate([_inputs("bfloat16"), (np.arange(2**16, dtype=np.uint32) << 16 | 0x8000).view(np.float32)])
    want = _quiet(x.astype)(ml_dtypes.bfloat16)
    r0, r1 = both(_quiet(kernels.f32_to_bf16), x)
    assert identical(r0, want) and identical(r1, want)
    with use_compiled(True):  # the engine's rounding goes through it
        assert identical(_quiet(BACKENDS["numpy"].round)(x, get_format("bfloat16")), want)


@pytest.mark.parametrize("saturate", [False, True], ids=["ieee", "saturate"])
@pytest.mark.parametrize("name", NARROW)
def test_narrow_casts_are_ml_dtypes_cast_on_both_paths(name, saturate):
    f = get_format(name)
    x = _inputs(name, nans=name not in NAN_FREE)
    r0, r1 = both(kernels.narrow_cast, x, f, saturate)
    assert identical(r1, r0)
    want = _quiet(x.astype)(f.dtype)
    if saturate:
        big = ~np.isfinite(want.astype(np.float32)) & ~np.isnan(x)
        want[big] = np.copysign(np.float32(f.max), x[big]).astype(f.dtype)
    nan = np.isnan(x)  # a NaN's fp8 pattern: the table's (the NaN of its bfloat16 pattern)
    assert np.array_equal(bits(r1)[~nan], bits(want)[~nan])
    assert np.isnan(r1[nan].astype(np.float32)).all()


def test_bf16_odd_patterns_on_both_paths():
    x = _inputs("bfloat16")
    r0, r1 = both(kernels.bf16_odd_patterns, x)
    b = x.view(np.uint32)
    want = (b >> 16) | ((b & 0xFFFF) != 0)
    assert identical(r0, want) and identical(r1, want)


def test_widenings_are_the_libraries_casts_on_both_paths():
    h = np.tile(np.arange(2**16, dtype=np.uint32).astype(np.uint16), 2).view(np.float16)
    r0, r1 = both(kernels.f16_to_f32, h)
    assert identical(r0, h.astype(np.float32)) and identical(r1, r0)
    for name in (*NARROW, "float8_e8m0fnu"):
        codes = np.tile(np.arange(256, dtype=np.uint32).astype(np.uint8), 8).view(get_format(name).dtype)
        r0, r1 = both(kernels.fp8_to_f32, codes)
        want = _quiet(codes.astype)(np.float32)
        assert identical(r0, want) and identical(r1, want), name


@pytest.mark.parametrize("scale", [1.0, 2.0**-24, 0.7, 3.0, 2.0**15, 2.0**16, 2.0**100, 0.0])
def test_unscaling_widening_is_the_widening_times_the_scale(scale):
    h = np.tile(np.arange(2**16, dtype=np.uint32).astype(np.uint16), 2).view(np.float16)
    with np.errstate(over="ignore", invalid="ignore"):
        want = h.astype(np.float32) * np.float32(scale)
    (v0, s0), (v1, s1) = both(kernels.f16_to_f32_scaled, h, scale)
    assert identical(v0, want) and identical(v1, want) and s0 is s1 is True
    finite = h[np.isfinite(h)]
    (_, s0), (_, s1) = both(kernels.f16_to_f32_scaled, finite, scale)
    assert s0 is s1 is False


@pytest.mark.parametrize("saturate", [True, False])
@pytest.mark.parametrize("scale", [1.0, 2.0**-12, 2.0**9, 0.7, 2.0**-100])
@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2"])
def test_scaled_fp8_on_both_paths(name, scale, saturate):
    f = get_format(name)
    x = _inputs(name, nans=False)
    if not saturate:  # the caller's promise: no |x * scale| beyond max
        x = x[np.abs(x.astype(np.float64) * np.float32(scale)) <= f.max]
    r0, r1 = both(fp8kernels.scaled_fp8, x, scale, f, saturate)
    assert identical(r1[0], r0[0]) and identical(r1[1], r0[1]) and r0[2] == r1[2]
    with np.errstate(over="ignore"):
        y = np.clip(x * np.float32(scale), -np.float32(f.max), np.float32(f.max))
    want = y.astype(f.dtype)
    assert identical(r1[0], want) and identical(r1[1], want.astype(np.float32))
    assert r1[2] == np.count_nonzero((want.astype(np.float32) == 0) & (x != 0))
    (c0, v0, n0), (c1, v1, n1) = both(lambda: fp8kernels.scaled_fp8(x, scale, f, saturate, codes=False))
    assert c0 is c1 is None and identical(v1, v0) and n0 == n1 == r1[2]


MODE_FORMATS = ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "p3109_k8p4se", "p3109_k8p3ue",
                "float6_e3m2fn", "float4_e2m1fn")


def _srs(mode: str, n: int):
    """The stochastic-rounding settings a mode is tried with: exact SR (None) and k random bits in
    every variant, in several integer dtypes; the other modes: None."""
    if mode != "stochastic":
        return [None]
    dtypes = {4: np.uint8, 8: np.int64, 12: np.uint16, 17: np.uint32, 24: np.uint32}  # the kernels take each as it is
    bits = {k: np.random.default_rng(k).integers(0, 2**k, n).astype(dt) for k, dt in dtypes.items()}
    return [None] + [(k, bits[k], v) for k in bits for v in ("rne", "rto", "fast", "fastest")]


@pytest.mark.parametrize("mode", ROUNDING_MODES)
@pytest.mark.parametrize("name", MODE_FORMATS)
def test_rounding_modes_on_both_paths(name, mode):
    """``round_magnitudes_f32`` in every mode (exact SR drawing from the same generator, few-bit SR
    with given bits in every variant): the same bits on both paths, and, deterministic modes on
    finite values, the float64 reference's magnitudes."""
    f = get_format(name)
    x = np.concatenate([_edges(name if name in ("float16", "bfloat16") or f.is_ml_dtype else "float8_e4m3fn"),
                        _specials(), _random_patterns(2**16, seed=1)])
    for sr in _srs(mode, x.size):
        if not modekernels.supports(f, mode, sr):
            continue
        r0, r1 = both(_quiet(lambda sr=sr: modekernels.round_magnitudes_f32(x, f, mode, sr, np.random.default_rng(9))))
        assert identical(r1, r0), (mode, None if sr is None else sr[::2])
        if mode != "stochastic":
            fin = np.abs(x) <= f.max  # beyond it float32's result may overflow where float64's does not
            fin &= f.signed | (x >= 0)  # an unsigned format's negative values: NaN whatever the magnitude
            want = round_magnitudes(x[fin].astype(np.float64), f, mode)
            assert np.array_equal(r1[fin].astype(np.float64), want), mode
    (c0, c1) = both(_quiet(lambda: cast(x[~np.isnan(x)], f, mode, saturate=True, seed=4)))
    assert identical(c1, c0)


def _rng_values(shape, seed=3):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 10.0 ** rng.uniform(-9, 5, shape)).astype(np.float32)


def test_layouts_and_sizes_around_the_threshold():
    """Non-contiguous, 2-D, 0-d, read-only and broadcast arrays, and sizes either side of
    ROUNDING_MIN_SIZE (and bfloat16's 4096): the same bits and shapes on both paths (the smaller
    ones on the numpy path either way)."""
    m = _rng_values((300, 400))
    n0 = compiled.ROUNDING_MIN_SIZE
    frozen = m[:50].copy()
    frozen.setflags(write=False)
    arrays = [m, m.T, m[::2, ::3], m[:, 1:], m[0, :7], np.float32(3e-8), np.array(-2.5, np.float32), frozen,
              np.broadcast_to(m[0, :1], (5000,)),
              *(m.reshape(-1)[:n] for n in (n0 - 1, n0, n0 + 1, 4095, 4096, 2**16 + 3))]
    e4, e2 = get_format("float8_e4m3fn"), get_format("float4_e2m1fn")
    fns = [kernels.f32_to_f16, kernels.snap_f16, kernels.f32_to_bf16, kernels.bf16_odd_patterns,
           lambda a: kernels.narrow_cast(a, e4, True), lambda a: kernels.narrow_cast(a, e2, True),
           lambda a: kernels.f16_to_f32(kernels.f32_to_f16(a)), lambda a: kernels.fp8_to_f32(kernels.f32_to_fp8(a, e4)),
           lambda a: kernels.f16_to_f32_scaled(kernels.f32_to_f16(a), 2.0**-7)[0],
           lambda a: fp8kernels.scaled_fp8(a, 2.0**-3, e4)[0], lambda a: fp8kernels.scaled_fp8(a, 0.3, e4)[1]]
    for a in arrays:
        for i, fn in enumerate(fns):
            r0, r1 = both(_quiet(fn), a)
            assert identical(np.asarray(r1), np.asarray(r0)), (i, np.shape(a))



def _library_cast(x32: np.ndarray, name: str, saturate: bool) -> np.ndarray:
    """numpy's (float16) or ml_dtypes' own cast of float32 x, overflow and +-inf clamped to +-max
    where ``saturate`` (NaN kept)."""
    f = get_format(name)
    want = _quiet(x32.astype)(f.dtype)
    if saturate:
        big = ~np.isfinite(want.astype(np.float32)) & ~np.isnan(x32)
        want[big] = np.copysign(np.float32(f.max), x32[big]).astype(f.dtype)
    return want


ALL_NANS = np.concatenate([0x7F800000 | np.arange(1, 2**23, dtype=np.uint32),
                           0xFF800000 | np.arange(1, 2**23, dtype=np.uint32)]).view(np.float32)


@pytest.mark.parametrize("saturate", [False, True], ids=["ieee", "saturate"])
@pytest.mark.parametrize("name", ("float16", "bfloat16", *NARROW))
def test_cast_to_nearest_is_the_librarys_cast_on_both_paths(name, saturate):
    """fpsim.cast to nearest from float32 (through the kernels: f32_to_f16, f32_to_bf16, the
    narrowing tables) is numpy's / ml_dtypes' cast bit for bit, on both paths, small arrays and
    large; from float64 holding those values too."""
    x = _inputs(name, nans=name not in NAN_FREE)
    x64 = x.astype(np.float64)  # the same values (a signalling NaN quietened): numpy rounds float64 to float16
    # correctly, ml_dtypes' float32 cast is the reference for the rest
    for a, want in ((x, _library_cast(x, name, saturate)),
                    (x64, _library_cast(x64 if name == "float16" else x64.astype(np.float32), name, saturate))):
        for part, w in ((a, want), (a[:100], want[:100])):
            r0, r1 = both(lambda v: cast(v, name, saturate=saturate), part)
            assert identical(r0, w) and identical(r1, w), a.dtype


@pytest.mark.parametrize("name", ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"))
def test_cast_keeps_every_nan_patterns_library_bits(name):
    """Every float32 NaN (both signs, all 2**23 - 1 payloads) into float16, bfloat16, e4m3 and e5m2:
    the library's cast's bits on both paths (the fp8 tables go through bfloat16 rounded to odd,
    which keeps only the payload's top bits: the library's fp8 NaN does not depend on the rest)."""
    want = _library_cast(ALL_NANS, name, False)
    r0, r1 = both(lambda v: cast(v, name), ALL_NANS)
    assert identical(r0, want) and identical(r1, want)


def test_cast_from_float64_rounds_once_through_the_tables():
    """A float64 just above a tie of the narrow format: float32 holds the tie itself, so casting
    by way of float32 to nearest would round twice (down, to even); fpsim.cast rounds it up."""
    for name, tie, up in (("float8_e4m3fn", 1.0625, 1.125), ("float8_e5m2", 1.125, 1.25), ("float4_e2m1fn", 1.25, 1.5),
                          ("float6_e2m3fn", 1.0625, 1.125)):
        x = np.full(5000, tie + 2.0**-40)
        x[::2] *= -1
        r0, r1 = both(lambda v, _name=name: cast(v, _name).astype(np.float32), x)
        want = np.where(x > 0, up, -up).astype(np.float32)
        assert identical(r0, want) and identical(r1, want), name


@pytest.mark.parametrize("name", ("float16", "bfloat16", *NARROW, "float8_e8m0fnu"))
def test_round_to_widens_back_by_the_librarys_cast(name):
    """round_to's widening of the stored values back to the input's float dtype (float16 and the
    one-byte formats by the kernels' widenings) is the library's cast of fpsim.cast's result, on
    both paths, from float32 and float64 input and from a float16 input (which comes back float32)."""
    x = _inputs(name, nans=name not in NAN_FREE)
    if name == "float8_e8m0fnu":
        x = np.abs(x)
    for a, dt in ((x, np.float32), (x.astype(np.float64), np.float64), (x[:300], np.float32)):
        want = _quiet(_quiet(cast)(a, name).astype)(dt)
        r0, r1 = both(_quiet(lambda v: fpsim_round_to(v, name)), a)
        assert identical(r0, want) and identical(r1, want), dt
    h = _quiet(x.astype)(np.float16)
    if name not in NAN_FREE or not np.isnan(h).any():
        r0, r1 = both(_quiet(lambda v: fpsim_round_to(v, name)), h)
        want = _quiet(_quiet(cast)(h, name).astype)(np.float32)
        assert identical(r0, want) and identical(r1, want)

def test_engine_runs_are_the_same_on_both_paths(monkeypatch):
    """A few training steps of the reference task under the float16, bfloat16 and fp8 recipes:
    the same losses, scales, flushed and stalled fractions and fp8 scaling state with the
    compiled roundings as without (and the numpy-f32 backend's float16 rounding too); the
    compiled run does call them."""
    from helpers import small_task

    from fpsim.experiments import get_recipe, train

    calls = {}
    table = compiled.kernels().roundings
    for name, fn in list(table.items()):
        monkeypatch.setitem(table, name, lambda *a, _fn=fn, _name=name: calls.update({_name: calls.get(_name, 0) + 1})
                            or _fn(*a))

    keys = ("losses", "scales", "skipped", "act_grad_flushed", "weight_grad_flushed", "stalled", "fp8")
    for recipe, backend in (("fp16-dynamic", None), ("fp16-dynamic", "numpy-f32"), ("bf16-master", None),
                            ("fp8-delayed", None)):
        runs = []
        for on in (False, True):
            with use_compiled(on):
                r = train(small_task(), get_recipe(recipe), 0, steps=4, measure_at="all", backend=backend)
            runs.append({k: getattr(r, k) for k in keys})
        assert runs[0] == runs[1], (recipe, backend)
        assert len(runs[1]["losses"]) == 4
    for name in ("f32_to_f16", "f16_to_f32", "f16_to_f32_scaled", "snap_f16", "f32_to_bf16", "scaled_fp8"):
        assert calls.get(name, 0) > 0, (name, calls)


def _run(code: str, **env) -> str:
    e = {k: v for k, v in os.environ.items() if k not in ("FPSIM_NUMBA", "NUMBA_CACHE_DIR")}
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, check=True).stdout


def test_small_casts_do_not_import_numba_and_fpsim_numba_0_keeps_the_numpy_path():
    small = ("import sys, numpy as np, fpsim; fpsim.cast(np.ones(1000, np.float32), 'float16'); "
             "fpsim.formats.kernels.f32_to_f16(np.ones(1000, np.float32)); print('numba' in sys.modules)")
    assert _run(small).split() == ["False"]
    big = ("import sys, numpy as np; from fpsim.formats import kernels; from fpsim.numerics import compiled; "
           "y = kernels.f32_to_f16(np.ones(5000, np.float32)); "
           "print(compiled.enabled(), 'numba' in sys.modules, float(y[0]))")
    assert _run(big).split() == ["True", "True", "1.0"]
    assert _run(big, FPSIM_NUMBA="0").split() == ["False", "False", "1.0"]


# ----------------------------------------------------------------------------- every float32 pattern

EXHAUSTIVE = ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")
_CHUNK = 2**24


def _exhaustive_check(name: str, x: np.ndarray) -> int:
    """How many of float32 patterns x the compiled rounding into ``name`` gives other bits for than
    the library's cast (and, for float16, the numpy path's bit kernels and snap_f16)."""
    with np.errstate(over="ignore", invalid="ignore"):
        if name == "float16":
            want = x.astype(np.float16)
            with use_compiled(True):
                got, snap = kernels.f32_to_f16(x), kernels.snap_f16(x)
            bad = np.count_nonzero(bits(got) != bits(want))
            bad += np.count_nonzero(bits(got) != bits(kernels._f32_to_f16_bits(x)))
            ok = (bits(snap) == bits(want.astype(np.float32))) | (np.isnan(snap) & np.isnan(x))
            return int(bad + np.count_nonzero(~ok))
        if name == "bfloat16":
            with use_compiled(True):
                got = kernels.f32_to_bf16(x)
            return int(np.count_nonzero(bits(got) != bits(x.astype(ml_dtypes.bfloat16))))
        f = get_format(name)
        with use_compiled(True):
            got = kernels.narrow_cast(x, f, False)
        want = x.astype(f.dtype)
        nan = np.isnan(x)
        return int(np.count_nonzero((bits(got) != bits(want)) & ~nan)
                   + np.count_nonzero(~np.isnan(got[nan].astype(np.float32))))


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("FPSIM_EXHAUSTIVE") != "1", reason="all 2**32 float32 patterns: FPSIM_EXHAUSTIVE=1")
@pytest.mark.parametrize("name", EXHAUSTIVE)
def test_every_float32_pattern(name):
    bad = 0
    for start in range(0, 2**32, _CHUNK):
        x = np.arange(start, start + _CHUNK, dtype=np.uint32).view(np.float32)
        bad += _exhaustive_check(name, x)
    assert bad == 0, f"{bad} float32 patterns round differently into {name}"


def test_the_exhaustive_check_finds_a_wrong_rounding(monkeypatch):
    """The slow test's comparison, run on one chunk, counts a rounding that differs."""
    x = np.arange(0x3F800000, 0x3F800000 + 2**16, dtype=np.uint32).view(np.float32)
    assert _exhaustive_check("bfloat16", x) == 0
    monkeypatch.setitem(compiled.kernels().roundings, "f32_to_bf16", lambda a: (a * np.float32(1 + 2**-8)).astype(
        ml_dtypes.bfloat16))
    assert _exhaustive_check("bfloat16", x) > 0
