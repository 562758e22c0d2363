"""Property test of ``Tensor.to(backend=...)``: random hops between numpy and numpy-f32 anywhere in a
small graph change no value and no gradient, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import fpsim
from fpsim import ops

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@FUZZ
@given(x=hnp.arrays(np.float32, (3, 4), elements=st.floats(-100, 100, width=32)),
       fmt=st.sampled_from(["float32", "float16", "bfloat16", "float8_e4m3fn"]),
       hops=st.lists(st.sampled_from(["numpy", "numpy-f32"]), min_size=1, max_size=4),
       where=st.integers(0, 3))
def test_moves_between_backends_change_no_value_and_no_gradient(x, fmt, hops, where):
    def loss(moves):
        w = fpsim.tensor(x, fmt, requires_grad=True)
        t = w
        for i, step in enumerate([ops.tanh, lambda u: u * u, ops.sigmoid, lambda u: ops.sum(u)]):
            if moves and i == where:
                for b in hops:
                    t = t.to(backend=b)
            t = step(t)
        t.backward()
        return t, w

    (a, wa), (b, wb) = loss(False), loss(True)
    assert a.numpy().tobytes() == b.to(backend="numpy").numpy().tobytes()
    assert wb.grad.backend.name == "numpy" and wa.grad.numpy().tobytes() == wb.grad.numpy().tobytes()
