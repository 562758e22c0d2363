"""Save a few training steps' losses, parameters, gradients and optimizer state (tiny GPT and MLP
reference task, several recipes, numpy and numpy-f32) as raw bytes; or compare two saves bit for bit.

    PYTHONPATH=<old checkout> python scripts/step_bits.py old.npz
    PYTHONPATH=<new checkout> python scripts/step_bits.py new.npz
    python scripts/step_bits.py old.npz new.npz
"""
import sys

import numpy as np

import fpsim
from fpsim.experiments import get_recipe
from fpsim.experiments.tasks import ReferenceTask
from fpsim.experiments.tinygpt import TinyGPTTask

GPT = ["fp32", "bf16-master", "fp16-amp", "bf16-pure", "fp16-dynamic", "fp8-delayed", "bf16-kahan", "mxfp8"]
MLP = ["fp32", "fp16-pure", "fp16-master", "fp16-static", "fp16-dynamic", "bf16-pure", "bf16-master",
       "fp16-amp", "bf16-kahan", "bf16-stochastic", "fp8-delayed"]

def put(out, pre, run, losses):
    for s, loss in enumerate(losses):
        out[f"{pre}/loss{s}"] = np.atleast_1d(np.float64(loss)).view(np.uint8)
    for i, p in enumerate(run.model.parameters()):
        out[f"{pre}/param{i}"] = np.ascontiguousarray(p.numpy()).view(np.uint8)
        if p.grad is not None:
            out[f"{pre}/grad{i}"] = np.ascontiguousarray(p.grad.numpy()).view(np.uint8)
    for k, v in run.opt.state_dict().items():
        if isinstance(v, np.ndarray):
            out[f"{pre}/opt.{k}"] = np.ascontiguousarray(v).view(np.uint8)

def train(path):
    out = {}
    with np.errstate(all="ignore"):
        task = TinyGPTTask()
        for be in ("numpy", "numpy-f32"):
            for name in GPT if be == "numpy" else ["bf16-master", "fp16-amp"]:
                r = get_recipe(name)
                fpsim.manual_seed(0)
                run = r.prepare(task.model(0), lr=task.lr, seed=0, backend=be)
                ls = []
                for step in range(3):
                    seq = task.batch_at(step)
                    ls.append(run.step(lambda m, seq=seq, r=r: task.loss(m, seq, r)).loss.item())
                put(out, f"gpt-{be}-{name}", run, ls)
        task = ReferenceTask(n=2048)
        for name in MLP:
            r = get_recipe(name)
            fpsim.manual_seed(0)
            run = r.prepare(task.model(0), lr=task.lr, seed=0)
            b = task.batches(r, None)
            ls = [run.step(lambda m, s=s, r=r, b=b: task.loss(m, b(s), r)).loss.item() for s in range(3)]
            put(out, f"mlp-{name}", run, ls)
    np.savez(path, **out)
    print(f"{len(out)} arrays saved to {path}")

def compare(a, b):
    a, b = np.load(a), np.load(b)
    differ = [k for k in a.files if k not in b.files or not np.array_equal(a[k], b[k])]
    print(f"{len(a.files)} arrays, {len(differ)} differ" + (": " + ", ".join(differ[:20]) if differ else ""))

if __name__ == "__main__":
    compare(*sys.argv[1:3]) if len(sys.argv) == 3 else train(sys.argv[1])
