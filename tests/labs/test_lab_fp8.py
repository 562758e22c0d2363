"""``fpsim.labs.fp8`` (lab 08's helpers): the per-tensor scale, the fp8 round trip and the survival
table, against ml_dtypes' own saturating casts and values worked out by hand."""

import math

import ml_dtypes
import numpy as np
import pytest

from fpsim import get_format
from fpsim.labs.fp8 import fp8_round_trip, per_tensor_scale, survival_table

DTYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16,
          "float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2}


@pytest.mark.parametrize("fmt,top", [("float8_e4m3fn", 448.0), ("float8_e5m2", 57344.0)])
def test_per_tensor_scale_is_the_largest_safe_power_of_two(fmt, top):
    rng = np.random.default_rng(1)
    for amax in np.concatenate([10.0 ** rng.uniform(-12, 6, 200), [top, top / 2, top * 2, 1.0]]):
        x = np.array([amax, -amax / 3, 0.0])
        s = per_tensor_scale(x, fmt)
        m, _ = math.frexp(s)
        assert m == 0.5, s
        assert amax * s <= top < amax * s * 2, (amax, s)
        assert per_tensor_scale(x, fmt, margin=2) == s / 4


def test_per_tensor_scale_boundaries():
    assert per_tensor_scale([448.0], "e4m3") == 1.0
    assert per_tensor_scale([448.0 * (1 + 2.0**-20)], "e4m3") == 0.5
    assert per_tensor_scale([-448.0, np.nan, np.inf], "e4m3") == 1.0  # non-finite values are ignored
    assert per_tensor_scale([1e-6], "e5m2") == 2.0**35  # 1e-6 * 2^35 = 34359.7 <= 57344 < 68719.5
    assert per_tensor_scale(np.zeros(4), "e4m3") == 1.0
    with pytest.raises(ValueError, match="margin"):
        per_tensor_scale([1.0], "e4m3", margin=-1)


@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float8_e5m2"])
def test_fp8_round_trip_matches_a_saturating_ml_dtypes_cast(fmt):
    rng = np.random.default_rng(2)
    x = (rng.standard_normal(5000) * 10.0 ** rng.uniform(-9, -5, 5000)).astype(np.float32)
    top = np.float32(get_format(fmt).max)
    for s in (2.0**20, 2.0**30, 2.0**40):  # from "most values flush" to "many saturate"
        ref = np.clip(x * np.float32(s), -top, top).astype(DTYPES[fmt]).astype(np.float32) / np.float32(s)
        got = fp8_round_trip(x, fmt, s)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, ref)
    with pytest.raises(ValueError, match="scale"):
        fp8_round_trip(x, fmt, 0.0)


def test_survival_table_counts():
    # e4m3fn: 2^-20 flushes, 2^-10 is exactly the flush threshold (a tie, goes to 0), 1.0 stays;
    # its own scale (amax 1 -> 256) keeps 2^-10 (-> 2^-2) and 1.0 (-> 256) but not 2^-20 (-> 2^-12).
    table = survival_table({"t": np.array([2.0**-20, 2.0**-10, 1.0])}, formats=("e4m3", "e5m2"))
    rows = [r.split() for r in table.splitlines()[2:]]
    assert rows[0] == ["t", "float8_e4m3fn", "33.33%", "2^8", "66.67%", "0.00%"]
    # e5m2: 2^-20 flushes (below 2^-17); with scale 2^15 all three are kept
    assert rows[1] == ["float8_e5m2", "66.67%", "2^15", "100.00%", "0.00%"]
