"""Lab 16 (a loss spike, taken apart): the tiny GPT that ``fpsim reproduce small-scale-proxies``
sweeps, trained at a learning rate where it goes wrong, with every instrument watching - and its
first steps again in PyTorch.

:func:`spike_run` trains it under a recipe (the attention's largest-logit probe recording
every step; the non-finite tracer on request); :func:`watch_outliers` trains it in float32 under an
:class:`~fpsim.outliers.OutlierMonitor`; :func:`torch_first_steps` trains the same network, from
the same initial weights, on the same batches and schedule, with PyTorch's own ops and
``torch.optim.Adam`` in float32.  PyTorch is imported only when :func:`torch_first_steps` runs.
"""

from __future__ import annotations

import numpy as np

from ..experiments.findings.proxies import SETTINGS, ProxyTask
from ..experiments.loop import train
from ..experiments.result import RunResult
from ..experiments.tinygpt import TinyGPTTask
from ..optim import Adam
from ..outliers import OutlierMonitor

__all__ = ["spike_task", "spike_run", "watch_outliers", "torch_first_steps", "STEPS"]

STEPS = 60  # the length of every run's schedule (warm-up 10, cosine decay to 0 at step 60)


def spike_task(trace: bool = False, **knobs) -> TinyGPTTask:
    """The sweep's tiny GPT (1 layer, d_model 32, 2 heads, sorting 8 digits, batch 16), its
    largest-logit probe on; ``knobs`` (``qk_norm``, ``z_loss``, ...) as TinyGPTTask takes them.
    ``trace``: with the task's non-finite tracer (it watches every rounding: about half the time
    of a step), else without (the finding's ProxyTask)."""
    return (TinyGPTTask if trace else ProxyTask)(**{**SETTINGS, **knobs})


def spike_run(recipe: str = "fp32", lr: float = 0.2, *, steps: int = STEPS, seed: int = 0, trace: bool = False,
              **knobs) -> RunResult:
    """:func:`~fpsim.experiments.train` of :func:`spike_task` at ``lr``: per step the loss
    (``losses``), the largest attention logit (``attn_logits``), skipped steps; with ``trace``,
    the first op that made an inf / NaN (``nonfinite``)."""
    return train(spike_task(trace, **knobs), recipe, seed, steps=steps, lr=lr, measure_at=())


def watch_outliers(lr: float = 0.2, *, steps: int = 30, seed: int = 0, **knobs) -> OutlierMonitor:
    """The first ``steps`` float32 Adam steps of the same run (the 60-step schedule) under an
    OutlierMonitor reading the block's output, the attention's output and the MLP's GELU output."""
    task = spike_task(**knobs)
    model = task.model(seed)
    opt = Adam(model.parameters(), lr=lr)
    with OutlierMonitor(model, modules=["blocks.0", "blocks.0.attn", "blocks.0.mlp.1"]) as om:
        for step in range(steps):
            opt.zero_grad()
            opt.lr = task.lr_at(step, STEPS, lr)
            task.loss(model, task.batch_at(step)).backward()
            opt.step()
    return om


def _torch_forward(torch, model, p: dict, ids: np.ndarray, logits_out: list):
    """The TinyGPT (untied, no qk-norm) in PyTorch's ops; appends the largest |q.k / sqrt(d)|
    over the causal pairs to ``logits_out``."""
    F = torch.nn.functional
    b, t = ids.shape
    d = model.d_model
    x = p["tok_emb.weight"][torch.from_numpy(ids)] + p["pos_emb.weight"][torch.arange(t)]
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    for i, blk in enumerate(model.blocks):
        pre, h, hd = f"blocks.{i}", blk.attn.n_heads, blk.attn.head_dim

        def lin(y, name, pre=pre):
            return F.linear(y, p[f"{pre}.{name}.weight"], p[f"{pre}.{name}.bias"])

        y = F.layer_norm(x, (d,), p[f"{pre}.ln1.weight"], p[f"{pre}.ln1.bias"])
        q, k, v = (lin(y, f"attn.{n}").view(b, t, h, hd).transpose(1, 2) for n in "qkv")
        with torch.no_grad():
            s = (q @ k.transpose(-1, -2)).abs() / hd**0.5
            logits_out.append(float(s.masked_fill(~causal, 0).max()))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + lin(a.transpose(1, 2).reshape(b, t, d), "attn.proj")
        y = F.layer_norm(x, (d,), p[f"{pre}.ln2.weight"], p[f"{pre}.ln2.bias"])
        x = x + lin(F.gelu(lin(y, "mlp.0"), approximate="tanh"), "mlp.2")
    x = F.layer_norm(x, (d,), p["ln_f.weight"], p["ln_f.bias"])
    return x @ p["head.weight"].T


def torch_first_steps(lr: float = 0.2, *, steps: int = 8, seed: int = 0, schedule: int = STEPS) -> dict:
    """The first ``steps`` steps of :func:`spike_run` ("fp32", no qk-norm; a run of ``schedule``
    steps) in PyTorch, float32: the same initial weights (copied from fpsim's model), batches and
    learning-rate schedule,
    ``torch.optim.Adam`` (betas 0.9, 0.999, eps 1e-8, as fpsim's).  Returns {"losses": [...],
    "attn_logits": [...]}, one of each per step (the loss before the step's update)."""
    import torch

    task = spike_task()
    model = task.model(seed)
    p = {n: torch.tensor(t.numpy(), requires_grad=True) for n, t in model.named_parameters()}
    opt = torch.optim.Adam(p.values(), lr=lr, betas=(0.9, 0.999), eps=1e-8)
    n = task.n_digits
    losses, logits = [], []
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = task.lr_at(step, schedule, lr)
        seq = task.batch_at(step)
        out = _torch_forward(torch, model, p, seq[:, :-1], logits)[:, n:]
        loss = torch.nn.functional.cross_entropy(out.reshape(-1, task.vocab_size),
                                                 torch.from_numpy(seq[:, n + 1:].reshape(-1)))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return {"losses": losses, "attn_logits": logits}
