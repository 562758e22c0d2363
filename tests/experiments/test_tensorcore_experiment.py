"""The K-sweep experiment (fpsim.experiments.accumulation): its dot products against MMA-Sim and
float64, and the shape of what it reports."""

import math

import ml_dtypes
import numpy as np
import pytest
from support.tensorcore_reference import mmasim

from fpsim.experiments import accumulation as acc
from fpsim.numerics.random import normal


def _inputs(k, n, data, seed, dt):
    x = normal(np.random.default_rng(seed), (2, n, k))  # fpsim's float32 normal draws, as the sweep's
    x = np.abs(x) if data == "all-positive" else x
    return x[0].astype(dt), x[1].astype(dt)


@pytest.mark.parametrize("method,promote", [("hopper fp8", None), ("hopper fp8, promote every 128", 128)])
def test_relative_errors_are_mma_sims(method, promote):
    k, n = 256, 6
    e = acc.relative_errors(k, method, "all-positive", n=n, seed=3)
    a, b = _inputs(k, n, "all-positive", 3, ml_dtypes.float8_e4m3fn)
    for i in range(n):
        exact = math.fsum(a[i].astype(np.float64) * b[i].astype(np.float64))  # exact products, one rounding
        chunks = [(0, k)] if promote is None else [(j, j + promote) for j in range(0, k, promote)]
        total = np.float32(0)
        for j0, j1 in chunks:  # each chunk a chain from zero; the chunks added in float32
            d = mmasim("hopper", a[i:i + 1, j0:j1], b[i, j0:j1, None], np.zeros((1, 1), np.float32),
                       "float8_e4m3fn", "float8_e4m3fn")
            total = np.float32(total + d[0, 0])
        assert e[i] == (float(total) - exact) / abs(exact)


def test_the_sweep_shows_the_bias_and_its_cure():
    rows = acc.sweep(ks=(128, 1024), methods=("float32 (fp8 inputs)", "hopper fp8", "hopper fp8, promote every 128"),
                     data=("all-positive",), n=64)
    cell = {(r["method"], r["k"]): r for r in rows}
    assert abs(cell["float32 (fp8 inputs)", 1024]["mean"]) < 1e-6
    assert cell["hopper fp8", 1024]["mean"] < 2 * cell["hopper fp8", 128]["mean"] < 0  # truncation: a growing loss
    assert cell["hopper fp8", 1024]["mean"] < 5 * cell["hopper fp8, promote every 128", 1024]["mean"] < 0
    text = acc.sweep_table(rows)
    assert "all-positive data, mean relative error" in text and "hopper fp8" in text


def test_figure_has_a_line_per_method():
    rows = acc.sweep(ks=(64, 128), methods=("hopper fp8", "ampere bf16"), n=8)
    fig = acc.sweep_figure(rows)
    assert [len(ax.lines) for ax in fig.axes] == [2, 2]


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown method 'volta fp8'"):
        acc.relative_errors(128, "volta fp8")
    with pytest.raises(ValueError, match="unknown data 'negative'"):
        acc.relative_errors(128, data="negative")
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        acc.relative_errors(0)


def test_speed_reports_both_timings_and_their_ratio():
    out = acc.speed(m=8, k=64, n=8, repeats=1)
    assert set(out) == {"tensorcore_s", "blas_s", "ratio"}
    assert out["tensorcore_s"] > 0 and out["blas_s"] > 0
    assert out["ratio"] == out["tensorcore_s"] / out["blas_s"]
