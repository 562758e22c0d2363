"""``fpsim.labs.bf16`` (lab 06's helpers): ``accumulate``'s running sums in every format and method
(nearest, float32, Kahan, stochastic) against plain numpy loops, and the numbers the lab quotes."""

import ml_dtypes
import numpy as np
import pytest

from fpsim import get_format, round_to
from fpsim.labs.bf16 import accumulate

DTYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16,
          "float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2}


def _numpy_loop(w0, u, steps, dtype):
    w = dtype(np.float32(w0))
    out = [float(w)]
    for _ in range(steps):
        w = dtype(np.float32(w) + np.float32(u))
        out.append(float(w))
    return np.array(out)


@pytest.mark.parametrize("fmt", list(DTYPES))
def test_accumulate_nearest_is_a_rounded_running_sum(fmt):
    np.testing.assert_array_equal(accumulate(0.0, 1.0, 300, fmt), _numpy_loop(0.0, 1.0, 300, DTYPES[fmt]))
    np.testing.assert_array_equal(accumulate(1.0, 1e-3, 50, fmt), _numpy_loop(1.0, 1e-3, 50, DTYPES[fmt]))


def test_counting_by_one_stalls_at_two_to_the_p():
    for fmt, stop in (("float8_e5m2", 8), ("float8_e4m3fn", 16), ("bfloat16", 256)):
        w = accumulate(0.0, 1.0, 2 * stop, fmt)
        assert w[-1] == stop and w[stop] == stop and w[stop - 1] == stop - 1
    np.testing.assert_array_equal(accumulate(2040.0, 1.0, 20, "float16"), _numpy_loop(2040.0, 1.0, 20, np.float16))
    assert accumulate(2040.0, 1.0, 20, "float16")[-1] == 2048


def test_accumulate_float32_and_kahan():
    f32 = accumulate(1.0, 1e-3, 1000, method="float32")
    np.testing.assert_array_equal(f32, _numpy_loop(1.0, 1e-3, 1000, np.float32))
    kahan = accumulate(1.0, 1e-3, 1000, "bfloat16", method="kahan")
    exact = 1.0 + 1000 * float(np.float32(1e-3))
    assert abs(kahan[-1] - exact) <= float(get_format("bfloat16").eps)  # within one ulp at 2.0 / 2
    assert np.all(accumulate(1.0, 1e-3, 1000, "bfloat16") == 1.0)  # nearest never moves


def test_accumulate_stochastic_is_seeded_and_right_on_average():
    a = accumulate(np.ones(400), 1e-3, 200, "bfloat16", method="stochastic", seed=3)
    b = accumulate(np.ones(400), 1e-3, 200, "bfloat16", method="stochastic", seed=3)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (201, 400)
    assert set(np.unique(a[1])) <= {1.0, 1.0078125}  # one step: stay or go up by 2^-7
    assert abs(a[-1].mean() - (1.0 + 200 * float(np.float32(1e-3)))) < 0.005  # 400 runs: sd ~ 0.003
    with pytest.raises(ValueError, match="method"):
        accumulate(1.0, 1e-3, 3, method="round")


def test_round_to_agrees_for_the_lab_numbers():
    # The numbers the lab 06 text quotes: half the bfloat16 / float16 gap above 1.0.
    assert float(round_to(1.0 + 2.0**-8, "bfloat16")) == 1.0  # a tie: stays at the even 1.0
    assert float(round_to(1.0 + 2.0**-8 + 2.0**-20, "bfloat16")) == 1.0 + 2.0**-7
    assert float(np.float16(1.0 + 2.0**-11)) == 1.0
