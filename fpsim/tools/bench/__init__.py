"""``fpsim bench``: how fast the emulation runs, as ratios against a peer timed in the same run.

Seven sections, each row one thing fpsim does and the peer it is held against:

1. rounding - ``fpsim.cast`` of 10**6 values (float32 and float64 input; a normal-ish mix and
   gradient-like tiny values, log-uniform in 1e-10..1e-3) into float16, bfloat16, e4m3fn and
   e5m2, against numpy / ml_dtypes ``astype`` of the same array (and gfloat's
   ``round_ndarray`` where installed).  ``astype`` is the floor: fpsim must round correctly
   where it does not (ml_dtypes before 0.7 rounds float64 -> bfloat16/fp8 twice), and numpy's
   float32 -> float16 cast is ~25x slower on results in float16's subnormal range.
   kernels (``kernelrows.py``) - each rounding and widening in ns a value, the compiled path
   (``fpsim.numerics.compiled``) against the numpy path, beside a float32 copy and ``astype(float16)``.
2. matmul - ``ops.matmul`` of two float16 tensors (float32 accumulation, one rounding of the
   float16 result) against ``np.matmul`` of float32 arrays of the same size: raw BLAS; the
   largest size also on ``numpy-f32`` (nothing to widen there).
3. step (``benchrows.py``) - one SGD training step of an MLP 784-256-256-10 (batch 128,
   cross-entropy) under the recipes fp32, fp16-dynamic and bf16-master on the numpy backend,
   and fp16-dynamic and bf16-master again on ``numpy-f32`` (rows marked ``[numpy-f32]``: the
   same numbers, held in float32 arrays); the low-precision steps against fpsim's fp32 step on
   numpy, fp16-dynamic also against PyTorch CPU float16 (``model.half()``, the same step), and
   fpsim fp32 against PyTorch CPU float32, at the same thread count.  Then one Adam step of the
   tiny GPT of ``fpsim compare --task tinygpt`` (its defaults): fp32 against PyTorch CPU's step of
   the same architecture, and fp16-amp (also on numpy-f32), bf16-master, fp8-delayed, mxfp8,
   nvfp4 and fp8-hopper against its fp32 step on numpy.
4. monitor - the fp16-dynamic step with one no-op rounding hook against none (an upper bound
   on what the ``if HOOKS:`` check costs when no monitor runs), and inside ``fpsim.monitor()``.
5. allocator (``allocrows.py``) - the tiny GPT's fp32 step with freed memory kept for reuse
   (``fpsim.tools.allocator``'s glibc thresholds) against glibc's defaults, in fresh processes.
6. gpu - the step on the cupy backend against PyTorch CUDA autocast + GradScaler, when a GPU
   is present; otherwise one row says why it was skipped.

Timing (``timing.py``): ``time.perf_counter``; each callable runs untimed first (warm-up),
then is timed in samples of enough calls to last ``min_time``; the callables of one row are
timed interleaved (A B, B A, A B, ...) so that a drift in machine load hits both, and a row's
ratio is the median of the per-sample ratios.  Times are medians per call.  The MLP steps
timed are in ``benchsteps.py``; ``--profile`` (``benchprofile.py``) splits one MLP step of each
recipe (fp16-dynamic and bf16-master on numpy-f32 too), and one tiny-GPT step of each of its
recipes, into GEMMs, rounding, widening, reductions, optimizer, scaler, quantization and Python.
"""

from __future__ import annotations

import gc
import importlib
import math
import statistics
import sys
import time
from dataclasses import asdict, dataclass

import ml_dtypes
import numpy as np

from ... import backend as _backend
from ... import ops, state
from ...formats import LOW_FORMATS, cast, get_format
from ...monitor import monitor
from ...tensor import no_grad, tensor
from ...textable import text_table
from .. import torchref
from ..jsonout import dumps, finite
from .allocrows import allocator_rows
from .blockrows import block_rows
from .kernelrows import KERNEL_CASES, kernel_rows
from .profile import format_profile, profile_gpt, profile_recipes
from .rows import Row, compare_row, gpt_task, step_rows
from .steps import fpsim_step, torch_step
from .timing import machine_info, median_ratio, time_interleaved

__all__ = ["Row", "BenchSettings", "machine_info", "run_bench", "format_report", "main"]

ROUND_FORMATS = LOW_FORMATS
SECTIONS = ("rounding", "kernels", "matmul", "step", "monitor", "allocator", "gpu")
_GFLOAT_FORMATS = {"float16": "format_info_binary16", "bfloat16": "format_info_bfloat16",
                   "float8_e4m3fn": "format_info_ocp_e4m3", "float8_e5m2": "format_info_ocp_e5m2"}


@dataclass(frozen=True)
class BenchSettings:
    """Sizes and repeat counts of a run (``quick()`` for a smoke run of a few seconds)."""

    n_round: int = 10**6
    matmul_sizes: tuple = (256, 1024)
    batch: int = 128
    repeats: int = 9  # timed samples per callable
    monitor_repeats: int = 31  # the 2% monitor-off target needs many interleaved samples
    warmup: int = 2  # untimed calls before timing
    min_time: float = 0.05  # seconds a sample lasts at least (calls are batched to reach it)
    gfloat_repeats: int = 3  # gfloat takes ~0.1-1 s per 10**6 values
    settle: float = 0.3  # pause (s) when timing switches between numpy's and PyTorch's threads
    quick: bool = False

    @classmethod
    def quick_settings(cls) -> BenchSettings:
        return cls(n_round=10**4, matmul_sizes=(32, 64), batch=32, repeats=2, monitor_repeats=2, warmup=1,
                   min_time=0.002, gfloat_repeats=1, settle=0.02, quick=True)


# ------------------------------------------------------------------------------------- machine


# ------------------------------------------------------------------------------------- rounding


# ml_dtypes before 0.7 casts float64 to bfloat16 / fp8 by way of float32 (two roundings)
_ML_DTYPES_ROUNDS_TWICE = tuple(int(v) for v in ml_dtypes.__version__.split(".")[:2]) < (0, 7)


def _round_inputs(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """float64 test inputs: 'normal' ~ N(0, 1); 'tiny' = +-10**U(-10, -3), gradient-like."""
    rng = np.random.default_rng(seed)
    normal = rng.standard_normal(n)
    tiny = 10.0 ** rng.uniform(-10, -3, n) * rng.choice([-1.0, 1.0], n)
    return {"normal": normal, "tiny": tiny}


def _gfloat_fn(fmt: str, x: np.ndarray):
    try:
        gf = importlib.import_module("gfloat")
        fi = getattr(importlib.import_module("gfloat.formats"), _GFLOAT_FORMATS[fmt])
    except (ImportError, AttributeError):
        return None
    return lambda: gf.round_ndarray(fi, x)


def _rounding_rows(s: BenchSettings, tick) -> list[Row]:
    rows = []
    inputs = _round_inputs(s.n_round)
    n_text = f"10^{round(math.log10(s.n_round))}" if s.n_round >= 10 else str(s.n_round)
    for src in ("float32", "float64"):
        for dist, x64 in inputs.items():
            x = x64.astype(src)
            for name in ROUND_FORMATS:
                f = get_format(name)
                peer = "numpy astype" if name == "float16" else "ml_dtypes astype"
                label = f"{n_text} {src} {dist} -> {name}"
                tick(f"rounding {label}")
                target, limit = "", None
                if name == "float16":
                    target, limit = "<= 1.5x", 1.5
                elif name == "bfloat16":
                    target, limit = "<= 10x (correct vs astype)", 10.0
                with np.errstate(over="ignore", invalid="ignore"):
                    row = compare_row("rounding", label, lambda x=x, f=f: cast(x, f), peer,
                                   lambda x=x, f=f: x.astype(f.dtype), s, target=target, limit=limit)
                    if src == "float64" and name != "float16" and _ML_DTYPES_ROUNDS_TWICE:
                        row.note = "astype rounds twice here (via float32); fpsim once"
                    g = _gfloat_fn(name, x)
                    if g is not None:
                        samples = time_interleaved([g], s.gfloat_repeats, 0, 0.0)[0]
                        row.others["gfloat round_ndarray"] = statistics.median(samples)
                rows.append(row)
    rows += block_rows(s, n_text, tick)
    rows += _mode_rows(s, n_text, tick)
    return rows


def _mode_rows(s: BenchSettings, n_text: str, tick) -> list[Row]:
    """One row per family of the newer rounding modes, each against nearest into the same format:
    a directed mode into an IEEE P3109 format, and few-bit stochastic rounding (8 random bits drawn
    from the generator inside the call, RNE variant) into float16."""
    x = np.random.default_rng(0).standard_normal(s.n_round).astype(np.float32)
    cases = [("p3109_k8p4se", "toward_zero", {}), ("float16", "stochastic", {"sr_bits": 8, "sr_variant": "rne"})]
    rows = []
    for fmt, mode, extra in cases:
        label = f"{n_text} float32 normal -> {fmt}, {mode}" + (" k=8 rne" if extra else "")
        tick(f"rounding {label}")
        with np.errstate(over="ignore", invalid="ignore"):
            rows.append(compare_row("rounding", label, lambda fmt=fmt, mode=mode, extra=extra: cast(x, fmt, mode, **extra),
                                 f"fpsim nearest into {fmt}", lambda fmt=fmt: cast(x, fmt), s,
                                 target="<= 2x", limit=2.0))
    return rows


# ------------------------------------------------------------------------------------- matmul


def _matmul_rows(s: BenchSettings, tick) -> list[Row]:
    rows = []
    rng = np.random.default_rng(1)
    for i, n in enumerate(s.matmul_sizes):
        last = i == len(s.matmul_sizes) - 1
        x, y = rng.standard_normal((n, n)), rng.standard_normal((n, n))
        for backend in ("numpy", "numpy-f32") if last else ("numpy",):
            tick(f"matmul n={n}" + ("" if backend == "numpy" else f" [{backend}]"))
            a, b = tensor(x, "float16", backend=backend), tensor(y, "float16", backend=backend)
            a32, b32 = a.f32().copy(), b.f32().copy()

            def emulated(a=a, b=b):
                with no_grad():
                    return ops.matmul(a, b)

            name = f"float16 @ float16 -> float16 (f32 accumulate), n={n}" + ("" if backend == "numpy" else
                                                                               f" [{backend}]")
            rows.append(compare_row("matmul", name, emulated, "np.matmul float32 (BLAS)",
                                 lambda a32=a32, b32=b32: np.matmul(a32, b32), s,
                                 target=">= 0.8x throughput (<= 1.25x time)" if last else "",
                                 limit=1.25 if last else None))
    rows.append(_pinning_row(s, tick))
    rows.append(_tensorcore_row(s, tick))
    return rows


def _tensorcore_row(s: BenchSettings, tick) -> Row:
    """fpsim's bit-accurate model of Hopper's fp8 tensor cores (``fpsim.tensorcore.matmul``: exact
    products aligned, truncated to 13 fraction bits and summed per 32-element slice of K) on a
    256 x 4096 x 256 product (32 x 512 x 32 with --quick), against float32 BLAS on the same values."""
    from ... import tensorcore

    m, k, n = (32, 512, 32) if s.quick else (256, 4096, 256)
    rng = np.random.default_rng(2)
    a = rng.standard_normal((m, k)).astype(get_format("float8_e4m3fn").dtype)
    b = rng.standard_normal((k, n)).astype(get_format("float8_e4m3fn").dtype)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    tick("matmul tensorcore.matmul")
    return compare_row("matmul", f"tensorcore.matmul(arch='hopper'), e4m3 {m} x {k} x {n}",
                    lambda: tensorcore.matmul(a, b, arch="hopper"), "np.matmul float32 (BLAS)",
                    lambda: state.blas_call(np.matmul, a32, b32), s, repeats=3, target="<= 20x", limit=20.0,
                    note="numpy passes over M x N x K: alignment, truncation, an exact sum")


def _pinning_row(s: BenchSettings, tick) -> Row:
    """What the same bits on every thread count cost: the fp32 MLP step with its products on fpsim's
    pinned BLAS thread count against the same step on the process's own BLAS threads (whose bits
    depend on that count: what fpsim did before it pinned)."""
    default = machine_info()["blas_threads"]
    label = f"fp32 MLP step (batch {s.batch}), products on {state.blas_threads()} pinned BLAS thread(s)"
    tick("matmul BLAS pinning")
    step = fpsim_step("fp32", s.batch)

    def unpinned():
        pinned = state.blas_threads()
        state.set_blas_threads(default)
        try:
            return step()
        finally:
            state.set_blas_threads(pinned)

    return compare_row("matmul", label, step, f"same step on the process's {default} BLAS thread(s)", unpinned, s,
                    note="the price of the same bits at every thread count (1.0x where the default is 1 thread)")


# ------------------------------------------------------------------------------------- training step: benchrows.py


# ------------------------------------------------------------------------------------- monitor


def _noop_hook(event):
    return None


def _monitor_rows(s: BenchSettings, tick) -> list[Row]:
    rows = []
    label = f"fp16-dynamic MLP step (batch {s.batch})"
    tick("monitor no-op hook")
    step = fpsim_step("fp16-dynamic", s.batch)

    def with_hook():
        with state.hooked(_noop_hook):
            return step()

    rows.append(compare_row("monitor", f"{label}, one no-op hook in state.HOOKS", with_hook,
                         "same step, state.HOOKS empty", step, s, repeats=s.monitor_repeats,
                         target="monitor off: <= 1.02x", limit=1.02,
                         note="bounds the 'if HOOKS:' check from above"))
    tick("monitor on")

    def monitored():
        with monitor():
            return step()

    rows.append(compare_row("monitor", f"{label} inside fpsim.monitor()", monitored, "same step, no monitor", step,
                         s, target="monitor on: <= 1.2x", limit=1.2))
    return rows


# ------------------------------------------------------------------------------------- gpu


def _gpu_rows(s: BenchSettings, tick, gpu_backend=None) -> list[Row]:
    """The step on the cupy backend (``gpu_backend``, default the real one when available)
    against PyTorch CUDA autocast + GradScaler."""
    be = gpu_backend
    if be is None:
        if "cupy" not in _backend.available():
            why = f"no GPU: fpsim.backend.available() = {_backend.available()} (needs cupy and a CUDA device)"
            return [Row("gpu", f"cupy {r} MLP step", "PyTorch CUDA autocast + GradScaler", skipped=why)
                    for r in ("fp32", "fp16-dynamic")]
        be = _backend.get_backend("cupy")
    xp = be.xp
    sync = (lambda: None) if xp is np else xp.cuda.get_current_stream().synchronize
    torch = torchref.import_torch()
    cuda = torch is not None and torch.cuda.is_available()
    rows = []
    ref = torch_step(torch, "float32", s.batch, device="cuda", amp=True) if cuda else None
    for r in ("fp32", "fp16-dynamic"):
        tick(f"gpu {r}")
        step = fpsim_step(r, s.batch, backend=be)

        def synced(step=step):
            out = step()
            sync()
            return out

        name = f"cupy {r} MLP step (batch {s.batch})" + (" [numpy stand-in]" if xp is np else "")
        if ref is None:
            t = statistics.median(time_interleaved([synced], s.repeats, s.warmup, s.min_time)[0])
            rows.append(Row("gpu", name, "PyTorch CUDA autocast + GradScaler", t,
                            skipped="" if xp is np else "PyTorch has no CUDA here",
                            note="no CUDA PyTorch to compare with" if xp is np else ""))
        else:
            a, b = time_interleaved([synced, ref], s.repeats, s.warmup, s.min_time, ["cupy", "torch"], s.settle)
            rows.append(Row("gpu", name, "PyTorch CUDA autocast + GradScaler", statistics.median(a),
                            statistics.median(b), median_ratio(a, b)))
    return rows


# ------------------------------------------------------------------------------------- driver


def _section_rows(sec: str, s: BenchSettings, tick, threads: int, gpu_backend) -> list[Row]:
    """The rows of one section (``tick`` is called as each row starts)."""
    if sec == "step":
        return step_rows(s, tick, threads)
    if sec == "gpu":
        return _gpu_rows(s, tick, gpu_backend)
    return {"rounding": _rounding_rows, "kernels": kernel_rows, "matmul": _matmul_rows, "monitor": _monitor_rows,
            "allocator": allocator_rows}[sec](s, tick)


def run_bench(settings: BenchSettings | None = None, *, sections=SECTIONS, progress: bool = True,
              gpu_backend=None) -> dict:
    """Run the benchmark; returns ``{"machine", "settings", "threads", "rows"}`` (rows as dicts)."""
    s = settings or BenchSettings()
    unknown = [x for x in sections if x not in SECTIONS]
    if unknown:
        raise ValueError(f"unknown bench section(s) {unknown}; known: {', '.join(SECTIONS)}")
    info = machine_info()
    threads = state.blas_threads()  # fpsim's products run on this many BLAS threads; PyTorch gets as many
    counts = {"rounding": 2 * 2 * len(ROUND_FORMATS) + 5, "kernels": 1 + len(KERNEL_CASES),
              "matmul": len(s.matmul_sizes) + 3, "step": 2, "monitor": 2,
              "allocator": 1, "gpu": 2}
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=sum(counts[x] for x in sections), desc="fpsim bench", unit="row", leave=False,
                   disable=None, file=sys.stderr)

    started = []

    def tick(what: str):  # called as each row starts: the previous one is done
        if bar is not None:
            if started:
                bar.update(1)
            started.append(what)
            bar.set_postfix_str(what[:50])

    rows: list[Row] = []
    try:
        with np.errstate(all="ignore"):
            for sec in SECTIONS:
                if sec not in sections:
                    continue
                gc.collect()  # once per section, not per sample: with torch loaded a collection takes ~0.1 s
                time.sleep(s.settle)  # let the previous section's spinning BLAS / OpenMP threads go idle
                rows += _section_rows(sec, s, tick, threads, gpu_backend)
    finally:
        if bar is not None:
            bar.close()
    torch = torchref.import_torch()
    return {
        "machine": info,
        "settings": asdict(s),
        "threads": {"numpy_blas": threads, "torch": threads if torch is not None else None,
                    "how": f"torch.set_num_threads({threads}) to match the BLAS threads fpsim pins its products to "
                           f"(FPSIM_BLAS_THREADS; the process default is {info['blas_threads']}, "
                           f"{info['blas_threads_from']})"},
        "rows": [asdict(r) for r in rows],
    }


# ------------------------------------------------------------------------------------- report


def _t(sec) -> str:
    if sec is None:
        return "-"
    if sec >= 1:
        return f"{sec:.2f} s"
    if sec >= 1e-3:
        return f"{sec * 1e3:.3g} ms"
    return f"{sec * 1e6:.3g} us"


def _ratio(r) -> str:
    return "-" if r is None else (f"{r:.3g}x" if r < 100 else f"{r:.0f}x")


def format_report(result: dict) -> str:
    """The table ``fpsim bench`` prints: the machine, then one line per row."""
    m = result["machine"]
    lines = [
        f"machine: {m['cpu']}, {m['cores']} cores ({m['usable_cores']} usable), {m['platform']}",
        f"python {m['python']}, numpy {m['numpy']} ({m['blas']}), ml_dtypes {m['ml_dtypes']}, "
        f"torch {m['torch'] or 'not installed'}, gfloat {m['gfloat'] or 'not installed'}",
        f"threads: {result['threads']['how']}" if result["threads"]["torch"] else
        f"threads: numpy BLAS {m['blas_threads']} ({m['blas_threads_from']})",
    ]
    if "load_average" in m:
        load = m["load_average"]
        busy = load[0] > 0.5 * m["usable_cores"]
        lines.append(f"load average at start: {', '.join(map(str, load))}"
                     + (f" - BUSY for {m['usable_cores']} cores: other processes compete, the numbers are noisy "
                        "(BLAS threads spin-wait; with more runnable threads than cores they slow down a lot)"
                        if busy else ""))
    s = result["settings"]
    lines.append(f"{s['repeats']} interleaved samples per timing ({s['monitor_repeats']} for the monitor-off row), "
                 f"{s['warmup']} warm-up calls, samples >= {s['min_time'] * 1e3:g} ms, {s['settle']:g} s pause when "
                 "switching between numpy's and PyTorch's threads; medians"
                 + (" [--quick: smoke run, numbers not meaningful]" if s["quick"] else ""))
    lines.append("")
    cols = ["section", "measurement", "fpsim", "peer", "peer time", "ratio", "target", "met", "notes"]
    table = []
    for r in result["rows"]:
        notes = [f"{k} {_t(v)} ({_ratio(r['seconds'] / v) if r['seconds'] and v else '-'})"
                 for k, v in r["others"].items()]
        if r["note"]:
            notes.append(r["note"])
        if r["skipped"]:
            notes.insert(0, f"skipped: {r['skipped']}")
        met = "-" if r["met"] is None else ("yes" if r["met"] else "NO")
        table.append([r["section"], r["name"], _t(r["seconds"]), r["peer"], _t(r["peer_seconds"]),
                      _ratio(r["ratio"]), r["target"] or "-", met, "; ".join(notes)])
    lines += text_table(cols, table)
    targets = [r for r in result["rows"] if r["limit"] is not None and r["met"] is not None]
    lines += ["", f"targets met: {sum(r['met'] for r in targets)} of {len(targets)}",
              "ratio = fpsim time / peer time (below 1: fpsim faster), the median of per-sample ratios."]
    return "\n".join(lines)


def add_arguments(p) -> None:
    p.add_argument("--quick", action="store_true", help="smoke run: tiny sizes, 1-2 repeats, a few seconds")
    p.add_argument("--json", action="store_true", help="print the results as JSON instead of the table")
    p.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS), metavar="SECTION",
                   help=f"which sections to run (default all: {' '.join(SECTIONS)})")
    p.add_argument("--repeats", type=int, default=None, help="timed samples per measurement (default 9)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--labs", nargs="*", metavar="LAB", default=None,
                   help="instead of the table: run every lab notebook (or the ones named: a number, a lab's name or "
                        "a notebook's path) in a fresh kernel and print how long each took and its slowest cell "
                        "(needs nbclient, from [labs] or [test])")
    p.add_argument("--profile", action="store_true",
                   help="instead of the table: where one training step's time goes, per recipe (GEMMs, rounding, "
                        "widening, reductions, optimizer, scaler, Python), as shares of the step")


def main(args) -> int:
    """``fpsim bench``: run, then print the table (or JSON)."""
    s = BenchSettings.quick_settings() if args.quick else BenchSettings()
    if args.repeats is not None:
        if args.repeats < 1:
            raise ValueError(f"--repeats must be >= 1, got {args.repeats}")
        s = BenchSettings(**{**asdict(s), "repeats": args.repeats})
    if getattr(args, "labs", None) is not None:
        from .labtime import print_lab_times

        return print_lab_times(args.labs or None, as_json=args.json)
    if getattr(args, "profile", False):
        prof = profile_recipes(batch=s.batch, steps=5 if s.quick else 50, warmup=s.warmup)
        prof["gpt"] = profile_gpt(steps=1 if s.quick else 10, warmup=1 if s.quick else 2, task=gpt_task(s))
        print(dumps(finite(prof), indent=1) if args.json else format_profile(prof))
        return 0
    if not args.json:
        print("fpsim bench" + (" --quick" if args.quick else "") + ": measuring (a full run takes a minute or two)",
              file=sys.stderr)
    result = run_bench(s, sections=args.sections, progress=not args.quiet)
    if args.json:
        print(dumps(finite(result), indent=1))
    else:
        print(format_report(result))
    return 0
