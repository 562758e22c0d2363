"""The tiny GPT's fp8-delayed training step against fpsim's fp32 step, interleaved in one process,
timed in process CPU time (the machine is shared: CPU time is steadier than wall time); prints the
median step, the median and range of the ratio, and the load average.  With ``--old`` the fp8 step
is timed a second time with every cast's rounding taking the general path (``round_result`` with
saturation, the table look-ups, the widening and the zero counts as separate passes; the
other changes to the fp8 casts stay), for a before / after of the kernel in one process.  Freed
memory is kept for reuse, as the ``fpsim`` commands keep it (``keep_freed_memory``).

    OPENBLAS_NUM_THREADS=1 python scripts/fp8_step_ratio.py [rounds] [--old]

Run from this checkout with ``PYTHONPATH=<another checkout>`` (without ``--old``) it times that
fpsim's steps, for a before / after in fresh processes taken in turn.
"""

import os
import sys
import time

import numpy as np

from fpsim.experiments.tinygpt import TinyGPTTask, training_step
from fpsim.lowp import scaling
from fpsim.lowp.quant import _widen
from fpsim.tensor import round_result
from fpsim.tools.allocator import keep_freed_memory

NEW_ROUND = getattr(scaling.ScalingState, "_round", None)  # None: an fpsim from before the kernel


def old_round(self, x32, s, top, backend, op, direction, target):
    codes = round_result(x32 * s, self.fmt, backend, op, direction, target, saturate=True)
    codes32 = _widen(codes, self.fmt, backend)
    xp = backend.xp
    return codes, codes32, int(xp.count_nonzero(codes32 == 0)) - int(xp.count_nonzero(x32 == 0))


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--old"]
    rounds = int(args[0]) if args else 15
    variants = [("fp32", False), ("fp8-delayed", False)]
    if "--old" in sys.argv:
        if NEW_ROUND is None:
            raise SystemExit("--old: this fpsim has no ScalingState._round to swap (it is the old one)")
        variants.append(("fp8-delayed", True))
    keep_freed_memory()
    task = TinyGPTTask()
    fns = {r: training_step(r, task, backend="numpy") for r in ("fp32", "fp8-delayed")}
    for f in fns.values():
        f()
    times = {v: [] for v in variants}
    load0 = os.getloadavg()[0]
    with np.errstate(all="ignore"):
        for _ in range(rounds):
            for r, old in variants:
                if NEW_ROUND is not None:
                    scaling.ScalingState._round = old_round if old else NEW_ROUND
                t0 = time.process_time()
                fns[r]()
                fns[r]()
                times[(r, old)].append((time.process_time() - t0) / 2)
    if NEW_ROUND is not None:
        scaling.ScalingState._round = NEW_ROUND
    fp32 = np.array(times[("fp32", False)])
    for (r, old), v in times.items():
        ratio = np.array(v) / fp32
        print(f"{r + (' (old)' if old else ''):18s} {np.median(v) * 1e3:7.1f} ms   x fp32: median "
              f"{np.median(ratio):.3f}, range {ratio.min():.2f}-{ratio.max():.2f}")
    print(f"load average {load0:.2f} -> {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
