"""fpsim.labs.gradients / bf16 / clipping / fp8 (the helpers of labs 05-08), against float64
numpy, numpy's float16 and ml_dtypes' own casts and plain numpy loops."""

import math

import ml_dtypes
import numpy as np
import pytest

from fpsim import get_format, ops, round_to
from fpsim.labs.bf16 import accumulate
from fpsim.labs.clipping import train_with_clipping
from fpsim.labs.fp8 import fp8_round_trip, per_tensor_scale, survival_table
from fpsim.labs.gradients import binade_span, clone, fit, warm_reference
from fpsim.nn import MLP

DTYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16,
          "float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2}


# ---------------------------------------------------------------------------------- fp8


@pytest.mark.parametrize("fmt,top", [("float8_e4m3fn", 448.0), ("float8_e5m2", 57344.0)])
def test_per_tensor_scale_is_the_largest_safe_power_of_two(fmt, top):
    rng = np.random.default_rng(1)
    for amax in np.concatenate([10.0 ** rng.uniform(-12, 6, 200), [top, top / 2, top * 2, 1.0]]):
        x = np.array([amax, -amax / 3, 0.0])
        s = per_tensor_scale(x, fmt)
        m, _ = math.frexp(s)
        assert m == 0.5, s
        assert amax * s <= top < amax * s * 2, (amax, s)
        assert per_tensor_scale(x, fmt, margin=2) == s / 4


def test_per_tensor_scale_boundaries():
    assert per_tensor_scale([448.0], "e4m3") == 1.0
    assert per_tensor_scale([448.0 * (1 + 2.0**-20)], "e4m3") == 0.5
    assert per_tensor_scale([-448.0, np.nan, np.inf], "e4m3") == 1.0  # non-finite values are ignored
    assert per_tensor_scale([1e-6], "e5m2") == 2.0**35  # 1e-6 * 2^35 = 34359.7 <= 57344 < 68719.5
    assert per_tensor_scale(np.zeros(4), "e4m3") == 1.0
    with pytest.raises(ValueError, match="margin"):
        per_tensor_scale([1.0], "e4m3", margin=-1)


@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float8_e5m2"])
def test_fp8_round_trip_matches_a_saturating_ml_dtypes_cast(fmt):
    rng = np.random.default_rng(2)
    x = (rng.standard_normal(5000) * 10.0 ** rng.uniform(-9, -5, 5000)).astype(np.float32)
    top = np.float32(get_format(fmt).max)
    for s in (2.0**20, 2.0**30, 2.0**40):  # from "most values flush" to "many saturate"
        ref = np.clip(x * np.float32(s), -top, top).astype(DTYPES[fmt]).astype(np.float32) / np.float32(s)
        got = fp8_round_trip(x, fmt, s)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, ref)
    with pytest.raises(ValueError, match="scale"):
        fp8_round_trip(x, fmt, 0.0)


def test_survival_table_counts():
    # e4m3fn: 2^-20 flushes, 2^-10 is exactly the flush threshold (a tie, goes to 0), 1.0 stays;
    # its own scale (amax 1 -> 256) keeps 2^-10 (-> 2^-2) and 1.0 (-> 256) but not 2^-20 (-> 2^-12).
    table = survival_table({"t": np.array([2.0**-20, 2.0**-10, 1.0])}, formats=("e4m3", "e5m2"))
    rows = [r.split() for r in table.splitlines()[2:]]
    assert rows[0] == ["t", "float8_e4m3fn", "33.33%", "2^8", "66.67%", "0.00%"]
    # e5m2: 2^-20 flushes (below 2^-17); with scale 2^15 all three are kept
    assert rows[1] == ["float8_e5m2", "66.67%", "2^15", "100.00%", "0.00%"]


# ---------------------------------------------------------------------------------- bf16 / accumulate


def _numpy_loop(w0, u, steps, dtype):
    w = dtype(np.float32(w0))
    out = [float(w)]
    for _ in range(steps):
        w = dtype(np.float32(w) + np.float32(u))
        out.append(float(w))
    return np.array(out)


@pytest.mark.parametrize("fmt", list(DTYPES))
def test_accumulate_nearest_is_a_rounded_running_sum(fmt):
    np.testing.assert_array_equal(accumulate(0.0, 1.0, 300, fmt), _numpy_loop(0.0, 1.0, 300, DTYPES[fmt]))
    np.testing.assert_array_equal(accumulate(1.0, 1e-3, 50, fmt), _numpy_loop(1.0, 1e-3, 50, DTYPES[fmt]))


def test_counting_by_one_stalls_at_two_to_the_p():
    for fmt, stop in (("float8_e5m2", 8), ("float8_e4m3fn", 16), ("bfloat16", 256)):
        w = accumulate(0.0, 1.0, 2 * stop, fmt)
        assert w[-1] == stop and w[stop] == stop and w[stop - 1] == stop - 1
    np.testing.assert_array_equal(accumulate(2040.0, 1.0, 20, "float16"), _numpy_loop(2040.0, 1.0, 20, np.float16))
    assert accumulate(2040.0, 1.0, 20, "float16")[-1] == 2048


def test_accumulate_float32_and_kahan():
    f32 = accumulate(1.0, 1e-3, 1000, method="float32")
    np.testing.assert_array_equal(f32, _numpy_loop(1.0, 1e-3, 1000, np.float32))
    kahan = accumulate(1.0, 1e-3, 1000, "bfloat16", method="kahan")
    exact = 1.0 + 1000 * float(np.float32(1e-3))
    assert abs(kahan[-1] - exact) <= float(get_format("bfloat16").eps)  # within one ulp at 2.0 / 2
    assert np.all(accumulate(1.0, 1e-3, 1000, "bfloat16") == 1.0)  # nearest never moves


def test_accumulate_stochastic_is_seeded_and_right_on_average():
    a = accumulate(np.ones(400), 1e-3, 200, "bfloat16", method="stochastic", seed=3)
    b = accumulate(np.ones(400), 1e-3, 200, "bfloat16", method="stochastic", seed=3)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (201, 400)
    assert set(np.unique(a[1])) <= {1.0, 1.0078125}  # one step: stay or go up by 2^-7
    assert abs(a[-1].mean() - (1.0 + 200 * float(np.float32(1e-3)))) < 0.005  # 400 runs: sd ~ 0.003
    with pytest.raises(ValueError, match="method"):
        accumulate(1.0, 1e-3, 3, method="round")


# ---------------------------------------------------------------------------------- gradients


def test_clone_is_independent_and_rounds_once():
    model = MLP([4, 3, 2], activation="tanh", seed=5)
    c16 = clone(model, "float16")
    for p, q in zip(model.parameters(), c16.parameters()):
        assert q.fmt.name == "float16" and q.grad is None and q is not p
        np.testing.assert_array_equal(q.f32(), p.f32().astype(np.float16).astype(np.float32))
    c32 = clone(model)
    c32.parameters()[0].data[...] = 0
    assert np.any(model.parameters()[0].f32() != 0)


def test_fit_and_warm_reference():
    x = np.random.default_rng(0).standard_normal((64, 4)).astype(np.float32)
    model = MLP([4, 8, 4], activation="tanh", seed=0)
    losses = fit(model, ops.mse_loss, x, x, steps=15, lr=1e-2)
    assert len(losses) == 15 and losses[-1] < losses[0]
    with pytest.raises(ValueError, match="optimizer"):
        fit(model, ops.mse_loss, x, x, steps=1, optimizer="lbfgs")
    m1, x1 = warm_reference(n=256, steps=2)
    m2, _ = warm_reference(n=256, steps=2)
    assert x1.shape == (256, 64) and x1.dtype == np.float32
    for p, q in zip(m1.parameters(), m2.parameters()):
        assert p.fmt.name == "float32"
        np.testing.assert_array_equal(p.f32(), q.f32())  # deterministic


def test_binade_span():
    v = np.array([0.0, -2.0**-10, 2.0**-5, 1.0, np.inf])
    assert binade_span(v, 0.0, 1.0) == (-10.0, 0.0)
    with pytest.raises(ValueError):
        binade_span(np.zeros(3))


# ---------------------------------------------------------------------------------- clipping


def test_clip_first_sees_the_scaled_norm_and_stalls():
    right = train_with_clipping("unscale-first", steps=3, scale=1024.0)
    wrong = train_with_clipping("clip-first", steps=3, scale=1024.0)
    none = train_with_clipping("no-clip", steps=3)
    # same data and weights: the first step's norms differ by exactly the (power-of-two) scale
    assert wrong.norms[0] == pytest.approx(1024.0 * right.norms[0], rel=1e-5)
    assert right.losses[0] == wrong.losses[0] == none.losses[0]
    assert all(math.isnan(n) for n in none.norms)
    # the wrong order moves the weights about S*|g|/max_norm times less: the loss hardly changes
    assert abs(wrong.losses[-1] - wrong.losses[0]) < 0.01 * abs(right.losses[-1] - right.losses[0])
    assert right.skipped == wrong.skipped == 0
    with pytest.raises(ValueError, match="order"):
        train_with_clipping("clip-last")


def test_round_to_agrees_for_the_lab_numbers():
    # The numbers the lab 06 text quotes: half the bfloat16 / float16 gap above 1.0.
    assert float(round_to(1.0 + 2.0**-8, "bfloat16")) == 1.0  # a tie: stays at the even 1.0
    assert float(round_to(1.0 + 2.0**-8 + 2.0**-20, "bfloat16")) == 1.0 + 2.0**-7
    assert float(np.float16(1.0 + 2.0**-11)) == 1.0
