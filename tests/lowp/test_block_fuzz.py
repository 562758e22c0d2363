"""Property test of ``BlockScaling``: random fields, good and bad - it builds and a converted layer
trains a step, or the constructor raises ONE ``ValueError`` / ``TypeError`` naming the bad field."""

from __future__ import annotations

import numpy as np
import pytest
from support.fuzzing import BLOCK_NAMES, one_line

import fpsim
from fpsim import nn, ops
from fpsim.formats import SCALE_ROUNDINGS
from fpsim.lowp import BlockScaling, convert

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
ALLOWED = (ValueError, TypeError)


RECIPE_FIELDS = {
    "format": st.sampled_from(BLOCK_NAMES + ["fp16", "mxfp9", 3]),
    "grad_format": st.sampled_from([None, "mxfp8_e5m2", "nvfp4", "fp8_block", "e5m2"]),
    "block": st.sampled_from([None, 1, 8, 32, 10**9, 0, -4, 2.0, (32, 32), "32"]),
    "weight_block": st.sampled_from([None, 16, (16, 16), [8, 8], (16, 0), (1, 2, 3), "16"]),
    "scale_rounding": st.sampled_from([None, *SCALE_ROUNDINGS, "round"]),
    "pow2_scales": st.sampled_from([False, True, "False", 1]),
    "grad_rounding": st.sampled_from(["nearest", "stochastic", "up"]),
    "hadamard": st.sampled_from([False, True, "yes"]),
    "hadamard_seed": st.sampled_from([0, 7, -1, 1.5, None]),
    "accumulate": st.sampled_from([None, "bfloat16", 13, 0, "fp17", True]),
    "promote_every": st.sampled_from([None, 1, 128, 0, True]),
}


@FUZZ
@given(data=st.data())
def test_block_scaling_builds_and_trains_or_names_the_bad_field(data):
    chosen = data.draw(st.lists(st.sampled_from(sorted(RECIPE_FIELDS)), max_size=3, unique=True))
    kwargs = {f: data.draw(RECIPE_FIELDS[f], label=f) for f in chosen}
    try:
        r = BlockScaling(**kwargs)
    except ALLOWED as e:
        assert one_line(e, *kwargs, "format"), (kwargs, str(e))
        return
    fpsim.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16, seed=1))
    convert(model, r)
    x = fpsim.tensor(np.linspace(-1, 1, 64, dtype=np.float32).reshape(4, 16))
    ops.sum(model(x)).backward()  # the first backward raises nothing the constructor let through
    assert model[0].weight.grad.shape == (16, 16)
