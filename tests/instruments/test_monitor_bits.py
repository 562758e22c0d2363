"""The monitor's counts from float16 / bfloat16 bit patterns (``monitor._counts16``) and from
float32 patterns (``monitor._unrounded_counts``), held against counts computed here in float64
from ml_dtypes' casts - every rounding mode's stored values, values around tiny, the subnormal
range, zeros of both signs."""

from __future__ import annotations

import importlib

import ml_dtypes
import numpy as np
import pytest

from fpsim.formats import get_format

mon = importlib.import_module("fpsim.monitor")  # the module: fpsim.monitor is also the function
DTYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def _reference(fmt, x, stored) -> list[int]:
    """COUNTERS of a finite rounding below max, from float64 values."""
    r = stored.astype(np.float64)
    x64 = x.astype(np.float64)
    tiny = float(fmt.tiny)
    inexact = int(np.sum(r != x64))
    under = int(np.sum((r == 0) & (x64 != 0)))
    sub = int(np.sum((np.abs(r) < tiny) & (r != 0)))
    return [x.size, inexact, under, sub, 0, 0, 0, 0]


def _values(fmt, rng, n):
    """Magnitudes from below the smallest subnormal to near max, with exact values of the
    format, values one float32 ulp off them, zeros and -0."""
    lo, hi = np.log2(fmt.smallest_subnormal) - 4, np.log2(fmt.max) - 1
    x = (2.0 ** rng.uniform(lo, hi, n) * rng.choice([-1.0, 1.0], n)).astype(np.float32)
    exact = x.astype(DTYPES[fmt.name]).astype(np.float32)
    x[: n // 4] = exact[: n // 4]  # on the grid
    nudged = np.nextafter(exact[n // 4 : n // 2], np.float32(np.inf))
    x[n // 4 : n // 2] = nudged  # one ulp above a value of the format
    x[rng.random(n) < 0.05] = 0.0
    x[rng.random(n) < 0.05] = -0.0
    tiny = np.float32(fmt.tiny)
    x[:8] = [tiny, -tiny, np.nextafter(tiny, np.float32(0)), np.nextafter(tiny, np.float32(1)),
             fmt.smallest_subnormal, fmt.smallest_subnormal / 2, 3 * fmt.smallest_subnormal / 2, 0.0]
    return x


def _stored(fmt, x, mode, rng):
    dt = DTYPES[fmt.name]
    if mode == "nearest":
        return x.astype(dt)
    # toward zero / away from zero / stochastic: one of the two neighbours on the grid, chosen here
    down = x.astype(dt)
    d64 = down.astype(np.float64)
    step = np.nextafter(down, np.where(d64 < x, np.inf, -np.inf).astype(dt)).astype(np.float64)
    lo_mag = np.where(np.abs(d64) <= np.abs(step), d64, step)
    hi_mag = np.where(np.abs(d64) <= np.abs(step), step, d64)
    pick = {"zero": np.zeros(x.size, bool), "away": np.ones(x.size, bool),
            "stochastic": rng.random(x.size) < 0.5}[mode]
    out = np.where(d64 == x, d64, np.where(pick, hi_mag, lo_mag))
    out = np.where(np.abs(out) > fmt.max, np.copysign(lo_mag, out), out)  # stay below max
    return out.astype(dt)


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
@pytest.mark.parametrize("mode", ["nearest", "zero", "away", "stochastic"])
@pytest.mark.parametrize("n", [1, 7, 3000, mon._CHUNK + 5, 2 * mon._CHUNK + 4099])  # one, two and three chunks
def test_counts16_match_float64_counts(name, mode, n):
    fmt = get_format(name)
    rng = np.random.default_rng(n + len(mode))
    x = _values(fmt, rng, n) if n >= 8 else _values(fmt, rng, 8)[:n]
    stored = _stored(fmt, x, mode, rng)
    if np.max(np.abs(stored.astype(np.float64))) >= fmt.max:
        stored = np.where(np.abs(stored.astype(np.float64)) >= fmt.max, 0.0, stored).astype(DTYPES[name])
        x = np.where(stored == 0, 0.0, x).astype(np.float32)
    assert mon._counts16(fmt, x, stored) == _reference(fmt, x, stored)
    assert mon._finite_counts(fmt, x.reshape(1, -1), stored.reshape(1, -1)) == _reference(fmt, x, stored)


def test_counts16_known_values():
    """float16: 2**-24 * 1.5 lies between two subnormals (its low 13 float32 bits are 0, it is
    still not a float16 value); 2**-25 flushes; 65504 (max) hands the count to the full one."""
    fmt = get_format("float16")
    x = np.array([2.0**-24 * 1.5, 2.0**-25, 1.0, 1.0 + 2.0**-12, 2.0**-14, -0.0], np.float32)
    stored = x.astype(np.float16)
    assert stored.astype(np.float64).tolist() == [2.0**-23, 0.0, 1.0, 1.0, 2.0**-14, -0.0]
    assert mon._counts16(fmt, x, stored) == [6, 3, 1, 1, 0, 0, 0, 0]
    for bad in (65504.0, np.inf, np.nan):
        y = np.array([1.0, bad], np.float32)
        assert mon._counts16(fmt, y, y.astype(np.float16)) is None


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16", "float8_e4m3fn"])
def test_unrounded_counts_match_float64_counts(name):
    fmt = get_format(name)
    rng = np.random.default_rng(3)
    n = 3 * mon._CHUNK + 5  # several chunks of the scratch
    x = (2.0 ** rng.uniform(-150, 20, n) * rng.choice([-1.0, 1.0], n)).astype(np.float32)
    x[::7] = 0.0
    x[1::11] = -0.0
    a = np.abs(x.astype(np.float64))
    sub = int(np.sum((a < fmt.tiny) & (a != 0)))
    assert sub > 0
    assert mon._unrounded_counts(fmt, x, x) == [n, 0, 0, sub, 0, 0, 0, 0]
    head = x[:5]
    assert mon._unrounded_counts(fmt, head, head) == [5, 0, 0, int(np.sum((a[:5] < fmt.tiny) & (a[:5] != 0))),
                                                      0, 0, 0, 0]
    big = np.abs(x) + np.float32(fmt.tiny)
    assert mon._unrounded_counts(fmt, big, big) == [n, 0, 0, 0, 0, 0, 0, 0]
    for bad in (np.inf, -np.inf, np.nan):
        for pos in (0, n // 2, n):
            y = np.insert(x, pos, np.float32(bad))
            assert mon._unrounded_counts(fmt, y, y) is None


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_exact_results_counted_on_patterns(name):
    """relu's event carries no exact value: its subnormals are counted from the stored patterns,
    and an inf or NaN among them hands the count to the full one."""
    fmt = get_format(name)
    rng = np.random.default_rng(9)
    x = _values(fmt, rng, 40000).astype(DTYPES[name])
    a = np.abs(x.astype(np.float64))
    sub = int(np.sum((a < fmt.tiny) & (a != 0)))
    assert sub > 0
    assert mon._exact16(fmt, x) == [40000, 0, 0, sub, 0, 0, 0, 0]
    assert mon._exact16(fmt, x.reshape(200, 200).T) == [40000, 0, 0, sub, 0, 0, 0, 0]
    for bad in (np.inf, -np.inf, np.nan):
        assert mon._exact16(fmt, np.append(x, np.array(bad, DTYPES[name]))) is None
    assert mon._exact16(get_format("float32"), x.astype(np.float32)) is None


def test_a_float32_scalar_stored_as_a_new_object_takes_the_short_count():
    """A 0-d float32 result comes back from the engine's float32 "rounding" as a new numpy
    scalar: the same bits, counted as unrounded (subnormal included), not by the full count."""
    f = get_format("float32")
    for v, sub in ((np.float32(1.5), 0), (np.float32(2.0**-130), 1), (np.float32(-0.0), 0)):
        assert mon._finite_counts(f, v, v.astype(np.float32, copy=False)) == [1, 0, 0, sub, 0, 0, 0, 0]
    assert mon._finite_counts(f, np.float32(1.0), np.float32(0.0)) is None  # stored apart: the full count
    assert mon._finite_counts(f, np.float32(np.nan), np.float32(np.nan)) is None
