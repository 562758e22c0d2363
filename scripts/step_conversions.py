"""How many values one training step of the tiny GPT (``fpsim bench``'s) rounds into a 16-bit or
8-bit format and widens back to float32, per recipe: the calls and values of the numpy backend's
``round`` (into anything but float32) and ``to_f32`` (of anything but float32) in one step, after
three warm-up steps; and the ns a value each costs here, timed around those calls.

    python scripts/step_conversions.py [recipe ...]      # default fp16-amp bf16-master fp8-delayed
"""

import collections
import sys
import time

import numpy as np

from fpsim import backend as B
from fpsim.experiments.tinygpt import TinyGPTTask, training_step
from fpsim.tools.allocator import keep_freed_memory


def count(recipe: str, steps: int = 5) -> dict:
    step = training_step(recipe, TinyGPTTask(), backend="numpy")
    for _ in range(3):
        step()
    calls, values, secs = collections.Counter(), collections.Counter(), collections.Counter()
    orig_round, orig_widen = B.NumpyBackend.round, B.NumpyBackend.to_f32

    def rounding(self, x32, fmt):
        t = time.perf_counter()
        out = orig_round(self, x32, fmt)
        if fmt.name != "float32":
            calls["round"] += 1
            values["round"] += x32.size
            secs["round"] += time.perf_counter() - t
        return out

    def widening(self, x):
        t = time.perf_counter()
        out = orig_widen(self, x)
        if x.dtype != np.float32:
            calls["widen"] += 1
            values["widen"] += x.size
            secs["widen"] += time.perf_counter() - t
        return out

    B.NumpyBackend.round, B.NumpyBackend.to_f32 = rounding, widening
    try:
        for _ in range(steps):
            step()
    finally:
        B.NumpyBackend.round, B.NumpyBackend.to_f32 = orig_round, orig_widen
    return {k: (calls[k] / steps, values[k] / steps, secs[k] / max(values[k], 1) * 1e9) for k in ("round", "widen")}


def main(recipes) -> None:
    keep_freed_memory()
    for r in recipes:
        c = count(r)
        print(f"{r:12s} " + "  ".join(f"{k}: {n:.0f} calls, {v / 1e6:.2f} M values, {ns:.2f} ns a value"
                                       for k, (n, v, ns) in c.items()))


if __name__ == "__main__":
    main(sys.argv[1:] or ["fp16-amp", "bf16-master", "fp8-delayed"])
