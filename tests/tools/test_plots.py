"""fpsim.tools.plots: the histogram numbers exactly, and every figure function runs under Agg.

Nothing is asserted on pixels: the figures are checked by their axes and artists.
"""

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.collections import LineCollection  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import StepPatch  # noqa: E402

from fpsim.tools import plots  # noqa: E402

DTYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
          "float8_e5m2": ml_dtypes.float8_e5m2}


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def values_fixture():
    # 3 x 2^-30, 5 x -2^-20, 2 x 1.0, 4 zeros, 1 NaN
    return np.concatenate([np.full(3, 2.0**-30), np.full(5, -(2.0**-20)), np.ones(2), np.zeros(4), [np.nan]])


def test_histogram_data_counts_and_percentages():
    v = values_fixture()
    d = plots.histogram_data(v)
    x = np.log2(np.abs(v[np.isfinite(v) & (v != 0)]))
    assert d.edges[0] == -30 and d.edges[-1] == 0 and np.allclose(np.diff(d.edges), 0.25)
    np.testing.assert_array_equal(d.counts, np.histogram(x, d.edges)[0])
    assert d.counts.sum() == 10 and (d.n, d.zeros, d.nonfinite, d.nonzero) == (15, 4, 1, 10)
    # float16: 2^-30 <= 2^-25 flushes (3 of 10), 2^-20 is subnormal (5 of 10)
    assert d.percent["float16"] == {"flushed": 30.0, "subnormal": 50.0, "overflow": 0.0}
    assert d.percent["bfloat16"] == {"flushed": 0.0, "subnormal": 0.0, "overflow": 0.0}
    assert d.percent["float8_e5m2"]["flushed"] == 80.0  # 2^-20 <= 2^-17 flushes too
    assert d.percent["float8_e4m3fn"]["flushed"] == 80.0
    assert d.scale is None and d.percent_scaled is None

    s = plots.histogram_data(v, scale=2.0**10)
    assert s.shift == 10 and np.array_equal(s.scaled_edges, s.edges + 10)
    # x 2^10: 2^-20 (now subnormal) is kept, 2^-10 is normal
    assert s.percent_scaled["float16"] == {"flushed": 0.0, "subnormal": 30.0, "overflow": 0.0}
    assert s.percent == d.percent


def test_histogram_data_percentages_match_ml_dtypes():
    rng = np.random.default_rng(7)
    v = (np.exp2(rng.uniform(-40, 18, 5000)) * rng.choice([-1.0, 1.0], 5000)).astype(np.float32)
    d = plots.histogram_data(v, scale=4.0)
    for name, dt in DTYPES.items():
        for scale, pct in ((1.0, d.percent[name]), (4.0, d.percent_scaled[name])):
            with np.errstate(over="ignore"):
                r = (v * np.float32(scale)).astype(dt).astype(np.float64)  # exact: power-of-two scale
            tiny = float(ml_dtypes.finfo(dt).smallest_normal)
            assert pct["flushed"] == pytest.approx(100 * np.mean(r == 0), abs=1e-12), name
            assert pct["subnormal"] == pytest.approx(100 * np.mean((r != 0) & (np.abs(r) < tiny)), abs=1e-12)
            assert pct["overflow"] == pytest.approx(100 * np.mean(~np.isfinite(r)), abs=1e-12)
    assert d.percent["float16"]["overflow"] > 0 and d.percent["float8_e4m3fn"]["overflow"] > 0


def test_histogram_bins_int_and_edges():
    v = values_fixture()
    d = plots.histogram_data(v, bins=10)
    np.testing.assert_array_equal(d.edges, np.linspace(-30, 0, 11))
    assert d.counts.tolist() == [3, 0, 0, 5, 0, 0, 0, 0, 0, 2]  # bins 3 wide: -20 in [-21, -18)
    edges = np.array([-40.0, -25.0, -14.0, 0.5])
    d = plots.histogram_data(v, bins=edges)
    assert d.counts.tolist() == [3, 5, 2]
    with pytest.raises(ValueError, match="increasing"):
        plots.histogram_data(v, bins=[1.0, 0.0])
    with pytest.raises(ValueError, match="scale"):
        plots.histogram_data(v, scale=0.0)


def test_format_bands_are_the_format_constants():
    b = plots.format_bands("float16")
    assert b["subnormal"] == (-24.0, -14.0) and b["flush"] == (-math.inf, -25.0)
    assert b["normal"] == (-14.0, math.log2(65504.0)) and b["overflow"][0] == math.log2(65504.0)
    assert plots.format_bands("bf16")["subnormal"] == (-133.0, -126.0)
    assert plots.format_bands("e4m3")["subnormal"] == (-9.0, -6.0)
    assert plots.format_bands("e4m3")["overflow"][0] == math.log2(448.0)
    assert plots.format_bands("e5m2")["subnormal"] == (-16.0, -14.0)
    assert plots.format_bands("e5m2")["normal"][1] == math.log2(57344.0)


def test_gradient_histogram_figure(tmp_path):
    v = values_fixture()
    fig = plots.gradient_histogram(v, path=tmp_path / "h.png")
    assert isinstance(fig, Figure) and len(fig.axes) == 4
    assert (tmp_path / "h.png").stat().st_size > 0
    assert all(sum(isinstance(p, StepPatch) for p in ax.patches) == 1 for ax in fig.axes)
    fig = plots.gradient_histogram(v, formats=("fp16", "bf16"), scale=1024)
    assert len(fig.axes) == 2
    assert all(sum(isinstance(p, StepPatch) for p in ax.patches) == 2 for ax in fig.axes)
    assert "scaled x 1024" in fig.axes[0].texts[0].get_text()
    _, ax = plt.subplots()
    assert plots.gradient_histogram(v, formats=("float16",), ax=ax) is ax.figure
    with pytest.raises(ValueError, match="Axes"):
        plots.gradient_histogram(v, ax=ax)


def test_loss_curves_of_your_own_loop_go_through_the_compare_figure():
    """Plain lists of losses (a loop of your own): the one figure, the one death rule (the
    first non-finite loss), the one colour / dash assignment."""
    from fpsim.tools.compareplot import compare_figure

    curves = {"fp32": [1.0, 0.5, 0.25, 0.2], "fp16-pure": [1.0, 0.6, np.nan, np.nan],
              "fp16-master": [1.0, 0.5, 0.26, 0.21], "bf16-pure": [1.0, 0.55, 0.4, np.inf]}
    cf = compare_figure(curves, panels=["loss"])
    ax = cf.axes["loss"]
    assert ax.get_yscale() == "log"
    dead = [ln for ln in ax.lines if ln.get_marker() == "X"]
    assert [(tuple(ln.get_xdata()), tuple(ln.get_ydata())) for ln in dead] == [((2,), (0.6,)), ((3,), (0.4,))]
    assert [(d.recipe, d.step) for d in cf.deaths] == [("fp16-pure", 2), ("bf16-pure", 3)]
    styles = plots.recipe_styles(curves)
    assert styles["fp16-pure"] == (plots.FORMAT_COLORS["float16"], "-")
    assert styles["fp16-master"] == (plots.FORMAT_COLORS["float16"], "--")
    assert styles["bf16-pure"] == (plots.FORMAT_COLORS["bfloat16"], "-")
    colors = {ln.get_label(): ln.get_color() for ln in ax.lines}
    assert colors["fp16-pure"] == colors["fp16-master"] == plots.FORMAT_COLORS["float16"]


def test_loss_scale_plot_bools_or_indexes():
    scales = [2.0**16, 2.0**15, 2.0**15, 2.0**16, 2.0**15]
    for skipped in ([True, False, False, False, True], [0, 4]):
        fig = plots.loss_scale_plot(scales, skipped)
        (ax,) = fig.axes
        assert ax.get_yscale() == "log"
        marks = [ln for ln in ax.lines if ln.get_marker() == "X"]
        assert len(marks) == 1 and list(marks[0].get_xdata()) == [0, 4]
        assert list(marks[0].get_ydata()) == [2.0**16, 2.0**15]
    with pytest.raises(ValueError, match="one per step"):
        plots.loss_scale_plot(scales, [True, False])
    with pytest.raises(ValueError, match="indexes"):
        plots.loss_scale_plot(scales, [5])


def test_ulp_plot_steps_through_each_format():
    fig = plots.ulp_plot()
    (ax,) = fig.axes
    assert len(ax.lines) == 5 and len(ax.collections) == 5
    lines = {ln.get_label(): ln for ln in ax.lines}
    xs, ys = (np.asarray(a) for a in lines["float16"].get_data())
    # ulp is the smallest subnormal through the subnormal range, 2^-10 at 1, 32 at max
    assert ys[0] == 2.0**-24 and xs[0] == 2.0**-24
    assert ys[np.searchsorted(xs, 1.0)] == 2.0**-10
    assert xs[-1] == 65504.0 and ys[-1] == 32.0
    xs, ys = (np.asarray(a) for a in lines["float8_e4m3fn"].get_data())
    assert xs[0] == 2.0**-9 and xs[-1] == 448.0 and ys[-1] == 32.0  # 448 = 1.75 x 2^8, ulp 2^(8-3)


def _segments(ax):
    return sum(len(c.get_segments()) for c in ax.collections if isinstance(c, LineCollection))


def test_number_line_counts_every_value():
    pats = np.arange(256, dtype=np.uint8)
    e4 = pats.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    want = np.unique(e4[np.isfinite(e4)]).size  # 253: 256 patterns, 2 NaN, +0 == -0
    fig = plots.number_line("e4m3")
    assert want == 253 and _segments(fig.axes[0]) == want
    h = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float64)
    lo, hi = 1 - 32 * 2.0**-10, 1 + 64 * 2.0**-10
    fig = plots.number_line("float16")
    assert _segments(fig.axes[0]) == np.unique(h[(h >= lo) & (h <= hi)]).size == 129
    # e5m2 in [0, 2^-13]: zero, 3 subnormals, then normals 2^-14 .. 2^-13
    fig = plots.number_line("e5m2", 0, 2.0**-13)
    labels = sorted(c.get_label() for c in fig.axes[0].collections if isinstance(c, LineCollection))
    assert labels == ["normal (5)", "subnormal (3)", "zero (1)"]
    with pytest.raises(ValueError, match="at most 16 bits"):
        plots.number_line("float32")
    with pytest.raises(ValueError, match="lo < hi"):
        plots.number_line("e4m3", 1, 0)
