"""fpsim.sr_bias: the bias of few-bit stochastic rounding, against the closed form computed here
with fractions (E[round(v)] = lo + P(up) * ulp, P(up) the share of the 2**k random integers that
send v up, by the variant's rule), and the bounds the docs state."""

import math
from fractions import Fraction

import numpy as np
import pytest
from support.sr_reference import p_up

import fpsim


@pytest.mark.parametrize("variant", fpsim.formats.SR_VARIANTS)
@pytest.mark.parametrize("k", [1, 3, 5])
def test_bias_equals_the_closed_form(k, variant):
    v = 1 + np.random.default_rng(k).random(64)
    ulp = Fraction(2**-7)  # bfloat16 in [1, 2)
    row, = fpsim.formats.sr_bias("bfloat16", sr_bits=(k,), variants=(variant,), values=v)
    want = []
    for x in v:
        delta = Fraction(x) / ulp - math.floor(Fraction(x) / ulp)
        want.append(float(p_up(delta, k, variant) - delta))
    assert row["mean_bias_ulp"] == pytest.approx(np.mean(want), rel=1e-9, abs=1e-15)
    assert row["max_abs_bias_ulp"] == pytest.approx(np.max(np.abs(want)), rel=1e-9)


def test_the_bounds_the_docs_state():
    rows = fpsim.formats.sr_bias("float16", sr_bits=(2, 4, 8, None))
    for r in rows:
        k = r["sr_bits"]
        if k is None:
            assert r["max_abs_bias_ulp"] == 0 and r["variant"] == "exact"
        elif r["variant"] == "fastest":  # truncation: always down, by up to one step of 2**-k
            assert -(2.0**-k) < r["mean_bias_ulp"] < 0 and r["max_abs_bias_ulp"] <= 2.0**-k
            assert r["mean_bias_ulp"] == pytest.approx(-(2.0 ** -(k + 1)), rel=0.1)
        else:  # rounded to k bits: at most half a step either way, about 0 on average
            assert r["max_abs_bias_ulp"] <= 2.0 ** -(k + 1) and abs(r["mean_bias_ulp"]) < 2.0 ** -(k + 3)
    assert "fastest" in fpsim.formats.sr_bias_table("float16", sr_bits=(4,))
