"""The tiny GPT's bf16-master step with and without four changes made to it (listed below), in one process,
interleaved with fpsim's fp32 step and PyTorch's (medians of N alternating samples; allocator as the
fpsim commands set it).  "old" puts back: the previous bfloat16 widening (one left_shift with a
uint32 dtype), np.errstate around every ml_dtypes rounding, the backward walk widening a passed-through
gradient again, masked_fill widening and re-rounding its result.  Asserts both give the same loss.

    python scripts/bf16_step_ab.py [N]
"""
import importlib
import os
import sys
import time
import types

import numpy as np
import torch

import fpsim.ops.elementwise as EW
from fpsim import backend as B
from fpsim import state
from fpsim.experiments.tinygpt import TinyGPTTask, training_step
from fpsim.formats import bf16kernels as K
from fpsim.tools.allocator import keep_freed_memory
from fpsim.tools.bench.steps import torch_gpt_step

T = importlib.import_module("fpsim.tensor")
keep_freed_memory()
torch.set_num_threads(1)
n = int(sys.argv[1]) if len(sys.argv) > 1 else 21
OLD = [False]
def old_w(x):
    out = np.empty(x.shape, np.uint32)
    np.left_shift(x.view(np.uint16), np.uint32(16), out=out, dtype=np.uint32)
    return out.view(np.float32)
new_w, new_rn, new_prop = K.bf16_to_f32, B.NumpyBackend._round_nearest, T._propagate
B.bf16_to_f32 = lambda x: old_w(x) if OLD[0] else new_w(x)
def rn(self, x32, fmt):
    if OLD[0] and fmt.name != "float32" and fmt.name != "float16" and x32.dtype == np.float32:
        with np.errstate(over="ignore", invalid="ignore"):
            return x32.astype(fmt.dtype)
    return new_rn(self, x32, fmt)
B.NumpyBackend.round = B._engine_aware(rn)
T._propagate = lambda node, g, grads, wide, g32=None: new_prop(node, g, grads, {}, None) if OLD[0] else new_prop(node, g, grads, wide, g32)
proxy = types.SimpleNamespace(ENGINE_ROUNDING=[1], HOOKS=state.HOOKS)
task = TinyGPTTask()
fns = {"fp32": training_step("fp32", task, backend="numpy"), "old": training_step("bf16-master", task, backend="numpy"),
       "new": training_step("bf16-master", task, backend="numpy"), "torch": torch_gpt_step(torch, task)}
def setold(k):
    OLD[0] = k == "old"
    EW.state = proxy if OLD[0] else state
res = {}
for k, f in fns.items():
    setold(k)
    res[k] = f()
    f()
assert res["old"][0] == res["new"][0]
t = {k: [] for k in fns}
for _i in range(n):
    for k, f in fns.items():
        setold(k)
        t0 = time.perf_counter()
        f()
        f()
        t[k].append((time.perf_counter() - t0) / 2)
med = {k: np.median(v) * 1e3 for k, v in t.items()}
print(" ".join(f"{k} {v:.2f}ms" for k, v in med.items()), f"| old/fp32 {med['old']/med['fp32']:.3f} new/fp32 {med['new']/med['fp32']:.3f} new/old {med['new']/med['old']:.3f} fp32/torch {med['fp32']/med['torch']:.3f}", f"load {os.getloadavg()[0]:.2f}")
