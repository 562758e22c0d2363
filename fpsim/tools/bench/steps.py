"""The training steps ``fpsim bench`` times: one SGD step of an MLP 784-256-256-10 on a fixed
batch, under an fpsim recipe (:func:`fpsim_step`) and in PyTorch (:func:`torch_step`)."""

from __future__ import annotations

import contextlib

import numpy as np

from ... import backend as _backend
from ... import nn
from ...experiments import get_recipe
from ...tensor import tensor
from .. import torchref

__all__ = ["MLP_SIZES", "fpsim_step", "torch_step", "torch_gpt_step", "torch_threads"]

MLP_SIZES = (784, 256, 256, 10)


def _step_data(batch: int, seed: int = 2):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, MLP_SIZES[0])).astype(np.float32)
    y = rng.integers(0, MLP_SIZES[-1], batch)
    return x, y


def fpsim_step(recipe: str, batch: int = 128, backend=None, lr: float = 0.01):
    """A callable doing one SGD step of the MLP 784-256-256-10 on a fixed batch under
    ``recipe`` (``Recipe.prepare`` with plain SGD: its parameter format, master weights, loss
    scaler and autocast; ``Run.step``); the loss is computed in float32 from the logits, as the
    recipes do.  It returns the loss."""
    r = get_recipe(recipe)
    be = _backend.get_backend(backend)
    x_np, y_np = _step_data(batch)
    run = r.prepare(nn.MLP(list(MLP_SIZES), activation="relu", seed=0), lr=lr, optimizer="sgd",
                    backend=be if backend is not None else None)
    x = tensor(x_np, r.params, backend=be)
    y = be.asarray(y_np)

    def loss_fn(model):
        with r.forward_context():
            logits = model(x)
        return nn.cross_entropy(logits.to("float32"), y)

    return lambda: run.step(loss_fn).loss


def torch_step(torch, dtype: str, batch: int = 128, device: str = "cpu", amp: bool = False, lr: float = 0.01):
    """The same step in PyTorch: ``dtype`` 'float32' or 'float16' (``model.half()``), or
    float32 parameters under CUDA autocast + GradScaler with ``amp=True``."""
    x_np, y_np = _step_data(batch)
    torch.manual_seed(0)
    model = torchref.mlp(torch, MLP_SIZES, torch.nn.ReLU).to(device)
    dt = getattr(torch, dtype)
    if not amp:
        model = model.to(dt)
    x = torch.from_numpy(x_np).to(device=device, dtype=dt if not amp else torch.float32)
    y = torch.from_numpy(y_np).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    scaler = torch.amp.GradScaler(device) if amp else None
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def step():
        opt.zero_grad(set_to_none=True)
        if amp:
            with torch.autocast(device_type=device, dtype=torch.float16):
                loss = torch.nn.functional.cross_entropy(model(x), y)
        else:
            loss = torch.nn.functional.cross_entropy(model(x), y)
        torchref.update(loss, opt, scaler)
        sync()
        return loss

    return step


def torch_gpt_step(torch, task):
    """One Adam step of ``task``'s tiny GPT (a ``TinyGPTTask``) in PyTorch CPU float32: the same
    architecture and sizes written with ``torch.nn`` (``torchref.tinygpt``), the same batch (step
    0), loss (cross-entropy on the answer positions) and Adam (the task's learning rate at step 0,
    PyTorch's defaults otherwise, as fpsim's Adam)."""
    torch.manual_seed(0)
    model = torchref.tinygpt(torch, task.vocab_size, task.context, task.d_model, task.n_layers, task.n_heads,
                             task.mlp_ratio)
    opt = torch.optim.Adam(model.parameters(), lr=task.lr_at(0, task.steps, task.lr))
    seq = torch.from_numpy(task.batch_at(0))
    n = task.n_digits
    ids, target = seq[:, :-1], seq[:, n + 1:].reshape(-1)

    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(ids)[:, n:].reshape(-1, task.vocab_size)
        loss = torch.nn.functional.cross_entropy(logits, target)
        torchref.update(loss, opt)
        return loss

    return step


@contextlib.contextmanager
def torch_threads(torch, n: int):
    """PyTorch runs on ``n`` threads inside (nothing happens without torch)."""
    if torch is None:
        yield
        return
    prev = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(prev)
