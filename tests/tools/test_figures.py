"""fpsim figures and the shipped example dump.

The figures are checked as files (every one written, each a valid, non-empty PNG that
matplotlib reads back); the dump is checked as data: its layout, the tanh relation between
neighbouring layers' gradients, `fpsim audit`'s flush counts against numpy's own
float32 -> float16 cast, and bit for bit against what the code regenerates.
"""

import json
import struct
from importlib import resources
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.image as mpimg  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from helpers import small_task  # noqa: E402

from fpsim.tools import cli  # noqa: E402
from fpsim.tools.figures import example_dump_path, write_reference_dump  # noqa: E402

EXPECTED_FIGURES = [
    "gradient_histogram_activation.png",
    "gradient_histogram_weight.png",
    "loss_curves.png",
    "loss_scale.png",
    "ulp.png",
    "number_line_fp8.png",
    "number_line_float16_subnormal.png",
    "loss_curves_beyond_fp16.png",
]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# The reference autoencoder 64-32-8-32-64 with tanh between: a Sequential of
# Linear(0) Tanh(1) Linear(2) Tanh(3) Linear(4) Tanh(5) Linear(6).
ACT_WIDTHS = {"0": 32, "1": 32, "2": 8, "3": 8, "4": 32, "5": 32, "6": 64}
WEIGHT_SHAPES = {"0": (32, 64), "2": (8, 32), "4": (32, 8), "6": (64, 32)}
DUMP_ROWS = 256


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == PNG_MAGIC, f"{path.name} is not a PNG"
    assert head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


def test_figures_quick_writes_every_figure(tmp_path, capsys):
    out = tmp_path / "figs"
    assert cli.main(["figures", "--quick", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    printed = captured.out.split()
    assert printed == [str(out / name) for name in EXPECTED_FIGURES]
    assert sorted(p.name for p in out.iterdir()) == sorted(EXPECTED_FIGURES)
    # Under pytest stderr is not a terminal: progress comes as one line per stage.
    assert "fpsim figures: recipes" in captured.err
    for name in EXPECTED_FIGURES:
        path = out / name
        assert path.stat().st_size > 10_000, name
        w, h = _png_size(path)
        assert w >= 600 and h >= 300, (name, w, h)
        img = mpimg.imread(path)
        assert img.shape[:2] == (h, w)
        assert img.std() > 0.01, f"{name} is blank"


def test_figures_cli_rejects_a_file_as_out_dir(tmp_path, capsys, monkeypatch):
    from fpsim.tools import figures

    monkeypatch.setattr(figures, "make_figures", lambda *a, **k: pytest.fail("nothing is drawn"))
    f = tmp_path / "not_a_dir"
    f.write_text("x")
    assert cli.main(["figures", "--quick", "--quiet", "--out", str(f)]) == 2
    assert capsys.readouterr().err == (f"fpsim figures: error: --out {f}: that is a file; --out wants a folder (made "
                                       "if missing) to write the PNGs into\n")  # was "[Errno 17] File exists: ..."
    assert cli.main(["figures", "--quick", "--quiet", "--out", str(f / "sub")]) == 2
    assert capsys.readouterr().err == (f"fpsim figures: error: --out {f / 'sub'}: cannot write a folder there (Not a "
                                       "directory); --out wants a folder (made if missing) to write the PNGs into\n")


def _load(path):
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def test_example_dump_ships_with_the_package():
    path = example_dump_path()
    pkg = Path(str(resources.files("fpsim")))
    assert path == pkg / "resources" / "reference_grads.npz"
    assert path.stat().st_size < 300_000
    d = _load(path)
    expected = {f"{s}.activation" for s in ACT_WIDTHS} | {f"{s}.{p}" for s in WEIGHT_SHAPES for p in ("weight", "bias")}
    assert set(d) == expected
    for s, width in ACT_WIDTHS.items():
        assert d[f"{s}.activation"].shape == (DUMP_ROWS, width)
    for s, shape in WEIGHT_SHAPES.items():
        assert d[f"{s}.weight"].shape == shape
        assert d[f"{s}.bias"].shape == (shape[0],)
    for k, v in d.items():
        assert v.dtype == np.float32, k
        assert np.all(np.isfinite(v)), k
        assert np.count_nonzero(v) > 0.9 * v.size, k
    # The gradient into a Linear's output is the gradient out of the tanh after it times
    # tanh' in (0, 1]: never larger, elementwise - which holds only if the dump keeps the
    # same samples (rows) in every layer.
    for lin, act in (("0", "1"), ("2", "3"), ("4", "5")):
        g_in, g_out = d[f"{lin}.activation"], d[f"{act}.activation"]
        assert np.all(np.abs(g_in) <= np.abs(g_out))
        assert np.all(np.sign(g_in) == np.sign(g_out))
    # A late step of the mean over 2^20 outputs: d loss / d output = 2 (y - x) / 2^20, tiny.
    assert np.abs(d["6.activation"]).max() < 2.0**-18


def test_audit_of_the_example_dump(capsys):
    path = example_dump_path()
    assert cli.main(["audit", str(path), "--json", "--no-figure"]) == 0
    report = json.loads(capsys.readouterr().out)
    d = _load(path)
    by_name = {t["name"]: t for t in report["tensors"]}
    assert set(by_name) == set(d)
    for name, arr in d.items():
        fa = by_name[name]["formats"]["float16"]
        # numpy's float32 -> float16 cast rounds once, to nearest even: the independent count.
        nz = arr != 0
        flushed = int(np.count_nonzero(nz & (arr.astype(np.float16) == 0)))
        assert fa["nonzero"] == int(np.count_nonzero(nz)), name
        assert fa["flushed"] == flushed, name
        if name.endswith(".activation"):
            assert fa["pct_flushed"] > 0, name
        assert by_name[name]["formats"]["bfloat16"]["flushed"] == 0, name  # bfloat16 keeps float32's range
    acts = np.concatenate([v.ravel() for k, v in d.items() if k.endswith(".activation")])
    assert np.mean(acts.astype(np.float16) == 0) > 0.5  # most activation gradients vanish in float16


def test_write_reference_dump_is_deterministic(tmp_path):
    task = small_task(512)
    a = write_reference_dump(tmp_path / "a.npz", task=task, steps=3, rows=16)
    b = write_reference_dump(tmp_path / "b.npz", task=task, steps=3, rows=16)
    da, db = _load(a), _load(b)
    assert set(da) == set(db) == set(_load(example_dump_path()))
    for k in da:
        np.testing.assert_array_equal(da[k], db[k])
    assert da["6.activation"].shape == (16, 64)


@pytest.mark.slow
def test_shipped_dump_is_what_the_code_regenerates(tmp_path):
    """The shipped ``reference_grads.npz`` is what ``write_reference_dump()`` writes, bit for bit.
    No tolerance: every number of the 150-step run behind it (the data, the initial weights, every
    sum, exp and tanh) is defined by fpsim itself, not by the CPU's BLAS kernel or numpy's SIMD
    loops, so the gradients are the same bits on every machine (docs/guarantees.md).  A change that
    moves them fails here until the dump is regenerated."""
    fresh = _load(write_reference_dump(tmp_path / "ref.npz"))
    shipped = _load(example_dump_path())
    assert set(fresh) == set(shipped)
    for k in shipped:
        assert fresh[k].dtype == shipped[k].dtype == np.float32 and fresh[k].shape == shipped[k].shape, k
        np.testing.assert_array_equal(fresh[k].view(np.uint32), shipped[k].view(np.uint32), err_msg=k)


@pytest.mark.parametrize("signum", [2, 15])  # SIGINT, SIGTERM
def test_figures_stopped_by_a_signal_is_one_line_and_leaves_no_half_written_file(signum, tmp_path, capsys,
                                                                                   monkeypatch):
    """SIGTERM was a SweepStopped traceback (exit 1). Here the signal lands while the ulp figure is
    being written: every figure before it is whole, none after, no temporary left."""
    import os
    import signal
    import time

    from fpsim.tools import figures

    real = figures._ulp_figure

    def stopped(path):
        os.kill(os.getpid(), signum)
        time.sleep(1.0)  # the handler raises here, in the main thread
        return real(path)

    monkeypatch.setattr(figures, "_ulp_figure", stopped)
    # the stages before the signal on a smaller task and fewer steps: the same code, the same files, in a
    # fraction of the time (the quick figures themselves are test_figures_quick_writes_every_figure's)
    monkeypatch.setattr(figures, "QUICK_TASK", small_task(512))
    monkeypatch.setattr(figures, "QUICK_STEPS", 6)
    before = signal.getsignal(signal.SIGTERM)
    rc = cli.main(["figures", "--quick", "--quiet", "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert rc == 128 + signum and out == "" and "Traceback" not in err
    assert err == (f"fpsim figures: stopped by {signal.Signals(signum).name}: the figures written before it in "
                   f"{tmp_path} are whole, the others as they were (none half-written)\n")
    written = sorted(p.name for p in tmp_path.iterdir())  # the three stages before "formats", no temporary
    assert written == sorted(["gradient_histogram_activation.png", "gradient_histogram_weight.png",
                              "loss_curves.png", "loss_scale.png"])
    for name in written:
        assert mpimg.imread(tmp_path / name).std() > 0.01  # each one whole (it reads, and is not blank)
    assert signal.getsignal(signal.SIGTERM) is before
