"""``fpsim gpu-check``: does the cupy backend compute the numbers the numpy backend computes?

Three parts, each run on both backends from the same inputs and initial weights:

1. **ops** - every op of ``fpsim.ops`` (forward and the gradient of every input) in every
   format, on inputs that include subnormals, values near the overflow threshold, zeros, -0,
   inf and NaN.  The results are compared bit for bit, and where they differ, in ulps of the
   output format at the larger of |reference| and the median non-zero |reference| (so that a
   difference next to a cancellation is judged against the size of the numbers around it).  Stated bounds:

   - ``exact`` ops (casts, + - * /, neg, abs, relu, sqrt, max, shape ops, concat, indexing):
     float32 IEEE arithmetic then one rounding, so a correct device gives the same bits:
     0 mismatches allowed.
   - ``libm`` ops (exp, log, tanh, sigmoid, gelu, pow, softmax, log_softmax): CUDA's float32
     math library and numpy's differ by a few float32 ulps (CUDA documents expf 2 ulp, tanhf
     2 ulp, logf 1 ulp, powf 4 ulp): at most 64 float32 ulps for float32 results, at most
     1 ulp of the format for 16- and 8-bit results (a float32 difference that small moves a
     rounding by one step at most).
   - ``accumulate`` ops (matmul, linear, sum, mean, mse_loss): cuBLAS and CUDA reductions sum
     in another order than OpenBLAS / numpy; each float32 sum is within k*2**-24*sum|terms|
     of the exact one, so at most 2k float32 ulps apart (k = the number of terms), and at most
     1 ulp of the format for 16- and 8-bit results.

   For libm and accumulate ops with 16- or 8-bit results at most 2% of the values (or 2) may
   differ at all: a float32 difference of a few ulps moves a rounding to the neighbouring
   value only for values next to a rounding boundary (gelu's 1 + tanh, which cancels for
   negative inputs, makes that about 1.3% of float16 values against numpy's tanh); a broken
   rounding moves half of them.

2. **task** - the reference task (autoencoder 64-32-8-32-64, tanh, Adam) under fp32,
   fp16-dynamic and bf16-master for a reduced number of steps: the loss curves (stated
   tolerance: relative difference at most 1e-3 for fp32, 2e-2 for the 16-bit recipes - the
   matmul's float32 sums differ in order, and a different sum occasionally rounds to the
   neighbouring 16-bit value, which training then carries along), the skipped steps and loss
   scales, the per-op rounding-event counts of ``fpsim.monitor`` over the first steps (``n``
   must be equal; each event counter within 0.1% of n, +1), and the time per step on each.

3. **torch** (``--torch``) - PyTorch with ``autocast`` + ``GradScaler`` on the same network,
   data and initial weights (copied from fpsim's model) against fpsim's matching recipe:
   final loss, the largest relative difference of the loss curves, time per step.

Without a GPU (CuPy missing, or no CUDA device) the command says so and exits with status 0.
``--stand-in`` runs every check against ``CupyBackend(xp=numpy)`` instead: the cupy backend's
own code with numpy standing in for cupy, so the code paths are exercised without a GPU; there
every comparison must come out exact.  (The test suite also runs the parts against a strict
stand-in whose arrays refuse to mix with numpy arrays and count every device -> host copy:
``tests/support/cupy_standin.py``.)

The parts live in ``ops.py`` (1), ``task.py`` (2) and ``vs_torch.py`` (3); this module
runs them and prints the report.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import sys
from dataclasses import asdict

import numpy as np

from ... import backend as _backend
from ...backend import CupyBackend
from ...checks import check_at_least
from ...experiments import ReferenceTask, get_recipe
from ..jsonout import dumps, finite
from .ops import MISMATCH_FRACTION, OpCheck, format_op_table, op_sweep
from .task import COUNT_RTOL, TaskCheck, format_task_table, task_check
from .vs_torch import format_torch, torch_compare

__all__ = ["OpCheck", "op_sweep", "TaskCheck", "task_check", "torch_compare", "device_description", "gpu_check",
           "add_arguments", "main"]


def device_description(be) -> str:
    """Which device the cupy backend runs on, in words (versions, GPU name, TF32, bfloat16)."""
    if be.stand_in:
        return f"CPU stand-in for cupy ({type(be).__name__}, numpy {np.__version__})"
    cp = be.xp
    try:
        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        gpu = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    except Exception as e:  # the description must not stop the check
        gpu = f"? ({e})"
    tf32 = os.environ.get("CUPY_TF32", "0")
    return (f"CuPy {cp.__version__} (CUDA runtime {cp.cuda.runtime.runtimeGetVersion()}) on {gpu}; "
            f"CUPY_TF32={tf32}{' - TF32 matmuls: float32 results will NOT match' if tf32 != '0' else ''}; "
            f"bfloat16 stored as {'ml_dtypes.bfloat16' if be.native_bfloat16 else 'float32'}")


def _device(stand_in: bool, say, results: dict):
    """The backend to check against numpy: the numpy stand-in, or the GPU's - None (said
    plainly, and noted in ``results``) where there is no GPU."""
    if stand_in:
        return CupyBackend(xp=np)
    if "cupy" not in _backend.available():
        why = ("CuPy is not installed" if not _importable("cupy") else "CuPy sees no CUDA device")
        say(f"fpsim gpu-check: NO GPU HERE - {why}; fpsim.backend.available() = {_backend.available()}.")
        say("Nothing was compared and nothing was run on a GPU.  `fpsim gpu-check --stand-in` runs the same checks "
            "against the CPU stand-in for cupy (the code paths, not the hardware).")
        results["skipped"] = why
        return None
    return _backend.get_backend("cupy")


def _ops_part(dev, quick: bool, seed: int, say, results: dict) -> list[str]:
    """Part 1, printed; the failures."""
    say("\n== ops: every op and format, forward and gradients, numpy vs device ==")
    checks = op_sweep(dev, quick=quick, seed=seed)
    say(format_op_table(checks))
    bad = [c for c in checks if not c.ok]
    exact = [c for c in checks if c.kind == "exact"]
    say(f"exact ops: {sum(c.mismatches for c in exact)} mismatching values of {sum(c.n for c in exact)}; "
        f"libm / accumulate ops: largest difference {max((c.max_ulp for c in checks if c.kind != 'exact'), default=0):.3g} "
        f"ulps of the output format")
    say("bounds: exact - bit-identical; libm - float32 results within 64 ulps, 16/8-bit results within 1 ulp; "
        "accumulate - float32 within 2k ulps (k terms), 16/8-bit within 1 ulp; for libm and accumulate at most "
        f"{MISMATCH_FRACTION:.0%} of 16/8-bit values may differ at all.  ulps of the output format at "
        "max(|numpy value|, median non-zero |numpy value|).")
    results["ops"] = [asdict(c) | {"ok": c.ok} for c in checks]
    if not bad:
        return []
    return [f"ops: {len(bad)} comparisons outside their bound, e.g. " + ", ".join(f"{c.op} {c.fmt} {c.part}"
                                                                                  for c in bad[:4])]


def _task_part(dev, recipes, ref_task, n_steps: int, quick: bool, seed: int, say, results: dict) -> list[str]:
    """Part 2, printed; the failures."""
    say(f"\n== reference task: {ref_task.n} x {ref_task.dim}, {n_steps} steps per recipe, numpy vs device ==")
    tc = task_check(dev, tuple(recipes or ("fp32", "fp16-dynamic", "bf16-master")), ref_task, steps=n_steps,
                    monitor_steps=2 if quick else 3, seed=seed)
    say(format_task_table(tc, "numpy", "device"))
    say(f"tolerance: the largest relative difference of the loss curves; monitor: rounding events of the first "
        f"{2 if quick else 3} steps per (direction, module, op, target, format) - n must be equal, every event "
        f"count within {COUNT_RTOL:.1%} of n (+1).  Step times include the loss.item() of every step.")
    results["task"] = [asdict(c) | {"ok": c.ok} for c in tc]
    return [f"task {c.recipe}" for c in tc if not c.ok]


def _torch_part(dev, ref_task, n_steps: int, seed: int, device: str, dtype: str, say, results: dict) -> list[str]:
    """Part 3, printed; the failures (none where PyTorch or its device is missing: said)."""
    say(f"\n== PyTorch ({device}, {dtype}) vs fpsim on the reference task ==")
    if not _importable("torch"):
        say("PyTorch is not installed: skipped.")
        return []
    try:
        tr = torch_compare(ref_task, steps=n_steps, seed=seed, device=device, dtype=dtype, backend=dev)
    except RuntimeError as e:
        say(f"skipped: {e}")
        return []
    say(format_torch(tr))
    results["torch"] = tr
    return [] if tr["ok"] else ["torch"]


def gpu_check(*, stand_in: bool = False, quick: bool = False, steps: int | None = None, recipes=None,
              ops: bool = True, task: bool = True, torch: bool = False, torch_device: str = "cuda",
              torch_dtype: str = "float16", seed: int = 0, out=None) -> tuple[int, dict]:
    """Run the checks and print the report to ``out`` (default stdout).  Returns (exit status,
    results): 0 when every check held or there is no GPU (said plainly), 1 when a check failed.
    ``stand_in=True``: against ``CupyBackend(xp=numpy)`` instead of the GPU."""
    out = out or sys.stdout

    def say(*a):
        print(*a, file=out, flush=True)

    results: dict = {"python": platform.python_version(), "numpy": np.__version__}
    dev = _device(stand_in, say, results)
    if dev is None:
        return 0, results
    results["device"] = device_description(dev)
    say(f"fpsim gpu-check: numpy backend vs {results['device']}")
    say(f"python {results['python']}, numpy {results['numpy']}")
    ref_task = ReferenceTask(n=512) if quick else ReferenceTask()
    n_steps = steps if steps is not None else (3 if quick else 50)
    failed = []
    if ops:
        failed += _ops_part(dev, quick, seed, say, results)
    if task:
        failed += _task_part(dev, recipes, ref_task, n_steps, quick, seed, say, results)
    if torch:
        failed += _torch_part(dev, ref_task, n_steps, seed, torch_device, torch_dtype, say, results)
    say("\n== summary ==")
    if failed:
        say("FAILED: " + "; ".join(failed))
    else:
        say("all checks held" + (" (CPU stand-in: the code paths, not a GPU)" if stand_in else ""))
    results["failed"] = failed
    return (1 if failed else 0), results


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def add_arguments(p) -> None:
    p.add_argument("--stand-in", action="store_true",
                   help="compare against the CPU stand-in for cupy instead of a GPU: the cupy backend's code "
                        "with numpy standing in for cupy (exercises the code paths)")
    p.add_argument("--quick", action="store_true", help="small sizes and 3 steps: seconds")
    p.add_argument("--steps", type=int, default=None, help="training steps per recipe (default 50; --quick 3)")
    p.add_argument("--recipes", nargs="+", default=None, metavar="RECIPE",
                   help="recipes of the task check (default fp32 fp16-dynamic bf16-master)")
    p.add_argument("--seed", type=int, default=0, help="seed of inputs and initial weights (default 0)")
    p.add_argument("--no-ops", action="store_true", help="skip the op-by-op sweep")
    p.add_argument("--no-task", action="store_true", help="skip the reference-task comparison")
    p.add_argument("--torch", action="store_true",
                   help="also train the task with PyTorch autocast (+ GradScaler for float16) and compare")
    p.add_argument("--torch-device", default="cuda", help="PyTorch device for --torch (default cuda)")
    p.add_argument("--torch-dtype", default="float16", choices=["float16", "bfloat16", "float32"],
                   help="autocast dtype for --torch (default float16: GradScaler; bfloat16: none)")
    p.add_argument("--json", default=None, metavar="PATH", help="also write every number to this JSON file")


def main(args) -> int:
    if args.steps is not None:
        check_at_least(args.steps, 1, "--steps")
    if args.recipes:
        for r in args.recipes:
            get_recipe(r)  # unknown names: a clear ValueError before anything runs
    rc, results = gpu_check(stand_in=args.stand_in, quick=args.quick, steps=args.steps, recipes=args.recipes,
                            ops=not args.no_ops, task=not args.no_task, torch=args.torch,
                            torch_device=args.torch_device, torch_dtype=args.torch_dtype, seed=args.seed)
    if args.json:
        text = dumps(finite(results), indent=1, default=str)  # whole before the file is opened
        with open(args.json, "w") as fh:
            fh.write(text)
    return rc
