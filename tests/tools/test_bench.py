"""``fpsim bench``: every row is produced (measured, or marked skipped with a reason).

No timing assertions: the numbers depend on the machine.  One ``--quick --json`` run (a few
seconds) is shared by the tests of its rows.
"""

from __future__ import annotations

import importlib.util
import json
import math

import numpy as np
import pytest

from fpsim import backend as fb
from fpsim.experiments.tinygpt import TinyGPTTask
from fpsim.tools import bench, cli
from fpsim.tools.bench import rows as benchrows
from fpsim.tools.bench.steps import MLP_SIZES

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
    block = [r for r in rows if "(quantize)" in r["name"]]
    modes = [r for r in rows if r["peer"].startswith("fpsim nearest into")]
    sr = [r for r in rows if r["peer"] == "the float64 algorithm, same values and draws"]
    assert len(rows) == 21 and len(block) == 2 and len(sr) == 1  # 2 x 2 x 4 formats, 2 block rows, SR, 2 modes
    assert sr[0]["name"].endswith("-> float4_e2m1fn, stochastic (float32 kernel)") and sr[0]["limit"] == 0.5
    assert block[0]["peer"] == "fpsim float32 -> e4m3 cast" and block[0]["target"] == "<= 3x"
    # MXFP4 with stochastically rounded elements (the 4-bit SR recipe's gradients) against nearest and its draws
    assert block[1]["name"].endswith("mxfp4 (quantize), stochastic elements")
    assert block[1]["peer"] == "the quantize to nearest + rng.random of its uniforms" and block[1]["limit"] == 1.5
    assert [r["name"].split("-> ")[1] for r in modes] == ["p3109_k8p4se, toward_zero", "float16, stochastic k=8 rne"]
    assert all(r["limit"] == 2.0 for r in modes)
    for r in rows:
        assert r["seconds"] > 0 and r["peer_seconds"] > 0 and r["ratio"] > 0
        if r not in block and r not in modes and r not in sr:
            assert ("gfloat round_ndarray" in r["others"]) == HAS_GFLOAT
    # the targets: float16 within 1.5x of numpy, bfloat16 within 10x of ml_dtypes, fp8 none
    # and MXFP8 quantization within 3x of the plain e4m3 cast (the mode rows: 2x nearest, above)
    for r in rows:
        if r in modes or r in sr:
            continue
        fmt = r["name"].split(" -> ")[1].split()[0]
        assert r["limit"] == {"float16": 1.5, "bfloat16": 10.0, "mxfp8_e4m3": 3.0, "mxfp4": 1.5}.get(fmt)
        assert (r["met"] is None) == (r["limit"] is None)


def test_matmul_rows(quick):
    rows = _rows(quick, "matmul")
    assert len(rows) == 5
    assert [r["limit"] for r in rows] == [None, 1.25, 1.25, None, 20.0]  # the target applies to the largest size
    assert rows[2]["name"] == rows[1]["name"] + " [numpy-f32]"
    assert all(r["seconds"] > 0 and r["peer"].startswith("np.matmul") for r in rows[:3])
    pin = rows[3]  # the price of pinning fpsim's products to a fixed BLAS thread count
    assert "pinned BLAS thread" in pin["name"] and pin["peer"].startswith("same step on the process's")
    assert pin["seconds"] > 0 and pin["peer_seconds"] > 0
    tc = rows[4]  # the tensor-core model against float32 BLAS on the same values
    assert tc["name"].startswith("tensorcore.matmul(arch='hopper')") and tc["peer"] == "np.matmul float32 (BLAS)"
    assert tc["seconds"] > tc["peer_seconds"] > 0


def _step_expected(quick) -> dict:
    """(name, peer) -> (target, limit) of every step row, in the order of the table."""
    mlp = f"MLP {'-'.join(map(str, MLP_SIZES))} batch {quick['settings']['batch']} SGD step"
    gpt = benchrows.gpt_label(benchrows.gpt_task(bench.BenchSettings.quick_settings()))
    fp16 = ("<= 1.3x (stretch 1.1x)", 1.3)
    fp32 = ("<= 1.2x (stretch 1.0x)", 1.2)
    torch16 = (">= 6x faster (<= 0.167x; stretch 10x)", 1 / 6)
    return {
        (f"fpsim fp32 {mlp}", "PyTorch CPU float32"): fp32,
        (f"fpsim fp16-dynamic {mlp}", "fpsim fp32"): fp16,
        (f"fpsim fp16-dynamic {mlp} [numpy-f32]", "fpsim fp32"): fp16,
        (f"fpsim fp16-dynamic {mlp}", "PyTorch CPU float16 (model.half())"): torch16,
        (f"fpsim fp16-dynamic {mlp} [numpy-f32]", "PyTorch CPU float16 (model.half())"): torch16,
        (f"fpsim bf16-master {mlp}", "fpsim fp32"): ("<= 1.15x", 1.15),
        (f"fpsim bf16-master {mlp} [numpy-f32]", "fpsim fp32"): ("<= 1.15x", 1.15),
        (f"PyTorch CPU float16 {mlp}", "PyTorch CPU float32"): ("", None),
        (f"fpsim fp32 {gpt}", "PyTorch CPU float32 (torch.nn, same sizes and Adam)"): fp32,
        (f"fpsim fp16-amp {gpt}", "fpsim fp32"): fp16,
        (f"fpsim fp16-amp {gpt} [numpy-f32]", "fpsim fp32"): fp16,
        (f"fpsim bf16-master {gpt}", "fpsim fp32"): ("<= 1.15x", 1.15),
        (f"fpsim fp8-delayed {gpt}", "fpsim fp32"): ("<= 1.3x", 1.3),
        (f"fpsim mxfp8 {gpt}", "fpsim fp32"): ("<= 1.3x", 1.3),
        (f"fpsim nvfp4 {gpt}", "fpsim fp32"): ("<= 1.5x", 1.5),
        (f"fpsim fp8-hopper {gpt}", "fpsim fp32"): ("<= 3x", 3.0),
    }


def test_step_rows_names_peers_and_targets(quick):
    """The bench's goals: every row, its peer and its target (the numpy-f32 rows next to numpy's)."""
    rows = _rows(quick, "step")
    expected = _step_expected(quick)
    assert [(r["name"], r["peer"]) for r in rows] == list(expected)
    for r in rows:
        target, limit = expected[(r["name"], r["peer"])]
        assert r["target"] == target and r["limit"] == limit, r["name"]
        assert ("stretch" in r["note"]) == ("stretch" in target and not r["skipped"]), r["name"]


def test_step_rows_measured_or_skipped(quick):
    rows = _rows(quick, "step")
    torch_rows = [r for r in rows if "PyTorch" in r["peer"] or r["name"].startswith("PyTorch")]
    assert len(torch_rows) == 5
    for r in rows:
        if r in torch_rows and not HAS_TORCH:
            assert "PyTorch not installed" in r["skipped"] and r["ratio"] is None
            continue
        assert r["skipped"] == ""
        assert isinstance(r["ratio"], float) and math.isfinite(r["ratio"]) and r["ratio"] > 0, r["name"]
        assert r["seconds"] > 0 and r["peer_seconds"] > 0
        assert r["met"] in ((True, False) if r["limit"] is not None else (None,))


def test_step_rows_share_their_peer_samples(quick):
    """The rows held against fpsim fp32 use one fp32 step (the MLP's on numpy, the GPT's): the
    same samples, so the same median to the bit, which is also the fp32 row's own time."""
    rows = _rows(quick, "step")
    mlp = [r for r in rows if r["peer"] == "fpsim fp32" and "MLP" in r["name"]]
    gpt = [r for r in rows if r["peer"] == "fpsim fp32" and "tiny GPT" in r["name"]]
    assert len(mlp) == 4 and len(gpt) == 7
    assert {r["peer_seconds"] for r in mlp} == {rows[0]["seconds"]}
    gpt32 = next(r for r in rows if r["name"].startswith("fpsim fp32 tiny GPT"))
    assert {r["peer_seconds"] for r in gpt} == {gpt32["seconds"]}
    f32 = [r for r in rows if r["name"].endswith("[numpy-f32]")]
    for r in f32:  # a [numpy-f32] row and its numpy twin time different steps against one peer
        twin = next(x for x in rows if x["name"] == r["name"].removesuffix(" [numpy-f32]") and x["peer"] == r["peer"])
        assert twin["peer_seconds"] == r["peer_seconds"]


def test_step_rows_run_on_the_backends_they_name(monkeypatch):
    """What each step row times: the recipe and backend its name says, the tiny GPT with the
    task's defaults (a smaller one with --quick; no timing: the steps are stand-ins)."""
    assert benchrows.gpt_task(bench.BenchSettings()) == TinyGPTTask()
    assert benchrows.gpt_task(bench.BenchSettings.quick_settings()) == TinyGPTTask(
        n_digits=4, batch=8, d_model=32, n_layers=1, n_heads=2)
    built = []

    def mlp(recipe, batch, backend=None):
        built.append(("mlp", recipe, backend))
        return lambda: None

    def gpt(recipe, task, backend=None):
        assert task == benchrows.gpt_task(bench.BenchSettings.quick_settings())
        built.append(("gpt", recipe, backend))
        return lambda: None

    monkeypatch.setattr(benchrows, "fpsim_step", mlp)
    monkeypatch.setattr(benchrows, "training_step", gpt)
    monkeypatch.setattr(benchrows.torchref, "import_torch", lambda: None)
    rows = benchrows.step_rows(bench.BenchSettings.quick_settings(), lambda what: None, 1)
    assert built == [("mlp", "fp32", "numpy"), ("mlp", "fp16-dynamic", "numpy"), ("mlp", "bf16-master", "numpy"),
                     ("mlp", "fp16-dynamic", "numpy-f32"), ("mlp", "bf16-master", "numpy-f32"),
                     ("gpt", "fp32", "numpy"), *(("gpt", r, "numpy") for r in benchrows.GPT_RECIPES),
                     ("gpt", "fp16-amp", "numpy-f32")]
    assert len(rows) == 16 and sum(bool(r.skipped) for r in rows) == 5  # the PyTorch rows, without PyTorch


def test_monitor_rows(quick):
    rows = _rows(quick, "monitor")
    assert len(rows) == 2
    off, on = rows
    assert "no-op hook" in off["name"] and off["limit"] == 1.02 and off["met"] in (True, False)
    assert "fpsim.monitor()" in on["name"] and on["seconds"] > 0 and on["limit"] == 1.2


def test_kernel_rows_time_each_rounding_on_both_paths(quick):
    """``--sections kernels``: a float32 copy against astype(float16), then every rounding and
    widening of KERNEL_CASES, the compiled path against the numpy path, judged in ns a value."""
    from fpsim.tools.bench.kernelrows import KERNEL_CASES

    rows = _rows(quick, "kernels")
    n = quick["settings"]["n_round"]
    floor, rest = rows[0], rows[1:]
    assert floor["name"] == "10^4 float32 copy" and floor["peer"] == "numpy astype(float16)"
    assert floor["seconds"] > 0 and floor["peer_seconds"] > 0 and "ns a value" in floor["note"]
    assert [r["name"] for r in rest] == [f"10^4 {label}" for label in KERNEL_CASES]
    assert any("f32_to_f16" in c for c in KERNEL_CASES) and any("nvfp4" in c for c in KERNEL_CASES)
    from fpsim.numerics import compiled

    if not compiled.enabled():  # FPSIM_NUMBA=0 or no numba: every kernel row says why it is not timed
        assert all(r["seconds"] is None and "the compiled path is off" in r["skipped"] for r in rest)
        return
    for r in rest:
        assert r["peer"] == "the same, numpy path" and r["seconds"] > 0 and r["peer_seconds"] > 0, r["name"]
        assert r["target"] == "<= 0.5 ns a value" and r["limit"] is None
        assert r["met"] == (r["seconds"] / n * 1e9 <= 0.5), r["name"]


def test_kernel_rows_without_the_compiled_path(monkeypatch):
    from fpsim.numerics import compiled
    from fpsim.tools.bench.kernelrows import KERNEL_CASES, kernel_rows

    monkeypatch.setattr(compiled, "enabled", lambda: False)
    rows = kernel_rows(bench.BenchSettings.quick_settings(), lambda what: None)
    assert rows[0].seconds > 0 and len(rows) == 1 + len(KERNEL_CASES)
    assert all("compiled path is off" in r.skipped and r.seconds is None for r in rows[1:])


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
    assert cli.main(["bench", "--quick", "--quiet", "--sections", "kernels"]) == 0
    out = capsys.readouterr().out
    assert "kernels.f32_to_f16" in out and "the same, numpy path" in out and "ns a value" in out


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
