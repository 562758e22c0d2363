"""``fpsim.labs.gradients`` (lab 05's helpers): cloning a model into a format, the small training
loop and the warm reference model, and the span of binades a set of values covers."""

import numpy as np
import pytest

from fpsim import ops
from fpsim.labs.gradients import binade_span, clone, fit, warm_reference
from fpsim.nn import MLP


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
