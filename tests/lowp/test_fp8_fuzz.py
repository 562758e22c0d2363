"""Property test of per-tensor fp8 quantization (``fpsim.lowp.quantize_fp8``): random float32
arrays and scales against gfloat's saturating rounding of the float32 product."""

from __future__ import annotations

import numpy as np
import pytest
from support.cast_reference import arrays_of, check_cast

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

FUZZ = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@FUZZ
@given(x=arrays_of(np.float32),
       name=st.sampled_from(["float8_e4m3fn", "float8_e5m2"]),
       init=st.sampled_from([1.0, 2.0**-7, 2.0**10, 3.0, 1000.0]))
def test_per_tensor_quantize_matches_gfloat_with_saturation(x, name, init):
    from fpsim.lowp import quantize_fp8
    from fpsim.lowp.recipes import DelayedScaling
    from fpsim.lowp.scaling import ScalingState

    state = ScalingState("t", name, DelayedScaling(amax_init=False), init_scale=init)
    q = quantize_fp8(x, state)
    with np.errstate(all="ignore"):
        scaled = (x * np.float32(init)).astype(np.float64)  # float32 product, as the cast computes it
    check_cast(scaled, q.numpy(), name, "nearest", True)
    assert q.scale == np.float32(init)
