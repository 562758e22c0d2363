"""The backward walk hands a gradient passed through unchanged (an add's) on with its float32
values, so a 16-bit gradient is widened once: the gradients stay those of the formula, rounded
where the engine rounds (checked against float32 numpy and ml_dtypes' casts), and the stored
gradient array is widened once, not again by the parent that receives it."""

import ml_dtypes
import numpy as np
import pytest

import fpsim
from fpsim import backend as fb
from fpsim import ops

BF16, F16 = ml_dtypes.bfloat16, np.float16


def _r(x32, dt):
    return x32.astype(dt).astype(np.float32)


@pytest.mark.parametrize("backend", ["numpy", "numpy-f32"])
@pytest.mark.parametrize("fmt,dt", [("bfloat16", BF16), ("float16", F16)])
def test_residual_gradients_match_the_formula(backend, fmt, dt):
    """loss = sum((x * w + x) * c): the add passes its gradient to x * w and to x; x gets it
    twice (once through the product), summed in float32 and rounded again."""
    rng = np.random.default_rng(3)
    x0, w0, c0 = (_r(rng.standard_normal((4, 33)).astype(np.float32), dt) for _ in range(3))
    x = fpsim.tensor(x0, fmt, requires_grad=True, backend=backend)
    w = fpsim.tensor(w0, fmt, requires_grad=True, backend=backend)
    c = fpsim.tensor(c0, fmt, backend=backend)
    ops.sum(ops.mul(ops.add(ops.mul(x, w), x), c)).backward()
    ga = _r(c0, dt)  # d loss / d (x * w + x) = 1 * c, rounded into the gradient format
    want_w = _r(ga * x0, dt)
    want_x = _r(_r(ga * w0, dt) + ga, dt)  # through the product, plus the pass-through
    assert np.array_equal(w.grad.f32().view(np.uint32), want_w.view(np.uint32))
    assert np.array_equal(x.grad.f32().view(np.uint32), want_x.view(np.uint32))


def test_a_passed_through_gradient_is_widened_once(monkeypatch):
    """The stored bfloat16 gradient of the add's output is widened by the add's backward only;
    the product that receives it unchanged reads the same float32 values."""
    widened = []
    to_f32 = fb.NumpyBackend.to_f32

    def counting(self, a):
        widened.append(a)
        return to_f32(self, a)

    x = fpsim.tensor(np.linspace(-1, 1, 40, dtype=np.float32), "bfloat16", requires_grad=True)
    w = fpsim.tensor(np.linspace(2, 3, 40, dtype=np.float32), "bfloat16", requires_grad=True)
    y = ops.mul(ops.add(ops.mul(x, w), w), x)
    monkeypatch.setattr(fb.NumpyBackend, "to_f32", counting)
    y.backward(fpsim.tensor(np.ones(40, np.float32), "bfloat16"))
    wide16 = [a for a in widened if a.dtype == BF16]
    assert len(wide16) == len({id(a) for a in wide16}), "a stored bfloat16 array was widened twice"
