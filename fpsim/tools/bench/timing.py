"""How ``fpsim bench`` times and what it says about the machine.

Timing: ``time.perf_counter``; each callable runs untimed first (warm-up), then is timed in
samples of enough calls to last ``min_time``; the callables of one row are timed interleaved
(A B, B A, A B, ...) so that a drift in machine load hits both, and a row's ratio is the median
of the per-sample ratios (:func:`median_ratio`).
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import statistics
import time

import numpy as np

from ... import backend as _backend

__all__ = ["time_interleaved", "median_ratio", "process_blas_threads", "machine_info"]


def _calls_per_sample(fn, min_time: float) -> int:
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    return max(1, min(10_000, math.ceil(min_time / dt))) if dt > 0 else 10_000


def _sample(fn, number: int) -> float:
    t0 = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - t0) / number


def time_interleaved(fns: list, repeats: int, warmup: int, min_time: float, groups=None,
                     settle: float = 0.0) -> list[list[float]]:
    """Seconds per call of each callable, ``repeats`` samples each, taken interleaved (the
    order reverses every round so no callable always runs first).

    ``groups`` names the thread pool each callable runs on (numpy's BLAS, PyTorch's OpenMP);
    when the next sample switches pool, wait ``settle`` seconds first: a pool's idle threads
    spin for a while after each parallel region, and on a 2-core machine that spinning takes
    the other pool's cores (interleaved without a pause, both come out up to 2x slower).
    """
    groups = groups or [0] * len(fns)
    last = [None]

    def enter(i):
        if last[0] is not None and groups[i] != last[0] and settle > 0:
            time.sleep(settle)
        last[0] = groups[i]

    numbers = []
    for i, fn in enumerate(fns):
        enter(i)
        for _ in range(warmup):
            fn()
        numbers.append(_calls_per_sample(fn, min_time))
    samples: list[list[float]] = [[] for _ in fns]
    for r in range(repeats):
        order = list(range(len(fns)))
        if r % 2:
            order.reverse()
        for i in order:
            enter(i)
            samples[i].append(_sample(fns[i], numbers[i]))
    return samples


def median_ratio(a: list[float], b: list[float]) -> float:
    """Median of the per-round ratios a/b (robust to load that drifts between rounds)."""
    return statistics.median(x / y for x, y in zip(a, b))


# ------------------------------------------------------------------------------------- machine


def _version(dist: str) -> str | None:
    """An installed distribution's version, without importing it (torch takes seconds)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def process_blas_threads() -> tuple[int, str]:
    """(threads numpy's BLAS uses in this process, how that was found), asked of threadpoolctl;
    where it finds no BLAS library, the usual environment variables, else the usable cores
    (OpenBLAS's and MKL's default).  Not fpsim's pinned count: that is ``fpsim.state.blas_threads``."""
    from threadpoolctl import threadpool_info

    blas = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    if blas:
        return int(blas[0]["num_threads"]), f"threadpoolctl ({blas[0].get('internal_api', '?')})"
    for var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
        v = os.environ.get(var, "")
        if v.isdigit() and int(v) > 0:
            return int(v), f"${var}"
    return _usable_cores(), "usable cores (no BLAS library found by threadpoolctl)"


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def machine_info() -> dict:
    """The machine and library versions a run was measured on."""
    threads, how = process_blas_threads()
    info = {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": _usable_cores(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "ml_dtypes": _version("ml_dtypes"),
        "torch": _version("torch"),
        "gfloat": _version("gfloat"),
        "blas": _blas_name(),
        "blas_threads": threads,
        "blas_threads_from": how,
        "backends": _backend.available(),
    }
    with contextlib.suppress(OSError, AttributeError):
        info["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return info


def _blas_name() -> str:
    try:
        cfg = np.show_config(mode="dicts")
        blas = cfg["Build Dependencies"]["blas"]
        return f"{blas.get('name', '?')} {blas.get('version', '')}".strip()
    except Exception:  # older numpy without mode="dicts": not worth failing a benchmark over
        return "?"
