"""``fpsim gpu-check --torch``: PyTorch on the reference task, from fpsim's initial weights,
against fpsim's matching recipe - loss curves, final losses, time per step."""

from __future__ import annotations

import time

import numpy as np

from ... import backend as _backend
from ...experiments import Recipe, ReferenceTask, get_recipe, train
from .. import torchref
from .task import LOSS_RTOL, max_rel

__all__ = ["torch_compare", "format_torch"]

_TORCH_RECIPE = {"float32": "fp32", "float16": "fp16-amp"}


def _fpsim_recipe_for(dtype: str):
    if dtype == "bfloat16":  # PyTorch's bfloat16 AMP needs no scaler
        return Recipe("bf16-amp", "float32", autocast="bfloat16",
                      description="float32 params, autocast bfloat16 matmuls, no scaler")
    return get_recipe(_TORCH_RECIPE[dtype])


def _torch_run(torch, task, fp_model, x_np, *, steps: int, lr: float, device: str, dtype: str):
    """PyTorch trains ``task`` from ``fp_model``'s float32 weights: (losses, seconds of each step)."""
    model = torchref.mlp(torch, [task.dim, *task.hidden, task.dim], torch.nn.Tanh)
    state = {k: torch.from_numpy(v.astype(np.float32)) for k, v in fp_model.state_dict().items()}
    model.load_state_dict(state)  # fpsim's Sequential names its layers 0, 2, 4, 6 as PyTorch does
    model = model.to(device)
    x = torch.from_numpy(x_np).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    amp_dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16}.get(dtype)
    dev_type = torch.device(device).type
    scaler = (torch.amp.GradScaler(dev_type, init_scale=2.0**16, growth_interval=100)
              if dtype == "float16" else None)
    losses, times = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev_type, dtype=amp_dtype, enabled=amp_dtype is not None):
            pred = model(x)
        loss = torch.nn.functional.mse_loss(pred.float(), x)
        torchref.update(loss, opt, scaler)
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
    return losses, times


def torch_compare(task=None, *, steps: int | None = None, seed: int = 0, device: str = "cuda",
                  dtype: str = "float16", backend=None, lr: float | None = None) -> dict:
    """Train the reference task with PyTorch on ``device`` and with fpsim on ``backend``, from
    the same data and initial weights (copied from fpsim's float32 model), and compare.

    ``dtype``: ``"float16"`` - PyTorch ``autocast(device, float16)`` + ``GradScaler`` (2**16,
    growth interval 100) against fpsim's ``fp16-amp``; ``"bfloat16"`` - autocast bfloat16, no
    scaler, against the same recipe in bfloat16 (PyTorch's CPU autocast runs bfloat16);
    ``"float32"`` - plain float32 against ``fp32``.  Both compute the loss in float32 from the
    float32-cast prediction, outside autocast, and use Adam with the task's learning rate.
    Returns the two loss curves, their largest relative difference, final losses and the
    median time per step of each (PyTorch after 3 warm-up steps, synchronised every step by
    ``loss.item()``; fpsim after a one-step warm-up run).
    """
    import torch

    if dtype not in ("float16", "bfloat16", "float32"):
        raise ValueError(f"dtype must be float16, bfloat16 or float32, got {dtype!r}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError("PyTorch sees no CUDA device here (torch.cuda.is_available() is False)")
    task = task or ReferenceTask()
    steps = task.steps if steps is None else int(steps)
    lr = task.lr if lr is None else lr
    x_np = task.data().astype(np.float32)
    losses, times = _torch_run(torch, task, task.model(seed), x_np, steps=steps, lr=lr, device=device, dtype=dtype)
    be = _backend.get_backend(backend)
    recipe = _fpsim_recipe_for(dtype)
    train(task, recipe, seed, steps=1, lr=lr, measure_at=(), backend=be)  # warm-up
    res = train(task, recipe, seed, steps=steps, lr=lr, measure_at=(), backend=be)
    rtol = LOSS_RTOL["fp32"] if dtype == "float32" else 5e-2
    rel = max_rel(losses, res.losses)
    return {
        "device": device, "dtype": dtype, "torch": torch.__version__, "fpsim_backend": repr(be),
        "fpsim_recipe": recipe.name, "steps": steps, "torch_losses": losses, "fpsim_losses": res.losses,
        "max_rel_diff": rel, "rtol": rtol, "ok": rel <= rtol and not res.failure,
        "torch_final": losses[-1], "fpsim_final": res.final_loss, "fpsim_failure": res.failure,
        "torch_step_s": float(np.median(times[3:] if len(times) > 3 else times)),
        "fpsim_step_s": res.seconds / max(len(res.losses), 1),
    }


def format_torch(r: dict) -> str:
    return "\n".join([
        f"PyTorch {r['torch']} on {r['device']} ({'autocast ' + r['dtype'] if r['dtype'] != 'float32' else 'float32'}"
        f"{' + GradScaler' if r['dtype'] == 'float16' else ''}) vs fpsim {r['fpsim_recipe']} on {r['fpsim_backend']}, "
        f"{r['steps']} steps",
        f"  final loss: PyTorch {r['torch_final']:.6e}, fpsim {r['fpsim_final']:.6e}"
        + (f" ({r['fpsim_failure']})" if r["fpsim_failure"] else ""),
        f"  largest relative difference of the loss curves: {r['max_rel_diff']:.2e} (tolerance {r['rtol']:g}): "
        f"{'ok' if r['ok'] else 'NOT OK'}",
        f"  time per step: PyTorch {1e3 * r['torch_step_s']:.2f} ms, fpsim {1e3 * r['fpsim_step_s']:.2f} ms "
        f"({r['fpsim_step_s'] / r['torch_step_s']:.1f}x)",
    ])
