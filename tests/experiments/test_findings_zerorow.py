"""``fp8-rowwise-zero-row`` and the row-wise fp8 scaling it runs on (``fpsim.lowp.rowwise``): the
scales and casts against numpy float32 and ml_dtypes, the three GEMMs against float64 products of
the dequantized operands, an all-zero row with and without the amax floor (the tracer naming the
scale computation), the conversion, the verdict rule on fixed numbers, the quick run pinned."""

import math

import ml_dtypes
import numpy as np
import pytest
from support.reference_runs import quick_run

import fpsim
from fpsim import nn
from fpsim.experiments.findings import get_finding, zerorow
from fpsim.lowp import convert
from fpsim.lowp.rowwise import RowwiseLinear, RowwiseScaling, rowwise_quantize
from fpsim.trace import trace_nonfinite

E4M3, E5M2 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2


def _ref_quantize(x, axis, dtype, fmax, floor):
    """Row-wise scaling written with numpy float32 and ml_dtypes: (dequantized float64 values)."""
    x = x.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        scale = np.float32(fmax) / np.maximum(np.abs(x).max(axis=axis, keepdims=True), np.float32(floor))
        codes = np.clip(x * scale, -fmax, fmax).astype(dtype).astype(np.float32)
        return codes.astype(np.float64) * (np.float32(1) / scale).astype(np.float64)


@pytest.mark.parametrize("axis", [0, 1])
def test_rowwise_quantize_against_numpy_and_ml_dtypes(axis):
    x = np.random.default_rng(axis).standard_normal((6, 40)).astype(np.float32) * 3
    x[2] = 0
    be = fpsim.backend.get_backend("numpy")
    codes, inv = rowwise_quantize(x, axis, "e4m3", 1e-12, be)
    np.testing.assert_array_equal(codes.astype(np.float64) * inv.astype(np.float64),
                                  _ref_quantize(x, axis, E4M3, 448.0, 1e-12))
    assert np.isfinite(codes).all() and (np.abs(codes) <= 448).all()


def test_rowwise_linear_forward_and_gradients_against_float64():
    rng = np.random.default_rng(0)
    xv, wv, bv = (rng.standard_normal(s).astype(np.float32) for s in ((3, 5, 16), (8, 16), (8,)))
    x = fpsim.tensor(xv, "float32", requires_grad=True)
    layer = nn.Linear(16, 8, seed=0)
    layer.weight.data, layer.bias.data = wv, bv
    lin = RowwiseLinear(layer)
    out = lin(x)
    x2 = xv.reshape(-1, 16)
    want = _ref_quantize(x2, 1, E4M3, 448, 1e-12) @ _ref_quantize(wv, 1, E4M3, 448, 1e-12).T + bv
    np.testing.assert_allclose(out.f32().reshape(-1, 8), want, rtol=1e-6, atol=1e-6)
    g = rng.standard_normal((3, 5, 8)).astype(np.float32)
    (out * fpsim.tensor(g, "float32")).sum().backward()
    g2 = g.reshape(-1, 8)
    gx = _ref_quantize(g2, 1, E5M2, 57344, 1e-12) @ _ref_quantize(wv, 0, E4M3, 448, 1e-12)
    gw = _ref_quantize(g2, 0, E5M2, 57344, 1e-12).T @ _ref_quantize(x2, 0, E4M3, 448, 1e-12)
    np.testing.assert_allclose(x.grad.f32().reshape(-1, 16), gx, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(layer.weight.grad.f32(), gw, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(layer.bias.grad.f32(), g2.astype(np.float64).sum(0), rtol=1e-5, atol=1e-5)


def _zero_row_model(floor):
    model = nn.MLP([8, 6, 4], seed=0)
    model[2].weight.data = model[2].weight.data * 0  # the last layer starts at zero (LoRA's B)
    convert(model, RowwiseScaling(amax_floor=floor))
    return model


def test_an_all_zero_row_with_and_without_the_floor():
    """Floored (the default), the zero rows quantize to zeros and the output is the bias; without
    the floor 448 / 0 = inf, 0 x inf = NaN, and the tracer names the scale computation."""
    x = fpsim.tensor(np.random.default_rng(1).standard_normal((5, 8)), "float32")
    good = _zero_row_model(1e-12)(x).f32()
    assert np.isfinite(good).all()
    np.testing.assert_array_equal(good, np.broadcast_to(_zero_row_model(1e-12)[2].bias.f32(), good.shape))
    with trace_nonfinite() as t:
        bad = _zero_row_model(0.0)(x).f32()
    assert np.isnan(bad).all()
    origin = t.first_nonfinite()
    assert origin.op == "fp8.rowwise.scale" and origin.where == "2.weight" and origin.n_inf == 4, str(origin)


def test_the_conversion_and_bad_configs():
    model = nn.MLP([8, 6, 4], seed=0)
    assert convert(model, RowwiseScaling(), skip="last") == ["0"]
    assert type(model[0]) is RowwiseLinear and type(model[2]) is nn.Linear
    assert RowwiseScaling("e4m3", "e5m2").fwd_format == "float8_e4m3fn"
    with pytest.raises(ValueError, match="amax_floor must be a finite number >= 0, got -1"):
        RowwiseScaling(amax_floor=-1)
    with pytest.raises(ValueError, match="bwd_format must be an fp8 format"):
        RowwiseScaling(bwd_format="bfloat16")


NUMBERS = {"guarded_died": 0.0, "unguarded_died": 1.0, "unguarded_died_at": 0.0, "unguarded_origin_is_scale": 1.0,
           "guarded_ratio": 0.995}


@pytest.mark.parametrize("changes, expected", [
    ({}, "reproduced"),
    ({"unguarded_died_at": 3.0}, "partly"),
    ({"unguarded_origin_is_scale": 0.0}, "partly"),
    ({"unguarded_died": 0.0, "unguarded_died_at": math.nan}, "not at this scale"),
    ({"guarded_died": 1.0}, "not at this scale"),
])
def test_verdict_on_fixed_numbers(changes, expected):
    verdict, reason = zerorow.verdict({**NUMBERS, **changes})
    assert verdict == expected, reason
    assert reason and "\n" not in reason


def test_the_quick_run_pinned():
    assert get_finding(zerorow.NAME) is zerorow.FINDING
    r = quick_run(zerorow.NAME)  # made once in the session, shared with test_findings
    n = r.numbers
    assert r.verdict == "reproduced"
    assert (n["unguarded_died"], n["unguarded_died_at"], n["unguarded_origin_is_scale"]) == (1.0, 0.0, 1.0)
    assert n["guarded_died"] == 0.0 and math.isnan(n["guarded_died_at"]) and n["steps"] == 5.0
    assert n["guarded_ratio"] == GUARDED_RATIO, n["guarded_ratio"]
    assert r.series["origin_op"] == "fp8.rowwise.scale" and r.series["origin_where"] == "6.weight"
    assert "fp8.rowwise.scale" in r.measured


GUARDED_RATIO = 0.9954633232829099
