"""``fpsim bench --profile``: where one training step's time goes.

For each recipe of the bench's step section on the numpy backend, and for fp16-dynamic and
bf16-master on ``numpy-f32`` too (columns ``"fp16-dynamic [numpy-f32]"``: the same numbers
held in float32 arrays, so nothing is ever widened), the MLP step runs ``steps`` times under a
profile hook (``sys.setprofile``, installed only here: the engine itself has no timers and pays
nothing) that charges the time between two events to the category of the innermost
categorised call:

- ``gemm``        ``Backend.matmul`` (BLAS sgemm on float32 operands)
- ``rounding``    ``Backend.round`` / ``round_saturating`` and the stochastic-rounding path:
                  float32 -> the stored format (float16: ``formats.kernels``; bfloat16 / fp8:
                  ml_dtypes or the fp8 table)
- ``widening``    ``Backend.to_f32``: stored format -> float32 (numpy-f32's ``to_f32`` converts
                  nothing - its arrays are float32 already, ``astype(copy=False)`` returns them -
                  so it is not counted: there the category is 0)
- ``reductions``  numpy reductions (``ufunc.reduce``, ``ndarray.sum`` / ``max`` / ...) called
                  by the ops, their backwards and the loss - not those inside another category
- ``optimizer``   ``Optimizer.step``'s own work (the float32 update arithmetic and its Python)
- ``scaler``      ``GradScaler.scale`` / ``unscale_`` / ``step`` / ``update``'s own work (the
                  unscale multiply, the inf/NaN check), without the optimizer step it calls
- ``quantize``    the low-precision recipes' operand quantization: block formats
                  (``formats.quantize``, ``BlockQuantized.dequantize``, the Hadamard transform) and
                  fp8 (``lowp.quantize_fp8``, the scaling state's casts), everything they call included
- ``compiled``    inside the compiled path's numba kernels (``fpsim.numerics.compiled``, where numba is
                  installed and the path on), whichever category called them: the kernels' loops
                  alone - the Python around them and the numpy work they wait on (the float64 dgemm of
                  the exact matmul) stay in the caller's category
- ``python``      everything else: the autograd graph and walk, op dispatch, and the ops' own
                  float32 elementwise arithmetic (bias add, relu select, softmax), which numpy
                  runs without a Python-visible call to time it by

The tiny GPT (:func:`profile_gpt`, printed after the MLP's table) is profiled the same way, one
Adam step of ``fpsim compare --task tinygpt``'s model under fp32, fp16-amp, bf16-master,
fp8-delayed, a block recipe (mxfp8) and nvfp4.

Innermost wins: the rounding an optimizer does is ``rounding``.  But rounding is a leaf: what
a rounding calls is rounding too (numpy-f32 rounds into bfloat16 / fp8 and widens the result
back into its float32 array: that widening is part of its rounding) - except a compiled kernel,
which is ``compiled`` inside every category, leaves included: so a rounding's share is what is
left of it on numpy, and ``compiled`` the share the compiled path runs.  The hook's own time is
charged to nothing (it reads the clock on entry and again on exit), so the categories add up
to the profiled step less the hook; the shares printed are of that sum, and the table also
shows the step's unprofiled time, measured just before, so the distortion is visible.
"""

from __future__ import annotations

import contextlib
import inspect
import statistics
import sys
import time

import numpy as np

from ... import backend as _backend
from ... import optim
from ...amp import GradScaler
from ...experiments.tinygpt import TinyGPTTask, training_step
from ...formats import block as _block
from ...formats import blockfast as _blockfast
from ...lowp import block as _lowp_block
from ...lowp import quant as _quant
from ...lowp import scaling as _scaling
from ...numerics import compiled as _compiled
from ...tensor import _round_special
from ...textable import text_table
from .steps import MLP_SIZES, fpsim_step

__all__ = ["TIME_CATEGORIES", "COLUMNS", "GPT_COLUMNS", "column", "profile_step", "profile_recipes", "profile_gpt",
           "format_profile"]

TIME_CATEGORIES = ("gemm", "rounding", "widening", "reductions", "optimizer", "scaler", "quantize", "compiled",
                   "python")
COLUMNS = ("fp32", "fp16-dynamic", "bf16-master", "fp16-dynamic [numpy-f32]", "bf16-master [numpy-f32]")
GPT_COLUMNS = ("fp32", "fp16-amp", "bf16-master", "fp8-delayed", "mxfp8", "nvfp4")
_REDUCTION_METHODS = frozenset({"reduce", "sum", "max", "min", "mean", "any", "all", "argmax", "argmin", "prod"})
_OUTER = frozenset({"python"})  # reductions count as such only when called from uncategorised code
_LEAVES = frozenset({"rounding", "quantize", "compiled"})  # what these call is theirs too


def _code_categories() -> dict:
    """code object -> category, for every backend's methods and the optimizer / scaler phases."""
    cats = {}
    for be_cls in (_backend.Backend, _backend.NumpyBackend, _backend.NumpyF32Backend, _backend.CupyBackend):
        for name, cat in (("matmul", "gemm"), ("round", "rounding"), ("round_saturating", "rounding"),
                          ("to_f32", "widening"), ("rne_round", "rounding")):
            fn = be_cls.__dict__.get(name)
            if fn is not None and not (be_cls is _backend.NumpyF32Backend and name == "to_f32"):  # a no-op
                cats[fn.__code__] = cat
    cats[_round_special.__code__] = "rounding"
    for fn in (_block.quantize, _block.BlockQuantized.dequantize, _blockfast.fake_quantize, _blockfast.fake_quantize_on_grid,
               _lowp_block.hadamard_transform, _quant.quantize_fp8, _scaling.ScalingState._cast):
        cats[inspect.unwrap(fn).__code__] = "quantize"  # unwrapped: a decorator's wrapper code is shared
    cats[optim.Optimizer.step.__code__] = "optimizer"
    for name in ("scale", "unscale_", "step", "update"):
        cats[getattr(GradScaler, name).__code__] = "scaler"
    return cats


def _is_reduction(fn) -> bool:
    return getattr(fn, "__name__", "") in _REDUCTION_METHODS and isinstance(
        getattr(fn, "__self__", None), np.ndarray | np.ufunc)


class _Profiler:
    """The ``sys.setprofile`` hook: a stack of effective categories, one entry per open call."""

    def __init__(self):
        self.codes = _code_categories()
        self.acc = dict.fromkeys(TIME_CATEGORIES, 0.0)
        self.stack = ["python"]
        self.last = 0.0

    def __call__(self, frame, event, arg):
        now = time.perf_counter()
        stack = self.stack
        self.acc[stack[-1]] += now - self.last
        top = stack[-1]
        if event == "call":
            code = frame.f_code
            stack.append("compiled" if code is _SHIM_CODE else top if top in _LEAVES else self.codes.get(code, top))
        elif event == "c_call":
            stack.append("reductions" if top in _OUTER and _is_reduction(arg) else top)
        elif len(stack) > 1:  # return, c_return, c_exception (the outermost frame's return keeps the base)
            stack.pop()
        self.last = time.perf_counter()

    def run(self, fn, n: int) -> None:
        self.stack = ["python"]
        self.last = time.perf_counter()
        sys.setprofile(self)
        try:
            for _ in range(n):
                fn()
        finally:
            sys.setprofile(None)
        self.acc[self.stack[-1]] += time.perf_counter() - self.last


def _shim(kernel):
    def compiled_kernel(*args, **kwargs):
        return kernel(*args, **kwargs)
    return compiled_kernel


_SHIM_CODE = _shim(None).__code__  # every shim's code: the hook charges its calls to "compiled"


@contextlib.contextmanager
def _kernels_seen():
    """Within the block, every numba kernel that the compiled path's Python code calls (the
    kernels held as globals of ``fpsim.numerics.compiled``'s modules) is called through a Python
    shim, so the profile hook sees the call and what it costs (a numba kernel makes no event of its
    own); the kernels are put back after.  Nothing where the compiled path is off."""
    saved = []
    if _compiled.kernels() is not None:
        for name, mod in list(sys.modules.items()):
            if name.startswith(_compiled.__name__ + ".") and mod is not None:
                for attr, obj in list(vars(mod).items()):
                    if hasattr(obj, "py_func") and hasattr(obj, "signatures"):  # a numba dispatcher
                        saved.append((mod, attr, obj))
                        setattr(mod, attr, _shim(obj))
    try:
        yield
    finally:
        for mod, attr, obj in saved:
            setattr(mod, attr, obj)


def profile_step(step, steps: int = 50, warmup: int = 3) -> dict:
    """Profile ``steps`` calls of ``step``: per-category seconds per step, their shares (summing
    to 1), the step's unprofiled median time and the profiled time per step."""
    for _ in range(warmup):
        step()
    plain = []
    for _ in range(max(3, steps // 5)):
        t0 = time.perf_counter()
        step()
        plain.append(time.perf_counter() - t0)
    prof = _Profiler()
    with _kernels_seen():
        t0 = time.perf_counter()
        prof.run(step, steps)
        wall = (time.perf_counter() - t0) / steps
    per_step = {c: prof.acc[c] / steps for c in TIME_CATEGORIES}
    total = sum(per_step.values())
    shares = {c: (v / total if total > 0 else 0.0) for c, v in per_step.items()}
    return {"seconds": per_step, "shares": shares, "attributed": total, "profiled_wall": wall,
            "step_seconds": statistics.median(plain), "steps": steps}


def column(spec: str) -> tuple[str, str]:
    """A column's (recipe, backend): ``"fp16-dynamic [numpy-f32]"``, or a plain recipe on numpy."""
    if spec.endswith("]") and " [" in spec:
        recipe, be = spec[:-1].rsplit(" [", 1)
        return recipe, be
    return spec, "numpy"


def profile_recipes(recipes=COLUMNS, batch: int = 128, steps: int = 50, warmup: int = 3) -> dict:
    """``profile_step`` of the bench's MLP step for each column (see :func:`column`), keyed by
    the column, each with its ``recipe`` and ``backend``."""
    out = {}
    with np.errstate(all="ignore"):
        for spec in recipes:
            recipe, be = column(spec)
            out[spec] = {**profile_step(fpsim_step(recipe, batch, backend=be), steps, warmup), "recipe": recipe,
                         "backend": be}
    return {"model": f"MLP {'-'.join(map(str, MLP_SIZES))} batch {batch} SGD step", "recipes": out}


def profile_gpt(recipes=GPT_COLUMNS, steps: int = 10, warmup: int = 2, task: TinyGPTTask | None = None) -> dict:
    """``profile_step`` of one tiny-GPT Adam step (``experiments.tinygpt.training_step`` on
    numpy; ``task``, by default the task's defaults) for each recipe."""
    task = task if task is not None else TinyGPTTask()
    out = {}
    with np.errstate(all="ignore"):
        for r in recipes:
            out[r] = {**profile_step(training_step(r, task), steps, warmup), "recipe": r, "backend": "numpy"}
    return {"model": f"tiny GPT ({task.n_layers} layers, d_model {task.d_model}, context {task.context}) batch "
                     f"{task.batch} Adam step", "recipes": out}


def _ms(sec: float) -> str:
    return f"{sec * 1e3:.3f}"


def format_profile(result: dict) -> str:
    """One table: a row per category, per recipe its ms per step and share."""
    recipes = list(result["recipes"])
    cols = ["category"] + [f"{r} {u}" for r in recipes for u in ("ms", "share")]
    rows = []
    for c in TIME_CATEGORIES:
        line = [c]
        for r in recipes:
            p = result["recipes"][r]
            line += [_ms(p["seconds"][c]), f"{100 * p['shares'][c]:.1f}%"]
        rows.append(line)
    total = ["total (attributed)"]
    plain = ["step, unprofiled"]
    for r in recipes:
        p = result["recipes"][r]
        total += [_ms(p["attributed"]), f"{100 * sum(p['shares'].values()):.1f}%"]
        plain += [_ms(p["step_seconds"]), "-"]
    rows += [total, plain]
    steps = next(iter(result["recipes"].values()))["steps"] if recipes else 0
    head = [f"where one training step's time goes: {result['model']}, {steps} profiled steps per recipe",
            "(innermost category wins; 'compiled' = inside the compiled path's numba kernels, whoever called them; "
            "'python' = graph, dispatch and the ops' own float32 elementwise work; columns without [backend] run on "
            "numpy)", ""]
    text = "\n".join(head + text_table(cols, rows))
    return text + ("\n\n" + format_profile(result["gpt"]) if "gpt" in result else "")
