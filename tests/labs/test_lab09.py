"""Lab 09's reference solutions give the edges the lab quotes, computed here independently with
numpy's float16 and ml_dtypes' bfloat16 (the notebook's self-checks and the wrong answers are run
by tests/labs/test_labs.py).  The lab's helpers: the five attention variants."""

import math

import ml_dtypes
import numpy as np
import pytest

from fpsim.labs import overflow
from fpsim.labs.solutions import lab09, solution_source

DTYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32}


def _softmax_edge(fmt, n):
    """The largest s with float(exp(s)) and float(n * float(exp(s))) both finite, by ml_dtypes' casts."""
    dt, s = DTYPES[fmt], 0
    with np.errstate(over="ignore"):
        while True:
            e = np.exp(np.float32(s + 1)).astype(dt).astype(np.float32)
            if not (np.isfinite(e) and np.isfinite((np.float32(n) * e).astype(dt))):
                return s
            s += 1


@pytest.mark.parametrize("fmt,n", [("float16", 1), ("float16", 2), ("float16", 32), ("float16", 1200),
                                   ("bfloat16", 112), ("bfloat16", 305), ("float32", 3)])
def test_exercise1_against_ml_dtypes(fmt, n):
    assert lab09.exercise1(fmt, n) == _softmax_edge(fmt, n)


def test_the_edges_the_lab_quotes():
    assert lab09.exercise1("float16", 1) == 11 and lab09.exercise1("float16", 2) == 10
    assert lab09.exercise1("float16", 1200) == 4 != math.floor(math.log(65504 / 1200))  # the sum rounds down
    assert lab09.exercise2("float16") == 16.0 and lab09.exercise2("float8_e5m2") == 4096.0
    assert lab09.exercise2("bfloat16") == 2.0**119 and lab09.exercise2("float32") == 2.0**103
    with np.errstate(over="ignore"):  # the overflow to -inf is the point
        assert np.float16(-65504.0) - np.float16(16.0) == -np.inf
    assert np.float16(-65504.0) - np.float16(15.984375) == -65504
    assert lab09.exercise3(64) == 31
    # the running float16 sum against the closed form sqrt(65504 / n): up for n = 31, down for 43 and 104
    assert [lab09.exercise3(n) for n in (31, 43, 104)] == [46, 38, 24]
    assert [int(math.sqrt(65504 / n)) for n in (31, 43, 104)] == [45, 39, 25]
    assert "def exercise3" in solution_source(9, 3)


def test_attention_variants():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 8, 16)) * 3.5 for _ in range(3))
    outs = overflow.attention_variants(q, k, v)
    assert list(outs) == ["float32", "float16", "float16, no max-subtraction", "float16, finfo.min mask",
                          "autocast float16"]
    nan = {n: int(np.isnan(y).sum()) for n, y in outs.items()}
    assert nan["float16, no max-subtraction"] > 0 and sum(nan.values()) == nan["float16, no max-subtraction"]
    table = overflow.variant_table(outs)
    assert "max |diff| vs float32" in table and len(table.splitlines()) == 7
