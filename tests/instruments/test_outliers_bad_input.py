"""The outlier instrument on non-finite activations and bad arguments: a NaN or inf is never a perfect
fp8 fit (relative MSE NaN, not 0), the report says which module's output was non-finite, and every
bad argument (a model that is no Module, an unwatched module, a field that is no statistic) is
refused in one line naming it and what is known."""

import numpy as np
import pytest

from fpsim import nn
from fpsim.outliers import OutlierMonitor, fp8_error


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_fp8_error_of_a_non_finite_tensor_is_nan(bad):
    got = fp8_error(np.array([1.0, 2.0, bad, 0.5], np.float32))
    assert np.isnan(got["rel_mse"]) and np.isnan(got["small"])
    assert fp8_error(np.array([1.0, 2.0, 0.5], np.float32))["rel_mse"] >= 0  # finite: a number


def _model_with_nan():
    m = nn.Sequential(nn.Linear(4, 3, seed=0), nn.ReLU(), nn.Linear(3, 2, seed=1))
    w = m[2].weight.numpy().copy()
    w[0, 0] = np.nan
    m[2].weight.data[...] = w  # the last layer's output holds NaN
    return m


def test_the_report_says_the_activation_is_non_finite():
    m = _model_with_nan()
    root = nn.Sequential(m)  # the root is never watched: watch m's layers below it
    x = np.ones((5, 4), np.float32)
    with OutlierMonitor(root) as om:
        root(x)
        root(x)
    row = [r for r in om.rows if r.module == "0.2"][-1]
    assert np.isnan(row.fp8_rel_mse) and np.isnan(row.max_abs)
    report = om.report()
    line = [ln for ln in report.splitlines() if ln.startswith("0.2 ")][0]
    assert "0.00e+00" not in line and "non-finite" in line
    assert "0.2: output non-finite (NaN or inf) in 2 of 2 passes, first at pass 0" in report
    finite = [ln for ln in report.splitlines() if ln.startswith("0.0 ")][0]
    assert "non-finite" not in finite


@pytest.mark.parametrize("model", ["model", 3, None, np.zeros(3)])
def test_a_model_that_is_no_module_is_refused_in_one_line(model):
    with pytest.raises(TypeError, match=r"^OutlierMonitor: model must be an fpsim Module .*got "):
        OutlierMonitor(model)


def test_series_of_an_unwatched_module_or_unknown_field_is_refused():
    m = nn.TinyGPT(11, 8, d_model=16, n_layers=1, n_heads=2)
    with OutlierMonitor(m, modules=["blocks.0", "ln_f"]) as om:
        m(np.zeros((2, 8), dtype=int))
    assert list(om.series("ln_f", "n")) == [2 * 8 * 16]
    with pytest.raises(ValueError, match=r"^OutlierMonitor.series: module 'nosuchmodule' is not watched; "
                                         r"watched: blocks.0, ln_f$"):
        om.series("nosuchmodule")
    with pytest.raises(ValueError, match=r"^OutlierMonitor.series: field 'nosuchfield' is not a statistic; "
                                         r"known: n, kurtosis, max_abs, median_abs, top_ratio, fp8_rel_mse, "
                                         r"fp8_small$"):
        om.series("ln_f", "nosuchfield")
    with pytest.raises(ValueError, match="field 'module' is not a statistic"):
        om.series("ln_f", "module")


# -- the statistics read an fpsim Tensor, and refuse text and other formats in one line (issue 42) --

def test_fp8_error_and_kurtosis_read_a_tensor_as_its_stored_values():
    import ml_dtypes

    from fpsim import tensor
    from fpsim.outliers import excess_kurtosis

    b = float(np.float32(0.001).astype(ml_dtypes.bfloat16))  # the stored bfloat16 value of 0.001
    # by hand: amax 3 gives the scale 2^floor(log2(448 / 3)) = 128; 128 and 384 are e4m3 values, 128 b
    # (0.128...) lies in [2^-3, 2^-2), where e4m3's step is 2^-6, and rounds to 0.125
    want = ((0.125 - b * 128) / 128) ** 2 / (1.0 + 9.0 + b * b)
    got = fp8_error(tensor([1.0, 3.0, 0.001], "bf16"))  # was "setting an array element with a sequence"
    assert got == {"rel_mse": pytest.approx(want, rel=1e-12), "small": 0.0, "scale": 128.0}
    # 0, 1, 2, 3: m2 = 1.25, m4 = 2.5625, m4 / m2^2 - 3 = -1.36
    assert excess_kurtosis(tensor([0.0, 1.0, 2.0, 3.0], "fp16")) == pytest.approx(-1.36, rel=1e-15)


@pytest.mark.parametrize("x", ["abc", ["1.0"], [[1.0], [1.0, 2.0]], np.array(["1"])])
def test_the_statistics_refuse_what_is_no_numbers_naming_themselves(x):
    from fpsim.outliers import excess_kurtosis

    for fn in (fp8_error, excess_kurtosis):  # "abc" was numpy's "could not convert string to float"
        with pytest.raises(TypeError, match=rf"^{fn.__name__}: x must be numbers \(a numpy array, a list of numbers "
                                            rf"or an fpsim Tensor\), got "):
            fn(x)


@pytest.mark.parametrize("x", [[1.0, 2.0], [np.nan]])
def test_fp8_error_refuses_a_format_that_is_no_fp8_naming_itself(x):
    with pytest.raises(ValueError, match=r"^fp8_error: fmt 'bf16': bfloat16 is not an fp8 / fp6 / fp4 format"):
        fp8_error(np.array(x), "bf16")  # was f32_to_fp8's message; with a NaN, no error at all


def test_modules_as_one_path_string_or_classes_that_match_nothing():
    m = nn.Sequential(nn.Sequential(nn.Linear(2, 2, seed=0), nn.Tanh()), nn.Linear(2, 1, seed=1))
    assert OutlierMonitor(m, modules="0.1").paths == ["0.1"]  # was its letters: "modules ['0', '.', '1'] are not"
    with pytest.raises(ValueError, match=r"^OutlierMonitor: no sub-module of the model is a ReLU; its modules are "
                                         r"Linear, Sequential, Tanh$"):
        OutlierMonitor(m, modules=(nn.ReLU,))  # was a monitor that watched nothing
