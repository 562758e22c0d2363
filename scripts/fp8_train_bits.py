"""Train the tiny GPT and the reference task a few steps under every per-tensor fp8 recipe and save
the losses, parameters, every ScalingState's state (scale, amax history, counts) and a monitor's
counters, to compare two versions of fpsim bit for bit (prints the names that differ; none expected).

    PYTHONPATH=<old checkout> python scripts/fp8_train_bits.py old.npz
    PYTHONPATH=<new checkout> python scripts/fp8_train_bits.py new.npz
    python scripts/fp8_train_bits.py old.npz new.npz
"""

import contextlib
import sys

import numpy as np

import fpsim
from fpsim.experiments import get_recipe
from fpsim.experiments.tasks import ReferenceTask
from fpsim.experiments.tinygpt import TinyGPTTask

RECIPES = ("fp8-delayed", "fp8-delayed-inner", "fp8-current", "fp8-hopper")


def _train_one(out: dict, key: str, task, name: str, backend: str, steps: int, monitored: bool) -> None:
    r = get_recipe(name)
    fpsim.manual_seed(0)
    run = r.prepare(task.model(0), lr=task.lr, seed=0, backend=backend)
    batches = task.batches(r, run.model.parameters()[0].backend)
    mon = fpsim.monitor()
    with mon if monitored else contextlib.nullcontext():
        for step in range(steps):
            batch = batches(step)
            loss = run.step(lambda m, b=batch: task.loss(m, b, r)).loss.item()
            out[f"{key}/loss{step}"] = np.atleast_1d(np.float32(loss))
    for i, p in enumerate(run.model.parameters()):
        out[f"{key}/param{i}"] = np.asarray(p.numpy(), np.float32)
    for k, v in run.scaling.state_dict().items():
        out[f"{key}/fp8/{k}"] = np.atleast_1d(np.asarray(v))
    for k, v in sorted(mon.counts.items()):
        out[f"{key}/monitor/{'|'.join(map(str, k))}"] = np.asarray(v, np.int64)


def train(path: str) -> None:
    out = {}
    with np.errstate(all="ignore"):
        for backend in ("numpy", "numpy-f32"):
            for name in RECIPES:
                for monitored in (False, True):  # the monitor's hooks take other paths
                    tag = f"{backend}/{name}/{'monitored' if monitored else 'plain'}"
                    _train_one(out, f"gpt/{tag}", TinyGPTTask(), name, backend, 3, monitored)
                    _train_one(out, f"ref/{tag}", ReferenceTask(), name, backend, 3, monitored)
    np.savez(path, **out)
    print(f"{len(out)} arrays saved to {path}")


def compare(a_path: str, b_path: str) -> None:
    a, b = np.load(a_path), np.load(b_path)
    differ = [k for k in a.files if k not in b.files or a[k].dtype != b[k].dtype or a[k].shape != b[k].shape
              or a[k].tobytes() != b[k].tobytes()]
    differ += [k for k in b.files if k not in a.files]
    print(f"{len(a.files)} arrays, {len(differ)} differ" + (": " + ", ".join(differ) if differ else ""))


if __name__ == "__main__":
    compare(*sys.argv[1:3]) if len(sys.argv) == 3 else train(sys.argv[1])
