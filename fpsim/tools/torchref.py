"""PyTorch counterparts of fpsim's models and training steps, for the tools that time or check
fpsim against PyTorch (``fpsim bench``, ``fpsim gpu-check --torch``).  PyTorch is optional:
nothing here imports it until asked."""

from __future__ import annotations

import importlib

__all__ = ["import_torch", "mlp", "update"]


def import_torch():
    """The torch module, or None where PyTorch is not installed."""
    try:
        return importlib.import_module("torch")
    except ImportError:
        return None


def mlp(torch, sizes, activation):
    """``torch.nn.Sequential`` of Linear layers of ``sizes`` with ``activation()`` between them:
    the Linears are named 0, 2, 4, ... as in fpsim's ``nn.MLP``, so state dicts carry over."""
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(torch.nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(activation())
    return torch.nn.Sequential(*layers)


def update(loss, opt, scaler=None) -> None:
    """Backward from ``loss`` and the optimizer step, through the GradScaler when there is one."""
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    else:
        loss.backward()
        opt.step()
