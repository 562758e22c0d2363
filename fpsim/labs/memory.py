"""Lab 01: what each training recipe keeps in memory per parameter, measured on fpsim's objects.

:func:`measure_bytes` builds a small model under a named recipe (:mod:`fpsim.experiments`),
runs one Adam step and adds up the bytes of the arrays the step holds: the weights and their
gradients in the model's format, the float32 master weights and the float32 gradients the
update reads from them, Adam's two moments, and the Kahan buffer - each divided by the number
of parameters.  Nothing is looked up in a table; the tensors' formats decide (``Tensor.nbytes``: 2 bytes
a float16 value, also on the ``numpy-f32`` backend, which holds the values in float32).  Activations (the
other large consumer, proportional to batch size and depth) are not counted here.
"""

from __future__ import annotations

import numpy as np

from .. import nn, ops
from ..experiments import get_recipe
from ..tensor import tensor

__all__ = ["COMPONENTS", "measure_bytes", "memory_table"]

COMPONENTS = ("weights", "gradients", "master weights", "master gradients", "Adam moments", "Kahan buffer")


def _nbytes(tensors) -> int:
    return sum(t.nbytes for t in tensors if t is not None)


def measure_bytes(recipe="fp32") -> dict[str, float]:
    """Bytes per parameter, per component (:data:`COMPONENTS`), that one Adam step under
    ``recipe`` holds; measured on a 64-32-64 MLP after one step.  ``"total"`` is their sum."""
    r = get_recipe(recipe)
    run = r.prepare(nn.MLP([64, 32, 64], activation="tanh", seed=0), lr=1e-3, seed=0)
    params, opt = run.model.parameters(), run.opt
    n = sum(int(np.prod(p.shape)) for p in params)
    x = tensor(np.random.default_rng(0).standard_normal((16, 64)).astype(np.float32) * 0.1, r.params)
    target = tensor(np.zeros((16, 64), np.float32), "float32")

    def loss_fn(model):
        with r.forward_context():
            pred = model(x)
        return ops.mse_loss(pred.to("float32"), target)

    run.forward_backward(loss_fn)
    if run.scaler is not None:
        run.scaler.unscale_(opt)
    opt.sync_master_grads()  # what the update reads: float32 copies of the gradients (masters only)
    masters = opt.master or []
    out = {"weights": _nbytes(params), "gradients": _nbytes(p.grad for p in params),
           "master weights": _nbytes(masters), "master gradients": _nbytes(m.grad for m in masters)}
    run.update()
    out["Adam moments"] = sum(_nbytes([s.get("exp_avg"), s.get("exp_avg_sq")]) for s in opt.state)
    out["Kahan buffer"] = sum(_nbytes([s.get("kahan_comp")]) for s in opt.state)
    per = {k: v / n for k, v in out.items()}
    per["total"] = sum(per.values())
    return per


def _count(n: float) -> str:
    """``n`` parameters the way model sizes are written (``1B``, ``7B``, ``125M``), so that the
    table's last header stays short enough for the table to fit in 100 characters."""
    return f"{n / 1e9:g}B" if n >= 1e9 else f"{n / 1e6:g}M" if n >= 1e6 else f"{n:,.0f}"


def memory_table(recipes=("fp32", "fp16-amp", "fp16-master", "bf16-master", "bf16-kahan", "bf16-pure"),
                 n_params: float = 1e9) -> str:
    """One row per recipe: bytes per parameter of each component (measured), the total, and
    what the total comes to for a model of ``n_params`` parameters (in GB, 10^9 bytes)."""
    from ..textable import text_table

    short = {"weights": "weights", "gradients": "grads", "master weights": "master w.",
             "master gradients": "master g.", "Adam moments": "Adam m, v", "Kahan buffer": "Kahan"}
    rows = []
    for name in recipes:
        b = measure_bytes(name)
        rows.append([name, *(f"{b[c]:g}" for c in COMPONENTS), f"{b['total']:g}", f"{b['total'] * n_params / 1e9:,.0f} GB"])
    cols = ["recipe", *(short[c] for c in COMPONENTS), "bytes/param", f"{_count(n_params)} params"]
    return "\n".join(text_table(cols, rows, right=range(1, len(cols))))
