"""The outlier instrument: excess kurtosis against exact rationals and a float64 formula, the
per-tensor fp8 error against ml_dtypes, the monitor's rows against the module outputs
recomputed by hand, the model given back untouched, the report, and bad input."""

from fractions import Fraction as Q

import ml_dtypes
import numpy as np
import pytest

from fpsim import nn
from fpsim.outliers import OutlierMonitor, excess_kurtosis, fp8_error


def _kurtosis_exact(values) -> float:
    """m4 / m2^2 - 3 in exact rational arithmetic (the float32 values are exact binary fractions)."""
    xs = [Q(float(v)) for v in values]
    mean = sum(xs) / len(xs)
    m2 = sum((x - mean) ** 2 for x in xs) / len(xs)
    m4 = sum((x - mean) ** 4 for x in xs) / len(xs)
    return float(m4 / (m2 * m2) - 3)


@pytest.mark.parametrize("draw", ["gaussian", "student_t3", "one_outlier"])
def test_excess_kurtosis_against_exact_rationals(draw):
    rng = np.random.default_rng(0)
    x = {"gaussian": rng.normal(size=300), "student_t3": rng.standard_t(3, size=300),
         "one_outlier": np.r_[rng.normal(size=299), 1000.0]}[draw].astype(np.float32)
    assert excess_kurtosis(x) == pytest.approx(_kurtosis_exact(x), rel=1e-12, abs=1e-12)


def test_excess_kurtosis_known_values_and_edge_cases():
    assert excess_kurtosis([-1.0, 1.0]) == -2.0  # two points: m4 = m2^2 = 1
    pq = 0.01 * 0.99  # one 1 among 99 zeros, a Bernoulli(0.01): excess kurtosis (1 - 6pq) / pq
    assert excess_kurtosis(np.r_[np.zeros(99), 1.0]) == pytest.approx((1 - 6 * pq) / pq, rel=1e-12)
    assert np.isnan(excess_kurtosis(np.ones(5))) and np.isnan(excess_kurtosis([]))
    big = np.random.default_rng(1).normal(size=200_000)
    assert abs(excess_kurtosis(big)) < 0.05  # a Gaussian's excess kurtosis is 0


def _fp8_reference(x):
    """e4m3 with s = 2^floor(log2(448 / amax)), rounded by ml_dtypes from float32 (exact: x * s is)."""
    x = np.asarray(x, np.float32)
    s = 2.0 ** np.floor(np.log2(448.0 / np.abs(x).max()))
    q = (x * np.float32(s)).astype(ml_dtypes.float8_e4m3fn).astype(np.float64) / s
    return np.sum((q - x.astype(np.float64)) ** 2) / np.sum(x.astype(np.float64) ** 2), s


@pytest.mark.parametrize("spread", [1.0, 1e3, 1e5])
def test_fp8_error_against_ml_dtypes(spread):
    """A Gaussian bulk with one outlier ``spread`` times its scale: the relative MSE and the
    share of entries below e4m3's smallest normal after scaling (2^-6), against ml_dtypes."""
    rng = np.random.default_rng(2)
    x = np.r_[rng.normal(size=4000), spread * 3].astype(np.float32)
    got = fp8_error(x)
    want, s = _fp8_reference(x)
    assert got["scale"] == s
    assert got["rel_mse"] == pytest.approx(want, rel=1e-12)
    assert got["small"] == pytest.approx(np.mean(np.abs(x.astype(np.float64) * s) < 2.0**-6))
    assert {1.0: got["small"] < 1e-3, 1e3: 0.05 < got["small"] < 0.2, 1e5: got["small"] > 0.5}[spread]


def test_the_monitor_reads_each_module_output_and_gives_the_model_back():
    m = nn.TinyGPT(11, 8, d_model=16, n_layers=2, n_heads=2, seed=1)
    ids = np.random.default_rng(0).integers(0, 11, (3, 8))
    before = m(ids).numpy()
    with OutlierMonitor(m, modules=["blocks.0", "blocks.1.attn", "ln_f"]) as om:
        m(ids)
        m(ids[:, :5])
    assert [(r.pass_, r.module) for r in om.rows] == [(0, "blocks.0"), (0, "blocks.1.attn"), (0, "ln_f"),
                                                      (1, "blocks.0"), (1, "blocks.1.attn"), (1, "ln_f")]
    assert all("forward" not in mod.__dict__ for _, mod in m.named_modules())  # nothing left behind
    assert all(blk.attn.max_logits is None for blk in m.blocks)
    np.testing.assert_array_equal(m(ids).numpy(), before)
    # the rows hold the statistics of the outputs, recomputed here from the same module calls
    x = m.tok_emb(ids) + m.pos_emb(np.arange(8))
    out0 = m.blocks[0](x).numpy().astype(np.float64)
    r = om.rows[0]
    assert r.n == out0.size and r.max_abs == np.abs(out0).max() and r.median_abs == np.median(np.abs(out0))
    assert r.kurtosis == pytest.approx(_kurtosis_exact(out0.ravel()), rel=1e-10)
    assert r.fp8_rel_mse == pytest.approx(_fp8_reference(out0)[0], rel=1e-12)
    assert list(om.series("ln_f", "n")) == [3 * 8 * 16, 3 * 5 * 16]
    logits = om.logits()
    assert set(logits) == {"blocks.0.attn", "blocks.1.attn"} and all(len(v) == 2 for v in logits.values())
    rep = om.report()
    assert "blocks.1.attn" in rep and "kurt last" in rep and "largest attention logit" in rep


def test_the_monitor_by_class_and_bad_paths():
    m = nn.TinyGPT(11, 8, d_model=16, n_layers=2, n_heads=2)
    assert OutlierMonitor(m, modules=(nn.transformer.TransformerBlock,)).paths == ["blocks.0", "blocks.1"]
    assert "blocks.0.mlp.0" in OutlierMonitor(m).paths and "" not in OutlierMonitor(m).paths
    with pytest.raises(ValueError, match="OutlierMonitor: modules .'blocks.7'. are not"):
        OutlierMonitor(m, modules=["blocks.7"])


def test_the_monitor_gives_the_model_back_after_an_error():
    m = nn.TinyGPT(11, 8, d_model=16, n_layers=1, n_heads=2)
    with pytest.raises(ValueError), OutlierMonitor(m):
        m(np.zeros((2, 9), dtype=int))  # longer than the context
    assert all("forward" not in mod.__dict__ for _, mod in m.named_modules())


def test_every_nth_pass():
    m = nn.TinyGPT(11, 8, d_model=16, n_layers=1, n_heads=2)
    ids = np.zeros((2, 8), dtype=int)
    with OutlierMonitor(m, modules=["blocks.0"], every=2) as om:
        for _ in range(5):
            m(ids)
    assert [r.pass_ for r in om.rows] == [0, 2, 4]
    assert len(om.logits()["blocks.0.attn"]) == 5  # the logit probe sees every pass
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="every must be an integer >= 1"):
            OutlierMonitor(m, every=bad)


def test_the_docs_example_prints_what_the_page_quotes(capsys):
    """docs/outliers.md's example, run as written, prints the table the page shows."""
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "outliers.md").read_text()
    code, quoted = re.findall(r"```python\n(.*?)```.*?```\n(.*?)```", page, flags=re.S)[0]
    exec(compile(code, "docs/outliers.md", "exec"), {})
    assert capsys.readouterr().out == quoted
