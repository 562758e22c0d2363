"""The monitor's fast count (finite values below the overflow threshold) gives exactly the
full count's numbers, and steps aside for everything else."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from fpsim.backend import BACKENDS
from fpsim.formats import LOW_FORMATS, cast, get_format

pytestmark = pytest.mark.both_backends  # every test here runs on numpy and numpy-f32 (conftest.py)

mon = importlib.import_module("fpsim.monitor")  # the module: fpsim.monitor is also the function
BE = BACKENDS["numpy"]


def _full(fmt, x, stored):
    n, events = mon._event_counts(fmt, x, stored, np)
    return [n, *events.tolist()]


def _cases(f, rng):
    lo = np.log2(f.smallest_subnormal) - 3
    hi = np.log2(f.max) + 0.6  # some values past max: saturation, overflow
    for n in (1, 7, 1000, 5000):
        mag = 2.0 ** rng.uniform(lo, hi, n)
        with np.errstate(over="ignore"):  # bfloat16: past float32 max, inf
            x = (mag * rng.choice([-1.0, 1.0], n)).astype(np.float32)
        x[rng.random(n) < 0.1] = 0.0
        yield x
        yield np.clip(x, -f.max, f.max).astype(np.float32)  # all finite, below the threshold
    edge = np.array([f.max, -f.max, f.tiny, f.smallest_subnormal / 2, f.smallest_subnormal, 0.0, -0.0],
                    np.float32)
    yield edge
    yield np.concatenate([edge, np.array([np.nan], np.float32)])
    yield np.concatenate([edge, np.array([np.inf], np.float32)])


@pytest.mark.parametrize("name", list(LOW_FORMATS))
def test_fast_count_equals_full_count(name):
    f = get_format(name)
    rng = np.random.default_rng(11)
    used = 0
    for x in _cases(f, rng):
        with np.errstate(all="ignore"):
            stores = [BE.round(x, f), BE.round_saturating(x, f),
                      BE.round(cast(x, f, "stochastic", rng=np.random.default_rng(1)).astype(np.float32), f)]
        for stored in stores:
            fast = mon._finite_counts(f, x, stored)
            full = _full(f, x, stored)
            if fast is not None:
                used += 1
                assert fast == full, (name, x[:8], fast, full)
            with np.errstate(all="ignore"):
                assert mon._count_rounding(f, x, stored, np) == full
    assert used > 0


def test_fast_count_steps_aside():
    f = get_format("float16")
    x = np.array([1.0, np.nan], np.float32)
    assert mon._finite_counts(f, x, BE.round(x, f)) is None
    x = np.array([1.0, 70000.0], np.float32)
    with np.errstate(all="ignore"):
        assert mon._finite_counts(f, x, BE.round(x, f)) is None
    x = np.array([1.0, 2.0], np.float32)
    assert mon._finite_counts(get_format("float32"), x, x.copy()) is None  # float32: see the next test
    assert mon._finite_counts(f, x.astype(np.float16), x.astype(np.float16)) is None


def test_float32_fast_count_equals_full_count():
    """An update or an unscale "rounds" float32 into float32: the fast count's float32 subnormals
    are the full count's, and it steps aside for inf / NaN and for a stored array given apart."""
    f = get_format("float32")
    rng = np.random.default_rng(5)
    x = (2.0 ** rng.uniform(-155, 20, 4000) * rng.choice([-1.0, 1.0], 4000)).astype(np.float32)
    x[::9] = 0.0
    x[1] = -0.0
    fast = mon._finite_counts(f, x, x)
    assert fast == _full(f, x, x) and fast[3] == int(np.count_nonzero((np.abs(x) < f.tiny) & (x != 0))) > 100
    for bad in (np.inf, np.nan):
        y = np.concatenate([x, np.array([bad], np.float32)])
        assert mon._finite_counts(f, y, y) is None
        assert mon._count_rounding(f, y, y, np) == _full(f, y, y)
    assert mon._finite_counts(f, x, x.copy()) is None


def test_an_exact_result_is_counted_from_its_stored_value():
    """relu rounds nothing: its event carries no exact32, and the counts come from the stored
    values - the subnormal that passes through is counted, the negative tiny value that becomes
    0 is not a flush (max(x, 0) = 0 exactly)."""
    import fpsim

    x = fpsim.tensor([-1.0, 2.0**-20, 0.5, -2.0**-24, 0.0, 3.0], "float16")
    seen = []
    with fpsim.monitor() as m, fpsim.state.hooked(seen.append):
        fpsim.ops.relu(x)
    assert [ev.exact32 for ev in seen] == [None]
    assert m.counts[("forward", "", "relu", "", "float16")] == [6, 0, 0, 1, 0, 0, 0, 0]
    with fpsim.monitor() as m:
        fpsim.ops.relu(fpsim.tensor([np.inf, -np.inf, np.nan, 2.0**-20], "float16"))
    assert m.counts[("forward", "", "relu", "", "float16")] == [4, 0, 0, 1, 0, 1, 1, 1]
