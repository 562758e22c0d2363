"""One tiny-GPT training step under mxfp8 and nvfp4 against fpsim's fp32 step, interleaved in one
process, timed in process CPU time (the machine is shared: CPU time is steadier than wall time);
prints the median step and the median and range of each ratio.  With ``--old`` the block steps are
timed a second time with the block operands quantized as before fake_quantize (quantize(...)
.dequantize(), the Hadamard transform by einsum alone), for a before / after in one process.

    OPENBLAS_NUM_THREADS=1 python scripts/block_step_ratio.py [rounds] [--old]
"""

import sys
import time

import numpy as np

from fpsim.experiments.tinygpt import TinyGPTTask, training_step
from fpsim.formats import quantize
from fpsim.lowp import block as lb

NEW_Q, NEW_H = lb.BlockScaling.q, lb.hadamard_transform


def old_q(self, a32, axis, *, grad=False, block=None):
    fmt = lb.get_block_format(self.grad_format if grad and self.grad_format else self.format)
    block = block if block is not None else self.block if self.block is not None else fmt.block
    return quantize(a32, fmt, axis, block=block, scale_rounding=lb._scale_rule(self, fmt),
                    pow2_scales=self.pow2_scales and fmt.family == "fp8_block",
                    rounding=self.grad_rounding if grad else "nearest").dequantize()


def old_h(a32, h):
    n = h.shape[0]
    t, c = a32.shape
    a = np.pad(a32, [(0, -t % n), (0, 0)]).astype(np.float64).reshape(-1, n, c)
    return np.einsum("ij,gjc->gic", h.astype(np.float64), a).reshape(-1, c).astype(np.float32)


def use(old: bool) -> None:
    lb.BlockScaling.q, lb.hadamard_transform = (old_q, old_h) if old else (NEW_Q, NEW_H)


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--old"]
    rounds = int(args[0]) if args else 7
    variants = [("fp32", False), ("mxfp8", False), ("nvfp4", False)]
    if "--old" in sys.argv:
        variants += [("mxfp8", True), ("nvfp4", True)]
    task = TinyGPTTask()
    fns = {r: training_step(r, task, backend="numpy") for r in ("fp32", "mxfp8", "nvfp4")}
    for f in fns.values():
        f()
    times = {v: [] for v in variants}
    with np.errstate(all="ignore"):
        for _ in range(rounds):
            for r, old in variants:
                use(old)
                t0 = time.process_time()
                fns[r]()
                fns[r]()
                times[(r, old)].append((time.process_time() - t0) / 2)
    use(False)
    fp32 = np.array(times[("fp32", False)])
    for (r, old), v in times.items():
        ratio = np.array(v) / fp32
        print(f"{r + (' (old)' if old else ''):12s} {np.median(v) * 1e3:7.1f} ms   x fp32: median {np.median(ratio):.2f}, "
              f"range {ratio.min():.2f}-{ratio.max():.2f}")


if __name__ == "__main__":
    main()
