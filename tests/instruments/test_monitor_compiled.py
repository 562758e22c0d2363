"""The monitor's compiled count (fpsim/numerics/compiled/_counts.py, used by ``monitor._count_rounding``)
against counts computed here in float64 from the libraries' widenings, and against the numpy path's
counts: every float16 / bfloat16 bit pattern (and every byte of the fp8 / fp4 formats) stored from
its own value, from values one float32 ulp off it, from arbitrary float32 patterns (NaNs, infs,
values past the overflow threshold); every rounding mode's and saturation's real results; a
monitored training step's whole table.  Skipped where numba is not installed."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

pytest.importorskip("numba")

import fpsim  # noqa: E402
from fpsim.formats import cast, get_format  # noqa: E402
from fpsim.numerics import compiled  # noqa: E402
from fpsim.numerics.compiled import use_compiled  # noqa: E402

mon = importlib.import_module("fpsim.monitor")  # the module: fpsim.monitor is also the function
FORMATS = ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "float4_e2m1fn")


def _reference(fmt, x: np.ndarray, stored: np.ndarray) -> list[int]:
    """The COUNTERS in float64 from the library's widening of the stored values (the definitions of
    monitor.py's docstring, written out again)."""
    with np.errstate(invalid="ignore"):
        r = stored.astype(np.float32).astype(np.float64)
    v = x.astype(np.float64)
    a, nan_r, nan_x = np.abs(r), np.isnan(r), np.isnan(v)
    fin_x = np.isfinite(v)
    thr = float(fmt.overflow_threshold)
    beyond = np.abs(v) >= thr if fmt.has_inf else np.abs(v) > thr
    counts = [(r != v) & ~(nan_r & nan_x), (a == 0) & (v != 0), (a > 0) & (a < fmt.tiny),
              fin_x & (~np.isfinite(r) | ((a == fmt.max) & beyond)), np.isinf(r), nan_r, nan_x]
    return [int(x.size), *(int(np.count_nonzero(c)) for c in counts)]


def _both(fmt, x, stored, rounding: bool = True):
    """The monitor's counts of one rounding on the numpy path and on the compiled path.  Where
    ``stored`` is no rounding of ``x`` (not ``rounding``: a pair made up), the numpy path's full
    count (its short count reads the stored values as x's rounding: a value of the format stores
    itself, a zero stores zero)."""
    with use_compiled(False):
        c0 = mon._count_rounding(fmt, x, stored, np) if rounding else _full(fmt, x, stored)
    with use_compiled(True):
        c1 = mon._compiled_counts(fmt, x, stored)  # the compiled count itself (bfloat16 asks it second)
        assert c1 == mon._count_rounding(fmt, x, stored, np) or not rounding
    return c0, c1


def _full(fmt, x, stored) -> list[int]:
    n, events = mon._event_counts(fmt, x, stored, np)
    return [n, *events.tolist()]


def _patterns(fmt) -> np.ndarray:
    """Every bit pattern of the format's storage, as its dtype (twice over: above the size threshold)."""
    n = 2 ** (8 * fmt.dtype.itemsize)
    codes = np.arange(n, dtype=np.uint32).astype(np.uint8 if n == 256 else np.uint16)
    return np.tile(codes, max(1, 2 * compiled.ROUNDING_MIN_SIZE // n)).view(fmt.dtype)


@pytest.mark.parametrize("name", FORMATS)
def test_every_stored_pattern_from_its_value_and_its_neighbours(name):
    fmt = get_format(name)
    stored = _patterns(fmt)
    with np.errstate(invalid="ignore"):
        exact = stored.astype(np.float32)
        up, down = np.nextafter(exact, np.float32(np.inf)), np.nextafter(exact, np.float32(-np.inf))
    finite = np.isfinite(exact) & (np.abs(exact) < fmt.max)  # the compiled count's loop without specials
    for x, rounding in ((exact, True), (up, True), (down, True), (-exact, False), (np.zeros_like(exact), False)):
        c0, c1 = _both(fmt, x, stored, rounding)
        assert c1 == c0 == _reference(fmt, x, stored)
        x, st = np.tile(x[finite], 4), np.tile(stored[finite], 4)
        c0, c1 = _both(fmt, x, st, rounding)
        assert c1 == c0 == _reference(fmt, x, st)


@pytest.mark.parametrize("name", FORMATS)
def test_every_stored_pattern_from_arbitrary_float32(name):
    """Pairs no rounding makes (an inf stored from 1.0, a NaN from a NaN, max from past the
    threshold ...): the counts are still the tests', value by value, on both paths."""
    fmt = get_format(name)
    stored = _patterns(fmt)
    rng = np.random.default_rng(7)
    thr = np.float32(fmt.overflow_threshold)
    special = np.float32([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, thr, -thr, np.nextafter(thr, np.float32(0)),
                          fmt.max, fmt.tiny, fmt.smallest_subnormal])
    for x in (rng.integers(0, 2**32, stored.size, dtype=np.uint64).astype(np.uint32).view(np.float32),
              rng.choice(special, stored.size)):
        c0, c1 = _both(fmt, x, stored, rounding=False)
        assert c1 == c0 == _reference(fmt, x, stored)


def _values(fmt, rng, n: int) -> np.ndarray:
    lo, hi = np.log2(fmt.smallest_subnormal) - 4, np.log2(fmt.max) + 0.7
    with np.errstate(over="ignore"):
        x = (2.0 ** rng.uniform(lo, hi, n) * rng.choice([-1.0, 1.0], n)).astype(np.float32)
    x[rng.random(n) < 0.05] = 0.0
    x[:6] = [np.inf, -np.inf, np.float32(fmt.max), -np.float32(fmt.tiny), -0.0, np.float32(fmt.overflow_threshold)]
    if fmt.has_nan:
        x[6:9] = np.nan
    return x


@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("mode", ["nearest", "toward_zero", "toward_positive", "stochastic", "saturate"])
def test_real_roundings_in_every_mode(name, mode):
    fmt = get_format(name)
    rng = np.random.default_rng(len(name) + len(mode))
    for n in (7 * compiled.ROUNDING_MIN_SIZE, 70_007):
        for x in (_values(fmt, rng, n), np.clip(_values(fmt, rng, n), -fmt.tiny * 2, fmt.tiny * 2)):  # specials, none
            with np.errstate(over="ignore", invalid="ignore"):
                stored = (cast(x, fmt, saturate=True) if mode == "saturate"
                          else cast(x, fmt, mode, seed=1) if mode == "stochastic" else cast(x, fmt, mode))
            for xs, ss in ((x, stored), (x.reshape(7, -1)[:, ::2], stored.reshape(7, -1)[:, ::2])):  # strided too
                c0, c1 = _both(fmt, xs, ss)
                assert c1 == c0 == _reference(fmt, xs, ss)


def test_small_and_other_storage_keep_the_numpy_count(monkeypatch):
    """Into float32 and with stored values of another shape the compiled count steps aside (None);
    below the size threshold too while the kernels are not loaded (a few numbers import no numba),
    and once they are (a step that used the compiled path) it counts them, the same counts."""
    f16, f32 = get_format("float16"), get_format("float32")
    x = np.linspace(-3, 3, compiled.ROUNDING_MIN_SIZE, dtype=np.float32)
    x[:3] = [1.3 * 2.0**-20, -(2.0**-30), 65519.0]  # a subnormal, an underflow, max from below the threshold
    with use_compiled(True):
        assert compiled.kernels() is not None
        assert mon._compiled_counts(f32, x, x) is None
        assert mon._compiled_counts(f16, x.reshape(2, -1), cast(x, f16)) is None
        assert mon._compiled_counts(f16, x, cast(x, f16)) == _reference(f16, x, cast(x, f16))
        for k in (1, 5, 300):  # the biases, the loss of a step
            assert mon._compiled_counts(f16, x[:k], cast(x[:k], f16)) == _reference(f16, x[:k], cast(x[:k], f16))
        assert mon._compiled_counts(f16, x[:3], cast(x[:3], f16)) == [3, 3, 1, 1, 0, 0, 0, 0]
        monkeypatch.setitem(compiled._STATE, "kernels", None)
        assert mon._compiled_counts(f16, x[:-1], cast(x[:-1], f16)) is None


@pytest.mark.parametrize("name", ("float16", "bfloat16"))
def test_exact_results_counted_on_both_paths(name):
    """relu's count (``_exact16``: the subnormals of stored patterns, None where one is inf or NaN)
    on every pattern, on both paths, against the float64 values."""
    fmt = get_format(name)
    stored = _patterns(fmt)
    with np.errstate(invalid="ignore"):
        a = np.abs(stored.astype(np.float64))
    ok = np.isfinite(a)
    sub = int(np.count_nonzero((a[ok] > 0) & (a[ok] < fmt.tiny)))
    assert sub == 2 * (2**fmt.mantissa_bits - 1) * (stored.size // 2**16)  # both signs, every tile
    for on in (False, True):
        with use_compiled(on):
            assert (compiled.count("stored_subnormal_count", stored) is None) is not on  # the path asked for
            assert mon._exact16(fmt, stored[ok]) == [int(ok.sum()), 0, 0, sub, 0, 0, 0, 0]
            assert mon._exact16(fmt, stored) is None
            assert mon._exact16(fmt, stored[ok][: ok.sum() // 2 * 2].reshape(-1, 2).T) == \
                [int(ok.sum()) // 2 * 2, 0, 0, sub, 0, 0, 0, 0]


def test_a_monitored_training_step_counts_the_same_on_both_paths():
    """A fp16 MLP's forward, backward and SGD step inside fpsim.monitor(), values that become
    subnormal and overflow: the same table on both paths."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((256, 64)) * 10.0 ** rng.uniform(-9, 4.5, (256, 64))).astype(np.float32)
    tables = []
    for on in (False, True):
        model = fpsim.nn.MLP([64, 128, 64], fmt="float16", seed=0)
        opt = fpsim.optim.SGD(model.parameters(), lr=0.01)
        with use_compiled(on), np.errstate(all="ignore"), fpsim.monitor() as m:
            loss = ((model(fpsim.tensor(x, "float16")) - 1.0) ** 2).mean()
            loss.backward()
            opt.step()
        tables.append(m.counts)
    assert tables[0] == tables[1]
    assert sum(c[3] for c in tables[1].values()) > 0 and sum(c[4] for c in tables[1].values()) > 0  # subnormals, overflows


@pytest.mark.parametrize("name", ("float16", "bfloat16", "float8_e4m3fn", "float32"))
def test_float32_results_counted_unrounded_on_both_paths(name):
    """A "rounding" of float32 values into float32 storage (unscaling, an update), counted in one
    compiled pass: the subnormals of the format, or a step aside (None) where a value is inf or NaN."""
    fmt = get_format(name)
    rng = np.random.default_rng(3)
    x = rng.integers(0, 2**32, 3 * compiled.ROUNDING_MIN_SIZE, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = x[np.isfinite(x)] * np.float32(2.0**-100)
    x[:4] = [0.0, -0.0, fmt.tiny, -np.nextafter(np.float32(fmt.tiny), np.float32(0))]
    sub = int(np.count_nonzero((np.abs(x.astype(np.float64)) < fmt.tiny) & (x != 0)))
    for on in (False, True):
        with use_compiled(on):
            assert mon._unrounded_counts(fmt, x, x) == [x.size, 0, 0, sub, 0, 0, 0, 0]
            y = x.copy()
            y[-1] = np.inf
            assert mon._unrounded_counts(fmt, y, y) is None
