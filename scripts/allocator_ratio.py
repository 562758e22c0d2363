"""What keeping freed memory (fpsim.tools.allocator) does to the training steps: fresh processes in
pairs, one with glibc's default thresholds and one with fpsim's (the environment variables
``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` that ``keep_freed_memory`` sets), each timing
the tiny GPT's fp32 step against PyTorch CPU's (the same architecture, ``fpsim bench``'s twin), one
step each in turn, one BLAS thread; prints each process's median of the per-round ratios.

    python scripts/allocator_ratio.py [pairs] [rounds]      # default 3 pairs of 25 rounds; needs torch
"""

import os
import subprocess
import sys

from fpsim.tools.allocator import MMAP_THRESHOLD, TRIM_THRESHOLD

CHILD = r"""
import sys, time
import numpy as np
import torch
from fpsim.experiments.tinygpt import TinyGPTTask, training_step
from fpsim.tools.bench.steps import torch_gpt_step

torch.set_num_threads(1)
task = TinyGPTTask()
fns = {"gpt32": training_step("fp32", task, backend="numpy"), "torch": torch_gpt_step(torch, task)}
for f in fns.values():
    f(); f()
res = {k: [] for k in fns}
for _ in range(int(sys.argv[1])):
    for k, f in fns.items():
        t = time.perf_counter(); f(); res[k].append(time.perf_counter() - t)
r = {k: np.array(v) for k, v in res.items()}
print("tiny GPT fp32 step / PyTorch's %.3f" % float(np.median(r["gpt32"] / r["torch"])))
"""


def main() -> int:
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    rounds = sys.argv[2] if len(sys.argv) > 2 else "25"
    base = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    base["OPENBLAS_NUM_THREADS"] = "1"
    kept = {**base, "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD), "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD)}
    for i in range(pairs):
        for label, env in (("glibc's defaults", base), ("freed memory kept", kept)):
            out = subprocess.run([sys.executable, "-c", CHILD, rounds], env=env, capture_output=True, text=True,
                                 check=True).stdout.strip()
            print(f"pair {i + 1}, {label:17s}: {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
