"""masked_fill selects from x's storage and writes the fill value rounded once into x's format:
the same bits as the formula it replaced (float32 ``where`` of the fill value and x's exact
values, rounded into the format with ml_dtypes' / numpy's cast), on both numpy backends and in
every format, for fill values that round, overflow, are exact or NaN; hooks still see the exact
float32 result, and inside ``fpsim.rounding_mode`` the whole result is rounded as before."""

import math

import ml_dtypes
import numpy as np
import pytest

import fpsim
from fpsim import ops, state
from fpsim.formats import get_format

FORMATS = ["float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"]
VALUES = [-math.inf, -65504.0, 1e9, 0.3, math.nan, -0.0]


def _formula(x32, m, value, fmt):
    want32 = np.where(m, np.float32(value), x32)
    with np.errstate(all="ignore"):
        return want32.astype(get_format(fmt).dtype).astype(np.float32)


@pytest.mark.parametrize("backend", ["numpy", "numpy-f32"])
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("value", VALUES)
def test_bits_equal_the_formula(backend, fmt, value):
    rng = np.random.default_rng(5)
    x = fpsim.tensor(rng.standard_normal((3, 4, 5)) * 4, fmt, backend=backend)
    m = rng.random((4, 5)) < 0.4
    got = ops.masked_fill(x, m, value)
    assert got.numpy().dtype == get_format(fmt).dtype
    want = _formula(x.f32(), m, value, fmt)
    assert np.array_equal(got.f32().view(np.uint32), want.view(np.uint32))


def test_hooks_see_the_exact_float32_result():
    seen = []
    x = fpsim.tensor(np.linspace(-3, 3, 12, dtype=np.float32), "bfloat16")
    m = np.arange(12) % 3 == 0
    hook = seen.append  # one bound method: remove_hook looks for the very object added
    state.add_hook(hook)
    try:
        out = ops.masked_fill(x, m, -65504.0)
    finally:
        state.remove_hook(hook)
    assert hook not in state.HOOKS
    (ev,) = [e for e in seen if e.op == "masked_fill"]
    assert np.array_equal(ev.exact32, np.where(m, np.float32(-65504.0), x.f32()))
    assert ev.stored is out.data or np.array_equal(ev.stored.view(np.uint16), out.data.view(np.uint16))
    assert float(out.f32()[0]) == -65536.0  # -65504 rounded into bfloat16


def test_inside_a_rounding_mode_the_result_is_rounded_whole():
    """Stochastic rounding draws one number per element of the result, as before."""
    x = fpsim.tensor(np.linspace(-1, 1, 64, dtype=np.float32), "bfloat16")
    m = np.arange(64) % 2 == 0
    with fpsim.rounding_mode("stochastic", seed=3):
        got = ops.masked_fill(x, m, 0.1)
    draws = np.random.default_rng(3)
    want = fpsim.cast(np.where(m, np.float32(0.1), x.f32()), "bfloat16", "stochastic", rng=draws)
    assert np.array_equal(got.f32(), np.asarray(want, np.float32))
    assert ml_dtypes.bfloat16 == got.numpy().dtype
