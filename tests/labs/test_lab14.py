"""Lab 14's support (fpsim.labs.nanhunt): the data, the five runs' first non-finite origins the lab
narrates, the largest gradient it quotes (against float64 numpy), and PyTorch's tools on the same
model.  The notebook itself, its self-checks and wrong answers run in tests/labs/test_labs.py."""

import numpy as np
import pytest

from fpsim import GradScaler, nn
from fpsim.labs.nanhunt import hunt_run, normalised, raw_regression, torch_hunt


def test_the_data_are_raw_and_the_fix_standardises_them():
    x, y = raw_regression()
    assert x.dtype == y.dtype == np.float32 and x.shape == (256, 16) and y.shape == (256, 1)
    assert np.array_equal(x, np.round(x)) and x.min() == 0 and x.max() == 255
    assert 500 < y.min() and y.max() < 4000
    xn, yn = normalised(x, y)
    for a in (xn, yn):
        assert np.allclose(a.astype(np.float64).mean(axis=0), 0, atol=1e-6)
        assert np.allclose(a.astype(np.float64).std(axis=0), 1, atol=1e-6)


def test_each_run_dies_of_the_cause_the_lab_names():
    x, y = raw_regression()
    xn, yn = normalised(x, y)
    runs = {"a": hunt_run(x, y, loss_format="float16"), "b": hunt_run(x, y), "c": hunt_run(x, y, scaler=GradScaler()),
            "d": hunt_run(xn, yn, master=False), "e": hunt_run(xn, yn)}
    first = {k: r.tracer.first_nonfinite() for k, r in runs.items()}
    assert (first["a"].kind, first["a"].op, first["a"].step, runs["a"].died_at) == ("forward overflow", "mse_loss", 0, 0)
    assert (first["b"].kind, first["b"].op, first["b"].where, runs["b"].died_at) == ("backward overflow", "linear",
                                                                                      "2.weight", 1)
    assert first["c"].kind == "loss-scaler overflow" and runs["c"].died_at is None
    assert runs["c"].tracer.first_nonfinite(include_scaler=False) is None and runs["c"].scales[-1] < 1
    assert (first["d"].kind, first["d"].op, runs["d"].died_at) == ("update", "adam.step", 1)
    assert first["e"] is None and runs["e"].died_at is None and runs["e"].losses[-1] < 0.05 * runs["e"].losses[0]


def test_the_largest_gradient_of_run_b_against_float64():
    """Step 0's gradient of the last layer's weight, from the same initial weights in float64:
    the value the tracer reports before rounding (within float16's rounding of the forward)."""
    x, y = raw_regression()
    model = nn.MLP([16, 32, 1], activation="relu", seed=0)
    w1, b1, w2, b2 = (np.asarray(p.f32(), dtype=np.float64) for p in model.parameters())
    h = np.maximum(x @ w1.T + b1, 0)
    g = 2 * (h @ w2.T + b2 - y) / y.size
    want = np.abs(h.T @ g).max()
    got = hunt_run(x, y).tracer.first_nonfinite().max_finite_before
    assert 65504 < want and got == pytest.approx(want, rel=0.01)


def test_pytorch_sees_the_nan_a_step_late():
    pytest.importorskip("torch")
    x, y = raw_regression()
    a = torch_hunt(x, y, loss_format="float16")
    assert a.died_at == 0 and a.hook == (0, "MSELoss", "inf")
    b = torch_hunt(x, y, loss_format="float32")
    assert b.died_at == 1 and b.hook == (1, "0", "NaN")
    assert b.anomaly[0] == 1 and "MseLossBackward0" in b.anomaly[1] and "nan" in b.anomaly[1]
