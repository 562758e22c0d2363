"""``fpsim.cast`` and ``fpsim.round_to`` keep a 0-d input 0-d (a scalar, a numpy scalar or a 0-d
array comes back as a 0-d array) in every rounding mode, saturating or not."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.both_backends  # every test here runs on numpy and numpy-f32 (conftest.py)


@pytest.mark.parametrize("rounding", ["nearest", "toward_zero", "stochastic"])
@pytest.mark.parametrize("saturate", [False, True])
def test_zero_d_inputs_come_back_as_zero_d_arrays_in_every_rounding_mode(rounding, saturate):
    from fpsim import cast, round_to

    for x in (1.1, np.float64(1.1), np.float32(1.1), np.array(1.1), np.float16(1.1)):
        for fn in (cast, round_to):
            r = fn(x, "e4m3", rounding, saturate=saturate, seed=0)
            assert type(r) is np.ndarray and r.shape == (), (fn.__name__, type(x))
    assert cast(1.1, "fp16", rounding, seed=0).dtype == np.float16
