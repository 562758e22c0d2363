"""Train the tiny GPT three steps under every block recipe and save the losses and parameters, to
compare two versions of fpsim bit for bit (prints the names that differ; none expected).

    PYTHONPATH=<old checkout> python scripts/block_train_bits.py old.npz
    PYTHONPATH=<new checkout> python scripts/block_train_bits.py new.npz
    python scripts/block_train_bits.py old.npz new.npz
"""

import sys

import numpy as np

import fpsim
from fpsim.experiments import get_recipe
from fpsim.experiments.recipes import BLOCK_RECIPES
from fpsim.experiments.tinygpt import TinyGPTTask


def train(path: str) -> None:
    out, task = {}, TinyGPTTask()
    with np.errstate(all="ignore"):
        for name in BLOCK_RECIPES:
            r = get_recipe(name)
            fpsim.manual_seed(0)
            run = r.prepare(task.model(0), lr=task.lr, seed=0)
            for step in range(3):
                seq = task.batch_at(step)
                loss = run.step(lambda m, seq=seq, r=r: task.loss(m, seq, r)).loss.item()
                out[f"{name}/loss{step}"] = np.atleast_1d(np.float32(loss))
            for i, p in enumerate(run.model.parameters()):
                out[f"{name}/param{i}"] = np.asarray(p.numpy(), np.float32)
    np.savez(path, **out)
    print(f"{len(out)} arrays saved to {path}")


def compare(a_path: str, b_path: str) -> None:
    a, b = np.load(a_path), np.load(b_path)
    differ = [k for k in a.files if k not in b.files or not np.array_equal(a[k].view(np.uint32), b[k].view(np.uint32))]
    print(f"{len(a.files)} arrays, {len(differ)} differ" + (": " + ", ".join(differ) if differ else ""))


if __name__ == "__main__":
    compare(*sys.argv[1:3]) if len(sys.argv) == 3 else train(sys.argv[1])
