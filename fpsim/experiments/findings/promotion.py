"""``tensor-core-accumulation``: Hopper's fp8 tensor cores keep about 13 fraction bits and truncate
while they accumulate, so long dot products lose accuracy; promoting the partial sum into float32
every 128 elements of K restores it (DeepSeek-V3, arXiv 2412.19437, section 3.3.2; MMA-Sim, arXiv
2511.10909).

Runs on the tensor-core model ``fpsim.tensorcore.matmul(a, b, arch="hopper", promote_every=...)``
and needs it: without that module the finding says so and does not run.  The miniature: M x N dot
products of all-positive e4m3 values (|N(0, 1)| rounded to e4m3; fpsim's float32 normal draws) for K
in a sweep, each against the exact sum (float64: the products of e4m3 values and their sums up to
K = 16384 are exact there, in any order).
Reported: the mean and the largest |relative error| at each K, without promotion and with
promotion every 128.
"""

from __future__ import annotations

import importlib

import numpy as np

from ...formats import get_format
from ...numerics import mean64
from ...numerics.random import normal
from .base import FINDINGS, Finding, pct, say

NAME = "tensor-core-accumulation"


def errors(k: int, m: int, n: int, seed: int, promote_every) -> tuple[float, float]:
    """(mean, max |.|) relative error of the Hopper fp8 product of (m, k) and (k, n) all-positive e4m3 data."""
    tc = importlib.import_module("fpsim.tensorcore")
    e4m3 = get_format("float8_e4m3fn").dtype
    rng = np.random.default_rng([seed, k])
    a = np.abs(normal(rng, (m, k))).astype(e4m3)
    b = np.abs(normal(rng, (k, n))).astype(e4m3)
    # exact in any order (so the BLAS's cannot change it): every product is a multiple of 2^-18
    # (e4m3's smallest step is 2^-9), and the sums stay below 2^53 * 2^-18 = 2^35 (|x| < 6 here)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    got = np.asarray(tc.matmul(a, b, arch="hopper", promote_every=promote_every), dtype=np.float64)
    rel = (got - exact) / exact
    return float(mean64(rel)), float(np.abs(rel).max())


def measure(quick: bool = True, seeds=(0,), progress=None) -> tuple[dict, dict]:
    """The errors at each K of the sweep, with and without promotion (module docstring), from the
    first seed's draws; the series: the K values and the numbers."""
    ks, (m, n) = ((512, 4096), (8, 16)) if quick else ((512, 4096, 16384), (32, 64))
    numbers = {}
    for k in ks:
        for promote in (None, 128):
            say(progress, f"K = {k}, {'no promotion' if promote is None else f'promotion every {promote}'}")
            tag = f"k{k}_{'none' if promote is None else promote}"
            numbers[f"{tag}_mean"], numbers[f"{tag}_max"] = errors(k, m, n, seeds[0], promote)
    return numbers, {"ks": list(ks), **numbers}


def measured(numbers: dict, series: dict) -> str:
    return (f"K = 4096: mean relative error {pct(numbers['k4096_none_mean'], 2)} without promotion, "
            f"{pct(numbers['k4096_128_mean'], 3)} with promotion every 128 (largest |error| "
            f"{pct(numbers['k4096_none_max'], 2)} and {pct(numbers['k4096_128_max'], 3)})")


def verdict(numbers: dict) -> tuple[str, str]:
    none, prom = abs(numbers["k4096_none_mean"]), abs(numbers["k4096_128_mean"])
    if 0.01 <= none <= 0.1 and prom <= 0.002:
        return "reproduced", (f"at K = 4096 truncating accumulation is off by {pct(none, 1)} (source: about 2% at "
                              f"most in DeepSeek-V3's runs, -7.0% on all-positive data) and promotion every 128 "
                              f"brings it to {pct(prom, 3)}")
    if prom < none / 10:
        return "partly", f"promotion cuts the error from {pct(none, 2)} to {pct(prom, 3)}, but not at the source's size"
    return "not at this scale", f"promotion did not cut the error ({pct(none, 2)} -> {pct(prom, 3)})"


def draw(ax, series: dict) -> None:
    """|mean relative error| against K, without promotion and with promotion every 128."""
    ks, numbers = series["ks"], series
    for promote, label in ((None, "no promotion"), (128, "promotion every 128")):
        tag = "none" if promote is None else promote
        ax.plot(ks, [100 * abs(numbers[f"k{k}_{tag}_mean"]) for k in ks], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("K")
    ax.set_ylabel("|mean relative error| (%)")
    ax.set_title("Hopper fp8 accumulation, all-positive e4m3 data")
    ax.legend()


FINDING = FINDINGS.register(Finding(
    NAME, "Hopper fp8 tensor cores truncate while they accumulate, so long dot products lose accuracy; promoting "
          "the partial sum to float32 every 128 elements restores it.",
    "arXiv 2412.19437 (DeepSeek-V3); arXiv 2511.10909 (MMA-Sim)",
    "about 2% maximum relative error at K = 4096 without promotion; a numpy model: -7.0% on all-positive e4m3 "
    "data, -0.06% with promotion every 128", (1.0, 3.0), order=60, verdict=verdict, measured=measured,
    measure=measure, figure=draw, needs="fpsim.tensorcore", seed_use="first"))
