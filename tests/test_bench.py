"""``fpsim bench``: every row is produced (measured, or marked skipped with a reason).

No timing assertions: the numbers depend on the machine.  One ``--quick --json`` run (a few
seconds) is shared by the tests of its rows.
"""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from fpsim import backend as fb
from fpsim.tools import bench, cli

HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_GFLOAT = importlib.util.find_spec("gfloat") is not None


@pytest.fixture(scope="module")
def quick():
    """The parsed output of ``fpsim bench --quick --json``."""
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = cli.main(["bench", "--quick", "--json", "--quiet"])
    assert rc == 0
    return json.loads(buf.getvalue())


def _rows(result, section):
    return [r for r in result["rows"] if r["section"] == section]


def test_machine_description(quick):
    m = quick["machine"]
    for key in ("cpu", "cores", "numpy", "ml_dtypes", "blas_threads", "platform"):
        assert m[key] not in (None, ""), key
    assert m["numpy"] == np.__version__
    assert (m["torch"] is not None) == HAS_TORCH
    assert quick["settings"]["quick"] is True
    assert "set_num_threads" in quick["threads"]["how"]


def test_rounding_rows_cover_every_format_source_and_mix(quick):
    rows = _rows(quick, "rounding")
    names = {r["name"] for r in rows}
    for src in ("float32", "float64"):
        for mix in ("normal", "tiny"):
            for fmt in bench.ROUND_FORMATS:
                assert any(f"{src} {mix} -> {fmt}" in n for n in names), (src, mix, fmt)
    block = [r for r in rows if "mxfp8_e4m3 (quantize)" in r["name"]]
    assert len(rows) == 17 and len(block) == 1  # 2 sources x 2 mixes x 4 formats, and MXFP8 quantization
    assert block[0]["peer"] == "fpsim float32 -> e4m3 cast" and block[0]["target"] == "<= 3x"
    for r in rows:
        assert r["seconds"] > 0 and r["peer_seconds"] > 0 and r["ratio"] > 0
        if r not in block:
            assert ("gfloat round_ndarray" in r["others"]) == HAS_GFLOAT
    # the targets: float16 within 1.5x of numpy, bfloat16 within 10x of ml_dtypes, fp8 none
    # and MXFP8 quantization within 3x of the plain e4m3 cast
    for r in rows:
        fmt = r["name"].split(" -> ")[1].split()[0]
        assert r["limit"] == {"float16": 1.5, "bfloat16": 10.0, "mxfp8_e4m3": 3.0}.get(fmt)
        assert (r["met"] is None) == (r["limit"] is None)


def test_matmul_rows(quick):
    rows = _rows(quick, "matmul")
    assert len(rows) == 2
    assert [r["limit"] for r in rows] == [None, 1.25]  # the target applies to the largest size
    assert all(r["seconds"] > 0 and r["peer"].startswith("np.matmul") for r in rows)


def test_step_rows_torch_present_or_skipped(quick):
    rows = _rows(quick, "step")
    assert len(rows) == 5
    by_peer = {(r["name"].split(" MLP")[0], r["peer"]): r for r in rows}
    assert ("fpsim fp16-dynamic", "fpsim fp32") in by_peer
    assert ("fpsim bf16-master", "fpsim fp32") in by_peer
    torch_rows = [r for r in rows if "PyTorch" in r["peer"] or r["name"].startswith("PyTorch")]
    assert len(torch_rows) == 3
    for r in torch_rows:
        if HAS_TORCH:
            assert r["skipped"] == "" and r["peer_seconds"] > 0 and r["met"] in (True, False, None)
        else:
            assert "PyTorch not installed" in r["skipped"]
    fp16 = by_peer[("fpsim fp16-dynamic", "fpsim fp32")]
    assert fp16["limit"] == 2.0 and "stretch" in fp16["note"]  # issue 18's goals
    assert by_peer[("fpsim bf16-master", "fpsim fp32")]["limit"] == 1.3


def test_monitor_rows(quick):
    rows = _rows(quick, "monitor")
    assert len(rows) == 2
    off, on = rows
    assert "no-op hook" in off["name"] and off["limit"] == 1.02 and off["met"] in (True, False)
    assert "fpsim.monitor()" in on["name"] and on["seconds"] > 0 and on["limit"] == 1.5


def test_gpu_rows_present_or_skipped(quick):
    rows = _rows(quick, "gpu")
    assert len(rows) == 2
    if "cupy" not in fb.available():
        assert all("no GPU" in r["skipped"] and r["seconds"] is None for r in rows)
    else:
        assert all(r["seconds"] > 0 for r in rows)


def test_gpu_section_code_path_on_the_numpy_stand_in():
    """The cupy rows' code, run on ``CupyBackend(xp=numpy)`` (no PyTorch CUDA to compare with)."""
    s = bench.BenchSettings.quick_settings()
    rows = bench._gpu_rows(s, lambda what: None, gpu_backend=fb.CupyBackend(xp=np))
    assert [r.name.split(" MLP")[0] for r in rows] == ["cupy fp32", "cupy fp16-dynamic"]
    assert all(r.seconds > 0 and "stand-in" in r.name for r in rows)


def test_table_lists_every_row_and_the_targets(quick):
    text = bench.format_report(quick)
    assert text.startswith("machine: ")
    for r in quick["rows"]:
        assert r["name"] in text
    assert "targets met:" in text and "[--quick: smoke run" in text
    assert text.count("skipped:") == sum(1 for r in quick["rows"] if r["skipped"])


def test_table_output_of_the_command(capsys):
    assert cli.main(["bench", "--quick", "--quiet", "--sections", "matmul"]) == 0
    out = capsys.readouterr().out
    assert "np.matmul float32 (BLAS)" in out and "ratio" in out and "machine:" in out


def test_bad_arguments():
    assert cli.main(["bench", "--quick", "--repeats", "0"]) == 2
    with pytest.raises(SystemExit):
        cli.main(["bench", "--sections", "everything"])
    with pytest.raises(ValueError, match="unknown bench section"):
        bench.run_bench(bench.BenchSettings.quick_settings(), sections=["rounding", "nope"], progress=False)


def test_bench_labs_times_the_named_notebooks(tmp_path, capsys):
    """``fpsim bench --labs NOTEBOOK``: one row per notebook, as JSON too (parsed strictly)."""
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    import json

    from fpsim.tools.cli import main

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1")]
    path = tmp_path / "98_tiny.ipynb"
    nbformat.write(nb, path)
    assert main(["bench", "--labs", str(path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))
    assert [r["name"] for r in rows] == ["98_tiny.ipynb"] and rows[0]["seconds"] >= rows[0]["slowest_cell"] >= 0
