"""fpsim.monitor: exact counts of rounding events, and gradient capture.

Expected counts are literals for constructed inputs, cross-checked against numpy / ml_dtypes
casts of the same values (never against fpsim's own rounding).
"""


import sys

import ml_dtypes
import numpy as np
import pytest

import fpsim
from fpsim import nn, state
from fpsim.capture import capture_gradients
from fpsim.monitor import COUNTERS, monitor
from fpsim.optim import SGD
from fpsim.tensor import tensor

pytestmark = pytest.mark.both_backends  # every test here runs on numpy and numpy-f32 (conftest.py)

TINY16 = 2.0**-14


def ref_counts(values32: np.ndarray, dtype) -> dict:
    """Independent reference: numpy/ml_dtypes' own float32 -> low cast, counted directly."""
    x = np.asarray(values32, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        r = x.astype(dtype).astype(np.float32)
    tiny = float(ml_dtypes.finfo(dtype).smallest_normal)
    return {
        "n": x.size,
        "underflow": int(np.sum((r == 0) & (x != 0))),
        "subnormal": int(np.sum((r != 0) & (np.abs(r) < tiny))),
        "overflow": int(np.sum(np.isfinite(x) & ~np.isfinite(r))),
        "nan": int(np.sum(np.isnan(r))),
    }


def test_underflow_1e8_into_float16_is_counted_1000_times():
    x = np.full(1000, 1e-8)
    with monitor() as m:
        y = tensor(x, "float32").to("fp16")
    assert np.all(y.numpy() == 0)
    t = m.totals(direction="forward", op="cast", fmt="float16")
    assert t["n"] == 1000 and t["underflow"] == 1000 and t["inexact"] == 1000
    assert t["subnormal"] == 0 and t["overflow"] == 0 and t["nan"] == 0
    assert t["underflow"] == ref_counts(x, np.float16)["underflow"]


def test_overflow_7e4_in_float16_not_in_bfloat16_nan_in_e4m3():
    x = tensor(np.full(100, 7e4), "float32")
    with monitor() as m:
        x.to("float16")
        x.to("bfloat16")
        x.to("float8_e4m3fn")
        x.to("float8_e5m2")
    h = m.totals(fmt="float16")
    assert (h["overflow"], h["inf"], h["nan"]) == (100, 100, 0)
    b = m.totals(fmt="bf16")
    assert (b["n"], b["overflow"], b["inf"], b["inexact"]) == (100, 0, 0, 100)  # 7e4 -> 70144 in bfloat16
    e4 = m.totals(fmt="e4m3")
    assert (e4["overflow"], e4["nan"], e4["inf"]) == (100, 100, 0)  # e4m3fn has no inf
    e5 = m.totals(fmt="e5m2")
    assert (e5["overflow"], e5["inf"]) == (100, 100)  # max 57344, 7e4 > 61440
    for name, dt in (("float16", np.float16), ("bfloat16", ml_dtypes.bfloat16),
                     ("float8_e4m3fn", ml_dtypes.float8_e4m3fn), ("float8_e5m2", ml_dtypes.float8_e5m2)):
        assert m.totals(fmt=name)["overflow"] == ref_counts(np.full(100, 7e4), dt)["overflow"]


def test_subnormal_band_and_mixed_values():
    # 300 x 1e-6 (inside float16's subnormal band [2^-24, 2^-14)), 50 x 3e-8 (just above the
    # flush threshold 2^-25: rounds UP to 2^-24), 200 x 1.0 (exact), 100 x 1e-9 (flushed)
    x = np.concatenate([np.full(300, 1e-6), np.full(50, 3e-8), np.ones(200), np.full(100, 1e-9)]).astype(np.float32)
    with monitor() as m:
        y = tensor(x, "float32").to("float16")
    t = m.totals()
    assert (t["n"], t["subnormal"], t["underflow"], t["inexact"]) == (650, 350, 100, 450)
    assert np.all(y.numpy()[300:350] == np.float16(2.0**-24))
    ref = ref_counts(x, np.float16)
    assert (t["subnormal"], t["underflow"]) == (ref["subnormal"], ref["underflow"])
    # the whole band: every value in [2^-24, 2^-14) rounds to a subnormal
    band = np.ldexp(1.0, -24) * np.arange(1, 1024, dtype=np.float64)
    with monitor() as m2:
        tensor(band, "float32").to("float16")
    assert m2.totals()["subnormal"] == 1023 == ref_counts(band, np.float16)["subnormal"]


def test_float32_subnormal_results_and_nans():
    with monitor() as m:
        a = tensor(np.full(10, 1e-39), "float32")  # below 2^-126: subnormal in float32
        _ = a * 1.0
        b = tensor(np.array([np.nan, 1.0, -2.0]), "float32")
        b.to("float16")
    mul = m.totals(op="mul")
    assert (mul["n"], mul["subnormal"], mul["inexact"], mul["underflow"]) == (10, 10, 0, 0)
    c = m.totals(op="cast")
    assert (c["n"], c["nan"], c["nan_in"], c["inexact"], c["overflow"]) == (3, 1, 1, 0, 0)


def test_backward_underflow_lands_under_the_op_that_made_it():
    x = tensor(np.ones(1000), "float16", requires_grad=True)
    with monitor() as m:
        y = x * 1e-8  # float16(1 * 1e-8) = 0 going forward, and its gradient 1e-8 flushes too
        y.sum().backward()
    fwd = m.totals(direction="forward", op="mul")
    bwd = m.totals(direction="backward", op="mul")
    assert (fwd["n"], fwd["underflow"]) == (1000, 1000)
    assert (bwd["n"], bwd["underflow"]) == (1000, 1000)
    assert m.totals(direction="backward", op="sum")["underflow"] == 0
    d = m.to_dict()
    assert d["backward"][""]["mul"][""]["float16"]["underflow"] == 1000
    assert set(d["backward"][""]["mul"][""]["float16"]) == set(COUNTERS)
    assert np.all(x.grad.numpy() == 0)


def test_mlp_scopes_and_parameter_targets():
    model = nn.MLP([4, 8, 3], seed=1)  # Linear "0", ReLU "1", Linear "2"
    x = tensor(np.random.default_rng(0).standard_normal((5, 4)), "float32")
    with monitor() as m:
        loss = nn.mse_loss(model(x), np.zeros((5, 3), np.float32))
        loss.backward()
    d = m.to_dict()
    assert {"0", "1", "2"} <= set(d["forward"]) and {"0", "1", "2"} <= set(d["backward"])
    assert m.totals(direction="forward", scope="0", op="linear")["n"] == 5 * 8
    assert m.totals(direction="forward", scope="2", op="linear")["n"] == 5 * 3
    assert m.totals(direction="forward", scope="1", op="relu")["n"] == 5 * 8
    # the weight's gradient is rounded once, attributed to the layer and named "weight"
    assert m.totals(direction="backward", scope="0", target="weight")["n"] == 8 * 4
    assert m.totals(direction="backward", scope="2", target="bias")["n"] == 3
    assert m.totals(direction="forward", op="mse_loss")["n"] == 1


def test_the_block_linears_accumulator_partial_sums_are_counted_flushed_and_overflowed():
    """BlockScaling(accumulate="float16"): the partial sums are roundings the monitor counts (op
    block.linear, target accumulator).  1e-4 * 1e-4 products flush to 0 in float16 at every one of
    the 32 steps; 256 products of 300 (288 in e4m3, ml_dtypes) overflow float16 once, and every sum
    after that is inf - counted against float16 accumulation by hand with numpy."""
    from fpsim.lowp import BlockLinear, BlockScaling

    def layer(k, w):
        lin = nn.Linear(k, 1, bias=False, seed=0)
        lin.weight = tensor(np.full((1, k), w, np.float32), requires_grad=True)
        return BlockLinear(lin, BlockScaling("mxfp8_e4m3", accumulate="float16"))

    with monitor() as m:
        out = layer(32, 1e-4)(tensor(np.full((1, 32), 1e-4, np.float32)))
    t = m.totals(direction="forward", op="block.linear", target="accumulator")
    assert (t["n"], t["underflow"], t["overflow"]) == (32, 32, 0) and out.item() == 0.0
    with monitor() as m:
        out = layer(256, 1.0)(tensor(np.full((1, 256), 300.0, np.float32)))
    q = float(np.float32(300.0).astype(ml_dtypes.float8_e4m3fn))
    s, overflow, inf = np.float16(0), 0, 0
    with np.errstate(over="ignore"):
        for _ in range(256):
            exact = np.float32(s) + np.float32(q)
            s = exact.astype(np.float16)
            overflow += int(np.isfinite(exact) and np.isinf(s))
            inf += int(np.isinf(s))
    t = m.totals(direction="forward", op="block.linear", target="accumulator")
    assert q == 288.0 and (t["n"], t["overflow"], t["inf"]) == (256, overflow, inf) == (256, 1, 29)
    assert out.item() == np.inf


def test_update_direction_records_the_lost_update():
    w = tensor(np.ones(4), "float16", requires_grad=True)
    w.grad = tensor(np.full(4, 1.0), "float16")
    opt = SGD([w], lr=1e-4)  # 1 - 1e-4: less than half float16's ulp below 1 (2^-12): lost
    with monitor() as m:
        opt.step()
    t = m.totals(direction="update")
    assert t["n"] == 4 and t["inexact"] == 4
    assert np.all(w.numpy() == 1)


def test_hooks_removed_nested_and_on_exceptions():
    before = list(state.HOOKS)
    x = tensor(np.full(10, 1e-9), "float32")
    with monitor() as outer:
        x.to("fp16")
        with monitor() as inner:
            x.to("fp16")
            assert len(state.HOOKS) == len(before) + 2
        x.to("fp16")
    assert state.HOOKS == before
    assert outer.totals()["underflow"] == 30 and inner.totals()["underflow"] == 10
    with pytest.raises(RuntimeError):
        with monitor():
            raise RuntimeError("boom")
    assert state.HOOKS == before
    x.to("fp16")  # nothing records after exit
    assert outer.totals()["n"] == 30


def test_table_totals_reset():
    x = tensor(np.full(1000, 1e-8), "float32")
    with fpsim.monitor() as m:
        x.to("fp16")
        x.to("bf16")
    text = m.table()
    lines = text.splitlines()
    for col in ("direction", "scope", "op", "target", "format", "n", "underflow", "subnormal", "overflow", "nan"):
        assert col in lines[0]
    assert len(lines) == 4 and "bfloat16" in lines[2] and " float16" in lines[3] and "100.00%" in lines[3]
    assert m.totals(fmt="bfloat16")["underflow"] == 0
    m.reset()
    assert m.counts == {} and m.totals()["n"] == 0 and "no roundings" in m.table()


def test_capture_rejects_unknown_direction():
    with pytest.raises(ValueError, match="sideways"):
        monitor(capture="sideways")


def test_capture_keeps_exact_values():
    with monitor(capture="forward") as m:
        tensor(np.array([1e-8, 3.0]), "float32").to("fp16")
    (key, arr), = m.captured
    assert key == ("forward", "", "cast", "", "float16")
    np.testing.assert_array_equal(arr, np.array([1e-8, 3.0], np.float32))


class _DeviceArray(np.ndarray):
    def get(self):
        return np.asarray(self)


class _FakeCupy:
    """numpy dressed as a device module: exercises the monitor's non-numpy code path."""

    float32 = np.float32

    def __getattr__(self, name):
        return getattr(np, name)

    def stack(self, xs):
        return np.stack(xs).view(_DeviceArray)


def test_device_array_path_counts_the_same():
    mon = sys.modules["fpsim.monitor"]  # the module (fpsim.monitor is the function)

    x = np.array([1e-8, 7e4, 1e-6, np.nan, 1.0, 3e-8, -2.5], np.float32)
    for dt, fmt in ((np.float16, "float16"), (ml_dtypes.bfloat16, "bfloat16"), (np.float32, "float32")):
        with np.errstate(over="ignore"):
            stored = x.astype(dt)
        on_host = mon._count_rounding(fpsim.get_format(fmt), x, stored, np)
        on_device = mon._count_rounding(fpsim.get_format(fmt), x, stored.astype(np.float32) if fmt != "float16"
                                        else stored, _FakeCupy())
        assert on_device == on_host, fmt
    assert on_host == [7, 0, 0, 0, 0, 0, 1, 1]  # float32 into float32: only the NaN


# ------------------------------------------------------------------------------ gradient capture


def two_layer(w1, w2, fmt="float32"):
    model = nn.Sequential(nn.Linear(1, 1, bias=False), nn.Linear(1, 1, bias=False))
    model.load_state_dict({"0.weight": np.array([[w1]]), "1.weight": np.array([[w2]])})
    return model.to(fmt)


def test_capture_gradients_exact_powers_of_two():
    # x = 1, h = 2^-10 x, y = 2^-12 h = 2^-22, loss = y^2: dL/dy = 2^-21, dL/dh = 2^-33,
    # dL/dw2 = dL/dy * h = 2^-31, dL/dw1 = dL/dh * x = 2^-33.
    model = two_layer(2.0**-10, 2.0**-12)
    cap = capture_gradients(model, nn.mse_loss, np.array([[1.0]]), np.array([[0.0]], np.float32))
    want = {("0", "activation", "output"): 2.0**-33, ("0", "weight", "weight"): 2.0**-33,
            ("1", "activation", "output"): 2.0**-21, ("1", "weight", "weight"): 2.0**-31}
    assert set(cap.grads) == set(want)
    for k, v in want.items():
        assert cap.grads[k].dtype == np.float32 and cap.grads[k].ravel().tolist() == [v], k
    assert cap.loss == 2.0**-44

    fp16 = cap.summary("float16")
    assert fp16[("1", "activation", "output")]["subnormal"] == 1  # 2^-21 in [2^-24, 2^-14)
    assert fp16[("0", "activation", "output")]["flushed"] == 1
    assert fp16[("1", "weight", "weight")]["flushed"] == 1
    bf = cap.summary("bfloat16")
    assert all(s["normal"] == 1 for s in bf.values())
    # x 2^10: 2^-11 normal, 2^-23 and 2^-21 subnormal in float16
    s = cap.summary("float16", scale=2.0**10)
    assert s[("1", "activation", "output")]["normal"] == 1
    assert s[("0", "activation", "output")]["subnormal"] == 1
    assert s[("1", "weight", "weight")]["subnormal"] == 1
    # the same verdicts from numpy's own float16 cast
    for k, g in cap.grads.items():
        r = (g.astype(np.float64) * 2.0**10).astype(np.float16)[0]
        kind = "normal" if abs(r) >= TINY16 else ("subnormal" if r != 0 else "flushed")
        assert s[k][kind] == 1, k
    e5 = cap.summary("e5m2", scale=2.0**10)  # 2^-23 <= 2^-17: flushed even scaled
    assert e5[("0", "activation", "output")]["flushed"] == 1
    assert e5[("1", "activation", "output")]["normal"] == 1
    assert set(cap.summary()) == {"float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"}
    assert "flushed" in cap.table()


def test_capture_gradients_match_float64_backprop_and_leave_the_model_alone():
    rng = np.random.default_rng(3)
    model = nn.MLP([3, 4, 2], seed=2, fmt="float16")
    x = rng.standard_normal((6, 3))
    t = rng.standard_normal((6, 2)).astype(np.float32)
    sentinel = tensor(np.full((4, 3), 7.0), "float16")
    model[0].weight.grad = sentinel
    before = {n: p.numpy().copy() for n, p in model.named_parameters()}
    cap = capture_gradients(model, nn.mse_loss, x, t)
    assert model[0].weight.grad is sentinel and model[2].weight.grad is None
    for n, p in model.named_parameters():
        assert p.fmt.name == "float16" and np.array_equal(p.numpy().view(np.uint16), before[n].view(np.uint16))

    # float64 reference backprop on the float16 weights widened exactly
    W1, b1 = before["0.weight"].astype(np.float64), before["0.bias"].astype(np.float64)
    W2, b2 = before["2.weight"].astype(np.float64), before["2.bias"].astype(np.float64)
    x32 = x.astype(np.float32).astype(np.float64)
    z1 = x32 @ W1.T + b1
    h = np.maximum(z1, 0)
    y = h @ W2.T + b2
    gy = 2 * (y - t) / y.size
    gh = gy @ W2
    gz1 = gh * (z1 > 0)
    ref = {("2", "activation", "output"): gy, ("1", "activation", "output"): gh, ("0", "activation", "output"): gz1,
           ("2", "weight", "weight"): gy.T @ h, ("2", "weight", "bias"): gy.sum(0),
           ("0", "weight", "weight"): gz1.T @ x32, ("0", "weight", "bias"): gz1.sum(0)}
    assert set(cap.grads) == set(ref)
    for k, r in ref.items():
        np.testing.assert_allclose(cap.grads[k], r, rtol=2e-5, atol=1e-7, err_msg=str(k))
    # ReLU zeros are zeros, not flushed values
    s = cap.summary("float16")[("0", "activation", "output")]
    assert s["zero"] == int(np.sum(gz1 == 0)) and s["nonzero"] + s["zero"] == gz1.size
    assert abs(s["frac_flushed"] + s["frac_subnormal"] + s["frac_normal"] + s["frac_overflow"] - 1) < 1e-12
    assert cap.values(kind="weight").size == 4 * 3 + 4 + 2 * 4 + 2
