"""Property test of the non-finite tracer (``fpsim.trace_nonfinite``): on random chains of ops and
constants it names the op a step-by-step replay finds first to go non-finite."""

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


CHAIN_OPS = {"mul": lambda t, c: t * c, "exp": lambda t, c: ops.exp(t), "sq": lambda t, c: t * t,
             "log": lambda t, c: ops.log(t), "div": lambda t, c: t / c, "sub": lambda t, c: t - t,
             "softmax": lambda t, c: ops.softmax(t, -1), "sum": lambda t, c: ops.sum(t, -1, keepdims=True)}


OP_NAMES = {"mul": "mul", "exp": "exp", "sq": "mul", "log": "log", "div": "div", "sub": "sub", "softmax": "softmax",
            "sum": "sum"}


@FUZZ
@given(x=hnp.arrays(np.float32, (2, 3), elements=st.floats(-300, 300, width=32)),
       chain=st.lists(st.tuples(st.sampled_from(sorted(CHAIN_OPS)), st.sampled_from([0.0, 1e-8, 3.0, 300.0])),
                      min_size=1, max_size=6),
       fmt=st.sampled_from(["float16", "bfloat16", "float8_e4m3fn"]))
def test_tracer_names_the_first_op_a_step_by_step_replay_finds(x, chain, fmt):
    def run():
        t, first = fpsim.tensor(x, fmt), None
        for i, (name, c) in enumerate(chain):
            before = np.isfinite(t.numpy().astype(np.float64)).all()
            t = CHAIN_OPS[name](t, c)
            if first is None and before and not np.isfinite(t.numpy().astype(np.float64)).all():
                first = i
        return first

    with fpsim.trace_nonfinite() as tr:
        first = run()
    got = tr.first_nonfinite()
    if first is None:
        assert got is None or not np.isfinite(x).all()
    else:
        assert got is not None and got.op == OP_NAMES[chain[first][0]] and got.direction == "forward", (got, first)
