"""``fpsim gpu-check`` and its parts.  Here (no GPU) they run against the CPU stand-in for
cupy, where every comparison must come out exact; the same tests run on real CuPy where it
sees a GPU.  The checks must be able to fail: a stand-in with a wrong rounding, or a wrong
matmul, must be reported.  PyTorch (CPU here) is the reference for the PyTorch comparison."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import small_task
from support.cupy_standin import GuardArray, GuardBackend

from fpsim import backend as B
from fpsim.experiments import ReferenceTask
from fpsim.formats import get_format, round_to
from fpsim.tools import cli
from fpsim.tools.gpu_check import gpu_check, op_sweep, task_check, torch_compare
from fpsim.tools.gpu_check.ops import _compare

HAVE_GPU = B.BACKENDS["cupy"].available()
ROOT = Path(__file__).resolve().parents[2]


def test_no_gpu_says_so_and_exits_0(capsys):
    if HAVE_GPU:
        pytest.skip("a GPU is present: the no-GPU message does not apply")
    assert cli.main(["gpu-check"]) == 0
    out = capsys.readouterr().out
    assert "NO GPU HERE" in out and "Nothing was compared" in out and "--stand-in" in out


def test_stand_in_quick_holds_every_bound(tmp_path, capsys):
    """The command the suite runs: every op, format and gradient, and the reference task under
    fp32 / fp16-dynamic / bf16-master, numpy vs the stand-in CupyBackend(xp=numpy): the exact
    ops bit-identical, the others - summed in numpy's order with numpy's exp, where the numpy
    backend's sums are exact and its exp correctly rounded - within their bounds."""
    path = tmp_path / "check.json"
    assert cli.main(["gpu-check", "--stand-in", "--quick", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "CPU stand-in" in out and "all checks held" in out and "exact ops: 0 mismatching values" in out
    res = json.loads(path.read_text())
    ops = res["ops"]
    assert {o["fmt"] for o in ops} == {"float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"}
    assert {"matmul", "linear", "exp", "gelu", "log_softmax", "mse_loss", "cast to float8_e4m3fn"} <= {o["op"] for o in ops}
    assert all(o["mismatches"] == 0 and o["max_ulp"] == 0 for o in ops if o["kind"] == "exact")
    assert any(o["mismatches"] for o in ops if o["kind"] != "exact")  # numpy's order is not fpsim's
    assert sum(o["n"] for o in ops if o["kind"] == "exact") > 10_000
    assert [t["recipe"] for t in res["task"]] == ["fp32", "fp16-dynamic", "bf16-master"]
    for t in res["task"]:
        assert t["ok"] and len(t["ref_losses"]) == 3 and t["max_rel_diff"] < 1e-3, t["recipe"]


def test_every_part_on_the_strict_stand_in_all_exact():
    """The parts of the command on the strict stand-in (tests/support/cupy_standin.py: any numpy
    array or host copy inside an op fails), as `--stand-in` runs them on CupyBackend(xp=numpy):
    every op, format and gradient, and the reference task, bit-identical to numpy."""
    checks = op_sweep(GuardBackend(), quick=True)
    assert {c.fmt for c in checks} == {"float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"}
    assert all(c.mismatches == 0 and c.max_ulp == 0 for c in checks)
    for t in task_check(GuardBackend(), ("fp32", "fp16-dynamic", "bf16-master"), small_task(512), steps=3,
                        monitor_steps=2):
        assert t.ok and t.ref_losses == t.dev_losses and t.count_n_mismatch == 0 and t.count_worst == [], t.recipe


class _TowardZero(GuardBackend):
    """A device with a rounding bug: bfloat16 / fp8 truncated instead of rounded to nearest."""

    def rne_round(self, x32, fmt):
        return GuardArray(round_to(x32.get(), fmt, "toward_zero"))


def test_op_sweep_catches_a_wrong_rounding():
    checks = op_sweep(_TowardZero(), quick=True, formats=["float32", "bfloat16"])
    bad = {(c.op, c.fmt) for c in checks if not c.ok}
    assert ("add", "bfloat16") in bad and ("mul", "bfloat16") in bad and ("matmul", "bfloat16") in bad
    # float32 ops never go through the broken rounding - only casts from float32 into the broken formats
    assert {op for op, f in bad if f == "float32"} == {"cast to bfloat16", "cast to float8_e4m3fn", "cast to float8_e5m2"}
    add = next(c for c in checks if c.op == "add" and c.fmt == "bfloat16" and c.part == "forward")
    assert add.kind == "exact" and add.mismatches > 30 and add.max_ulp == 1.0


class _SloppyMatmul(GuardBackend):
    """A device whose matmul is off by 1%: the task check must see it in the loss curves."""

    def matmul(self, a32, b32, fa=None, fb=None):
        return super().matmul(a32, b32, fa, fb) * np.float32(1.01)


def test_task_check_catches_a_wrong_matmul():
    (fp32,) = task_check(_SloppyMatmul(), ("fp32",), small_task(), steps=2, monitor_steps=1)
    assert not fp32.ok and fp32.max_rel_diff > 1e-3 and fp32.count_n_mismatch == 0
    (good,) = task_check(GuardBackend(), ("fp32",), small_task(), steps=2, monitor_steps=1)
    assert good.ok and good.max_rel_diff == 0.0


def test_compare_counts_ulps_of_the_format():
    f16 = get_format("float16")
    ref = np.array([1.0, 2.0, np.nan, np.inf, 0.0], np.float16)
    assert _compare(ref.copy(), ref, f16) == (0, 0.0)
    got = np.array([1.0 + 2**-10, 2.0, np.nan, np.inf, -0.0], np.float16)  # one ulp at 1; -0 vs +0 differs
    bad, ulps = _compare(got, ref, f16)
    assert bad == 2 and ulps == 1.0
    got = np.array([1.0, 2.0, 1.0, np.inf, 0.0], np.float16)  # NaN -> a number: infinitely wrong
    assert _compare(got, ref, f16) == (1, math.inf)
    # the scale is max(|ref|, median non-zero |ref|): a 0 that came out as 2**-20, among values of
    # size 1 (float32 ulp 2**-23), is 2**3 ulps off - not infinitely many
    f32 = get_format("float32")
    r = np.array([1.0, -1.0, 0.0, 3e38], np.float32)
    g = np.array([1.0, -1.0, 2.0**-20, 3e38], np.float32)
    assert _compare(g, r, f32) == (1, 2.0**3)


def test_gpu_check_function_without_gpu_returns_0():
    if HAVE_GPU:
        pytest.skip("a GPU is present")
    lines = []

    class Out:
        def write(self, s):
            lines.append(s)

        def flush(self):
            pass

    rc, res = gpu_check(out=Out())
    assert rc == 0 and "skipped" in res and "NO GPU HERE" in "".join(lines)


@pytest.mark.skipif(not HAVE_GPU, reason="CuPy with a GPU is not available here")
def test_gpu_check_on_the_gpu():
    rc, res = gpu_check(quick=True)
    assert rc == 0, res["failed"]


# ------------------------------------------------------------------------------ PyTorch


def _mse_of_initial_model(task) -> float:
    """The reference model's first loss, computed in float64 numpy from its weights."""
    x = task.data().astype(np.float64)
    sd = task.model(0).state_dict()
    h = x
    for i in (0, 2, 4, 6):
        h = h @ sd[f"{i}.weight"].astype(np.float64).T + sd[f"{i}.bias"].astype(np.float64)
        if i != 6:
            h = np.tanh(h)
    return float(((h - x) ** 2).mean())


@pytest.mark.parametrize("dtype, rtol", [("float32", 1e-5), ("bfloat16", 1e-4), ("float16", 1e-4)])
def test_torch_compare_on_cpu(dtype, rtol):
    """PyTorch CPU (autocast bfloat16 / float16 + GradScaler, or float32) from fpsim's initial
    weights: the first loss is the float64 loss of those weights, and fpsim's matching recipe
    follows PyTorch's loss curve closely."""
    torch = pytest.importorskip("torch")
    if dtype == "float16":
        try:
            with torch.autocast("cpu", dtype=torch.float16):
                torch.nn.Linear(2, 2)(torch.ones(1, 2))
        except RuntimeError:
            pytest.skip("this PyTorch has no float16 autocast on the CPU")
    task = small_task()
    r = torch_compare(task, steps=4, device="cpu", dtype=dtype, backend="numpy")
    assert r["fpsim_recipe"] == {"float32": "fp32", "bfloat16": "bf16-amp", "float16": "fp16-amp"}[dtype]
    assert len(r["torch_losses"]) == len(r["fpsim_losses"]) == 4
    assert r["torch_losses"][0] == pytest.approx(_mse_of_initial_model(task), rel=2e-2 if dtype != "float32" else 1e-6)
    assert r["max_rel_diff"] < rtol and r["ok"]
    assert r["torch_losses"][-1] < 0.8 * r["torch_losses"][0]  # it trained


def test_torch_compare_needs_cuda_when_asked():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA is available")
    with pytest.raises(RuntimeError, match="no CUDA"):
        torch_compare(small_task(64), steps=1, device="cuda")
    with pytest.raises(ValueError, match="dtype must be"):
        torch_compare(small_task(64), steps=1, device="cpu", dtype="float8")


@pytest.mark.skipif(not HAVE_GPU, reason="CuPy with a GPU is not available here")
def test_torch_compare_on_the_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA here")
    r = torch_compare(ReferenceTask(), steps=20, device="cuda", dtype="float16", backend="cupy")
    assert r["ok"], r["max_rel_diff"]


# ------------------------------------------------------------------------------ CLI and script


def test_cli_errors():
    assert cli.main(["gpu-check", "--stand-in", "--steps", "0"]) == 2
    assert cli.main(["gpu-check", "--stand-in", "--recipes", "fp64"]) == 2
    with pytest.raises(SystemExit):
        cli.main(["compare", "--backend", "tpu"])


def test_gpu_script_is_ready():
    """scripts/gpu_check.sh: valid bash, logs to a file, runs the GPU tests, the check and the
    PyTorch comparison, and installs nothing but fpsim itself."""
    script = ROOT / "scripts" / "gpu_check.sh"
    text = script.read_text()
    assert os.access(script, os.X_OK)
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    assert "tee" in text and "nvidia-smi" in text and "--no-deps" in text
    assert "tests/engine/test_backend.py tests/tools/test_gpu_check.py" in text
    assert "gpu-check" in text and "--torch" in text
    pips = [line for line in text.splitlines() if "-m pip install" in line and not line.lstrip().startswith("#")]
    assert pips and all("--no-deps" in line for line in pips)


def test_module_runs_as_fpsim_cli():
    out = subprocess.run([sys.executable, "-m", "fpsim.tools.cli", "gpu-check", "--help"], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    assert out.returncode == 0 and "--stand-in" in out.stdout and "--torch" in out.stdout


def test_fp8_recipes_run_on_the_strict_device_stand_in():
    """The fp8 recipes (delayed, current, with skipped layers) on the stand-in that fails on any
    numpy array or host copy inside an op: bit-identical to numpy, rounding counts equal."""
    checks = task_check(GuardBackend(), ("fp8-delayed", "fp8-delayed-inner", "fp8-current"), small_task(),
                        steps=3, monitor_steps=1)
    for c in checks:
        assert not c.failure, c.failure
        assert c.ok and c.max_rel_diff == 0.0 and c.ref_losses == c.dev_losses, c.recipe
