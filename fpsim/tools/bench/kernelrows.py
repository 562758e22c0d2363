"""``fpsim bench --sections kernels``: what each rounding and widening costs a value, on the numpy
path and on the compiled path (``fpsim.numerics.compiled``), timed interleaved in one run.

One row per rounding, on 10**6 float32 values (normal, N(0, 1); 10**4 with ``--quick``): the engine's
kernels (``formats.kernels``: float32 -> float16 / bfloat16 / e4m3, ``snap_f16``, the widenings and
the unscaling widening; ``fp8kernels.scaled_fp8``), then the public roundings (``fpsim.cast`` /
``round_to`` into float16, bfloat16, e4m3fn, e5m2, e2m1, e3m2 and a P3109 format, stochastic
rounding with given bits, MX and NVFP4 block quantization), then ``fpsim.cast`` from float64 (the
same values as float64, and for float16 also tiny ones, 10**U(-10, -3) of either sign: most land in
float16's subnormal range, where numpy's own cast is slowest) into float16, bfloat16, e4m3fn, e5m2,
e2m1 and e3m2.  Each row's time is the compiled
path's, its peer the numpy path's (``use_compiled(False)``), and its note both in ns a value; the
issue's target, 0.5 ns a value, is judged on the compiled path.  The first row holds a float32
copy against numpy's own ``astype(float16)``: the floor and the library cast, in the same run.
Where numba is not installed, or ``FPSIM_NUMBA=0``, the rows say so and time nothing.
"""

from __future__ import annotations

import math
import statistics

import numpy as np

from ...formats import cast, fp8kernels, get_format, kernels, quantize, round_to
from ...numerics import compiled
from .rows import Row
from .timing import median_ratio, time_interleaved

__all__ = ["KERNEL_CASES", "kernel_rows"]

_TARGET_NS = 0.5  # the target: every rounding at most 0.5 ns a value
_MIN_TIME = 0.005  # seconds a sample lasts at least: a 10**6-value call takes 0.2-20 ms, the section a few seconds


def _cases(x: np.ndarray) -> dict:
    """What each row times: label -> a callable on the prepared inputs (all built here, untimed)."""
    e4, e5 = get_format("float8_e4m3fn"), get_format("float8_e5m2")
    h = x.astype(np.float16)
    c8 = x.astype(e4.dtype)
    bits = np.random.default_rng(1).integers(0, 2**8, x.size, dtype=np.uint32)
    x64 = x.astype(np.float64)
    rng = np.random.default_rng(2)
    tiny = 10.0 ** rng.uniform(-10, -3, x.size) * rng.choice([-1.0, 1.0], x.size)
    return {
        "kernels.f32_to_f16 (the engine's float16 rounding)": lambda: kernels.f32_to_f16(x),
        "kernels.snap_f16 (numpy-f32's float16 rounding)": lambda: kernels.snap_f16(x),
        "kernels.f32_to_bf16 (the engine's bfloat16 rounding)": lambda: kernels.f32_to_bf16(x),
        "kernels.f32_to_fp8 e4m3fn, saturating": lambda: kernels.f32_to_fp8(x, e4, saturate=True),
        "fp8kernels.scaled_fp8 e4m3fn (per-tensor scaling)": lambda: fp8kernels.scaled_fp8(x, 8.0, e4),
        "fp8kernels.scaled_fp8 e5m2, values only": lambda: fp8kernels.scaled_fp8(x, 8.0, e5, codes=False),
        "kernels.f16_to_f32 (widening)": lambda: kernels.f16_to_f32(h),
        "kernels.f16_to_f32_scaled (GradScaler's unscaling)": lambda: kernels.f16_to_f32_scaled(h, 2.0**-10),
        "kernels.fp8_to_f32 e4m3fn (widening)": lambda: kernels.fp8_to_f32(c8),
        "fpsim.cast -> float16": lambda: cast(x, "float16"),
        "fpsim.round_to -> float16": lambda: round_to(x, "float16"),
        "fpsim.cast -> bfloat16": lambda: cast(x, "bfloat16"),
        "fpsim.cast -> float8_e4m3fn": lambda: cast(x, "float8_e4m3fn"),
        "fpsim.cast -> float8_e5m2": lambda: cast(x, "float8_e5m2"),
        "fpsim.cast -> float4_e2m1fn": lambda: cast(x, "float4_e2m1fn"),
        "fpsim.cast -> float6_e3m2fn": lambda: cast(x, "float6_e3m2fn"),
        "fpsim.cast -> p3109_k8p4se": lambda: cast(x, "p3109_k8p4se"),
        "fpsim.cast -> float16, stochastic (8 bits given)": lambda: cast(x, "float16", "stochastic", sr_bits=8,
                                                                          sr_random=bits),
        "fpsim.quantize -> mxfp8_e4m3": lambda: quantize(x, "mxfp8_e4m3"),
        "fpsim.quantize -> nvfp4": lambda: quantize(x, "nvfp4"),
        "fpsim.cast float64 -> float16": lambda: cast(x64, "float16"),
        "fpsim.cast float64 tiny -> float16": lambda: cast(tiny, "float16"),
        "fpsim.cast float64 -> bfloat16": lambda: cast(x64, "bfloat16"),
        "fpsim.cast float64 -> float8_e4m3fn": lambda: cast(x64, "float8_e4m3fn"),
        "fpsim.cast float64 -> float8_e5m2": lambda: cast(x64, "float8_e5m2"),
        "fpsim.cast float64 -> float4_e2m1fn": lambda: cast(x64, "float4_e2m1fn"),
        "fpsim.cast float64 -> float6_e3m2fn": lambda: cast(x64, "float6_e3m2fn"),
    }


KERNEL_CASES = tuple(_cases(np.zeros(1, np.float32)))  # the row labels, in order


def _ns(seconds: float, n: int) -> float:
    return seconds / n * 1e9


def _path(fn, on: bool):
    def run():
        with compiled.use_compiled(on):
            return fn()
    return run


def _floor_row(x: np.ndarray, s, n_text: str) -> Row:
    """A float32 copy against numpy's own astype(float16): the floor and the library cast."""
    a, b = time_interleaved([x.copy, lambda: x.astype(np.float16)], s.repeats, s.warmup, min(s.min_time, _MIN_TIME))
    t, p = statistics.median(a), statistics.median(b)
    return Row("kernels", f"{n_text} float32 copy", "numpy astype(float16)", t, p, median_ratio(a, b),
               note=f"copy {_ns(t, x.size):.3g} ns a value, astype(float16) {_ns(p, x.size):.3g} ns a value")


def kernel_rows(s, tick) -> list[Row]:
    """The section's rows (``s``: the run's ``BenchSettings``; ``tick`` as each row starts)."""
    n = s.n_round
    n_text = f"10^{round(math.log10(n))}" if n >= 10 else str(n)
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    tick("kernels float32 copy")
    rows = [_floor_row(x, s, n_text)]
    if not compiled.enabled():
        why = "the compiled path is off (numba not installed, or FPSIM_NUMBA=0): nothing to compare"
        return rows + [Row("kernels", f"{n_text} {label}", "the same, numpy path", skipped=why) for label in KERNEL_CASES]
    with np.errstate(over="ignore", invalid="ignore"):
        for label, fn in _cases(x).items():
            tick(f"kernels {label}")
            a, b = time_interleaved([_path(fn, True), _path(fn, False)], s.repeats, s.warmup, min(s.min_time, _MIN_TIME))
            t, p = statistics.median(a), statistics.median(b)
            row = Row("kernels", f"{n_text} {label}", "the same, numpy path", t, p, median_ratio(a, b),
                      target=f"<= {_TARGET_NS:g} ns a value",
                      note=f"compiled {_ns(t, n):.3g} ns a value, numpy path {_ns(p, n):.3g}")
            row.met = _ns(t, n) <= _TARGET_NS
            rows.append(row)
    return rows
