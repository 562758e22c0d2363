"""gfloat's rounding as the reference for fpsim's casts, for the property tests: the reference
result of ``cast`` (or, for stochastic rounding, the two neighbours it may land on), a check of a
result against it, and Hypothesis strategies for float arrays full of special values.  Nothing
here calls fpsim."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from helpers import same_bits

gfloat = pytest.importorskip("gfloat")
hypothesis = pytest.importorskip("hypothesis")
from gfloat import RoundMode, round_ndarray  # noqa: E402
from gfloat.formats import (  # noqa: E402
    format_info_bfloat16,
    format_info_binary16,
    format_info_binary32,
    format_info_ocp_e4m3,
    format_info_ocp_e5m2,
)
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

__all__ = ["GFLOAT", "SPECIALS", "DTYPES", "gfloat_round", "ref_cast", "check_cast", "arrays_of"]


GFLOAT = {"float32": format_info_binary32, "float16": format_info_binary16, "bfloat16": format_info_bfloat16,
          "float8_e4m3fn": format_info_ocp_e4m3, "float8_e5m2": format_info_ocp_e5m2}


# the storage dtype of each format, written out (not fpsim's table)
DTYPES = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16),
          "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn), "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2)}


SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 2.0**-149, 2.0**-24, 2.0**-25, 2.0**-133, 448.0, 464.0,
            465.0, 57344.0, 61440.0, 65504.0, 65520.0, 3.4e38, 1e300, -1e-300, 5e-324]


def gfloat_round(x64, name, rounding, saturate):
    modes = {"nearest": RoundMode.TiesToEven, "toward_zero": RoundMode.TowardZero,
             "up": RoundMode.TowardPositive, "down": RoundMode.TowardNegative}
    with np.errstate(all="ignore"):
        return round_ndarray(GFLOAT[name], np.asarray(x64, np.float64), modes[rounding], saturate)


def ref_cast(x64, name, rounding, saturate):
    """The reference result(s) in the format's storage dtype: one array, or for stochastic
    rounding the two neighbours it may land on."""
    dt = DTYPES[name]
    to = lambda r: np.asarray(r).astype(dt).reshape(np.shape(x64))  # noqa: E731 - exact: r is on the grid
    if rounding != "stochastic":
        return [to(gfloat_round(x64, name, rounding, saturate))]
    up, down = gfloat_round(x64, name, "up", saturate), gfloat_round(x64, name, "down", saturate)
    return [to(up), to(down)]


def check_cast(x64, got, name, rounding, saturate):
    refs = ref_cast(x64, name, rounding, saturate)
    assert got.dtype == DTYPES[name] and got.shape == np.shape(x64)
    ok = np.zeros(got.shape, bool)
    for r in refs:
        ok |= same_bits(got, r).reshape(got.shape)  # (same_bits makes 0-d 1-d)
    assert ok.all(), (name, rounding, saturate, x64[~ok][:4], got[~ok][:4])


def arrays_of(dtype):
    """Arrays of ``dtype``: any of its values, the special values it can hold, and ordinary numbers."""
    width = np.dtype(dtype).itemsize * 8
    fits = [v for v in SPECIALS if not math.isfinite(v) or abs(v) <= float(np.finfo(dtype).max)]
    return hnp.arrays(dtype, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
                      elements=st.one_of(st.floats(width=width), st.sampled_from(fits),
                                         st.floats(-1e4, 1e4, width=width)))
