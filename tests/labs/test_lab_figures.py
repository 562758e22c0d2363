"""Lab 10's block figure (``fpsim.labs.figures.block_figure``), read back from the Axes it drew:
MXFP4 and MXFP8 pinned by hand from the OCP MX rule (X = 2^(floor(log2 amax) - emax_elem),
elements rounded to nearest even) with ml_dtypes as the element reference; NVFP4 against what
its quantizer's stats count."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import fpsim  # noqa: E402
from fpsim.labs.figures import block_figure  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _block():
    rng = np.random.default_rng(0)
    b = rng.normal(0, 1, 32).astype(np.float32)
    b[5] = 100.0
    return b


def _marks(ax, marker):
    return [(float(x), float(y)) for ln in ax.lines if ln.get_marker() == marker
            for x, y in zip(ln.get_xdata(), ln.get_ydata())]


def test_mxfp4_and_mxfp8_value_by_value():
    b = _block()
    fig = block_figure(b, formats=("mxfp4_e2m1", "mxfp8_e4m3"))
    mx4, mx8 = fig.axes[:2]
    # MXFP4: X = 2^(6 - 2) = 16; |x| / 16 <= 0.25 (every value but the outlier) becomes 0; 100 / 16 = 6.25 -> 6
    assert max(abs(b[np.arange(32) != 5])) <= 4
    lost = [x for x, _ in _marks(mx4, "X")]
    assert lost == [float(i) for i in range(32) if i != 5]
    assert _marks(mx4, "v") == [(5.0, 96.0)]
    assert mx4.get_title() == "mxfp4_e2m1 (blocks of 32): 31 of the 32 non-zero values lost to 0, 1 clamped"
    assert [t.get_text() for t in mx4.texts] == ["block scale 16"]
    # MXFP8: X = 2^(6 - 8) = 1/4, every element x * 4 rounded to e4m3 by ml_dtypes
    want = np.abs((b * 4).astype(ml_dtypes.float8_e4m3fn).astype(np.float64) / 4)
    (back,) = [ln for ln in mx8.lines if ln.get_label() == "|value| back"]
    np.testing.assert_array_equal(back.get_ydata(), want)
    assert not _marks(mx8, "X") and not _marks(mx8, "v")


def test_nvfp4_marks_what_its_stats_count():
    b = _block()
    q = fpsim.quantize(b, "nvfp4")
    ax = block_figure(b, formats=("nvfp4",)).axes[0]
    assert len(_marks(ax, "X")) == int(q.stats.underflow.sum()) == 15  # the outlier's half of 16
    assert len(_marks(ax, "v")) == int(q.stats.saturated.sum()) == 1
    assert [x for x, _ in _marks(ax, "X")] == [float(i) for i in range(16) if i != 5]
    assert [ln.get_xdata()[0] for ln in ax.lines if ln.get_linestyle() == "--"] == [15.5]  # the blocks' edge


def test_block_argument_is_checked():
    with pytest.raises(ValueError, match="block"):
        block_figure(np.zeros(32))
    with pytest.raises(ValueError, match="block"):
        block_figure(np.ones((2, 32)))
