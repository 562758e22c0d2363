"""Lab 11: the same training run in PyTorch (CPU) and in fpsim, step by step.

One model (the reference task's autoencoder, 64-32-8-32-64 with tanh), one set of initial
weights (fpsim's, copied into ``torch.nn.Linear`` layers), one data set, Adam, and PyTorch's
automatic mixed precision: float32 parameters, the forward pass under ``autocast`` in float16
or bfloat16, a ``GradScaler``.  :func:`compare_with_torch` runs it under
``torch.autocast("cpu", dtype=...)`` + ``torch.amp.GradScaler("cpu", ...)`` and under
``fpsim.autocast(...)`` + ``fpsim.GradScaler(...)`` and records, at every step, the loss, the
scale used and whether the step was skipped.

PyTorch is optional: nothing here imports it until a function that needs it is called, and
:func:`torch_available` says whether it can be.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .. import ops
from ..amp import GradScaler, autocast
from ..experiments import ReferenceTask
from ..formats import get_format
from ..optim import Adam
from ..tensor import tensor
from .printing import wrapped

__all__ = ["torch_available", "TrainTrace", "Bridge", "fpsim_amp_run", "torch_amp_run", "compare_with_torch"]


def torch_available() -> bool:
    """Whether PyTorch is installed here (found, not imported: importing it takes seconds)."""
    import importlib.util

    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


@dataclass
class TrainTrace:
    """One run, per step: the float32 loss (computed before the step), the loss scale used for
    that step's backward pass, and whether the optimizer step was skipped."""

    name: str
    losses: list = field(default_factory=list)
    scales: list = field(default_factory=list)
    skipped: list = field(default_factory=list)


def _setup(task: ReferenceTask, seed: int):
    x = task.data()
    model = task.model(seed)
    return x, model


def fpsim_amp_run(dtype="float16", steps: int = 40, *, task: ReferenceTask | None = None, lr: float | None = None,
                  init_scale: float = 2.0**16, growth_interval: int = 10, seed: int = 0) -> TrainTrace:
    """PyTorch's AMP recipe in fpsim: float32 parameters, the forward pass under
    ``fpsim.autocast(dtype)``, the loss (MSE over all outputs) in float32, ``fpsim.GradScaler``,
    Adam.  The loop is the one PyTorch's documentation writes."""
    task = task or ReferenceTask(n=1024)
    lr = task.lr if lr is None else lr
    x_np, model = _setup(task, seed)
    x, target = tensor(x_np, "float32"), tensor(x_np, "float32")
    opt = Adam(model.parameters(), lr=lr)
    scaler = GradScaler(init_scale=init_scale, growth_interval=growth_interval)
    trace = TrainTrace(f"fpsim, autocast {get_format(dtype).name}")
    for _ in range(steps):
        opt.zero_grad()
        with autocast(dtype):
            loss = ops.mse_loss(model(x), target)  # autocast runs the loss in float32
        trace.scales.append(float(scaler.get_scale()))
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        trace.skipped.append(bool(scaler.last_step_skipped(opt)))
        trace.losses.append(float(loss.item()))
    return trace


def torch_amp_run(dtype="float16", steps: int = 40, *, task: ReferenceTask | None = None, lr: float | None = None,
                  init_scale: float = 2.0**16, growth_interval: int = 10, seed: int = 0) -> TrainTrace:
    """The same run in PyTorch on the CPU: fpsim's initial weights copied into
    ``torch.nn.Linear`` layers, ``torch.autocast("cpu", dtype)``, ``torch.amp.GradScaler("cpu")``,
    ``torch.optim.Adam``.  Runs single-threaded (the thread count is restored afterwards), so
    that the result does not depend on how a sum was split between threads."""
    import torch

    task = task or ReferenceTask(n=1024)
    lr = task.lr if lr is None else lr
    x_np, fmodel = _setup(task, seed)
    layers = []
    sizes = [task.dim, *task.hidden, task.dim]
    params = dict(fmodel.named_parameters())
    linear = sorted({name.split(".")[0] for name in params}, key=int)
    for i, key in enumerate(linear):
        lin = torch.nn.Linear(sizes[i], sizes[i + 1])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(np.array(params[f"{key}.weight"].f32(), dtype=np.float32)))
            lin.bias.copy_(torch.from_numpy(np.array(params[f"{key}.bias"].f32(), dtype=np.float32)))
        layers.append(lin)
        if i < len(linear) - 1:
            layers.append(torch.nn.Tanh())
    model = torch.nn.Sequential(*layers)
    tdtype = {"float16": torch.float16, "bfloat16": torch.bfloat16}[get_format(dtype).name]
    x = torch.from_numpy(np.ascontiguousarray(x_np, dtype=np.float32))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=growth_interval)
    trace = TrainTrace(f"PyTorch {torch.__version__}, autocast {get_format(dtype).name}")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(steps):
            opt.zero_grad()
            with torch.autocast("cpu", dtype=tdtype):
                loss = torch.nn.functional.mse_loss(model(x), x)  # autocast runs it in float32
            scale = float(scaler.get_scale())
            trace.scales.append(scale)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            # PyTorch has no public "was it skipped": a step is skipped exactly when the scale backs off
            trace.skipped.append(float(scaler.get_scale()) < scale)
            trace.losses.append(float(loss.item()))
    finally:
        torch.set_num_threads(threads)
    return trace


@dataclass
class Bridge:
    """Both traces of :func:`compare_with_torch`, and how closely they agree."""

    dtype: str
    ours: TrainTrace
    torch: TrainTrace

    @property
    def rel_diff(self) -> np.ndarray:
        """|fpsim loss - PyTorch loss| / PyTorch loss, per step (float64)."""
        a = np.asarray(self.ours.losses, dtype=np.float64)
        b = np.asarray(self.torch.losses, dtype=np.float64)
        return np.abs(a - b) / np.abs(b)

    @property
    def same_scales(self) -> bool:
        return self.ours.scales == self.torch.scales

    @property
    def same_skips(self) -> bool:
        return self.ours.skipped == self.torch.skipped

    def table(self, steps=None) -> str:
        """Step by step: both losses, their relative difference, both scales (as 2^k) and the
        skipped steps.  ``steps``: which to show (default: the first five, every skipped step
        and its neighbours, and the last three)."""
        from ..textable import text_table

        n = len(self.ours.losses)
        if steps is None:
            pick = set(range(min(5, n))) | set(range(max(0, n - 3), n))
            for i, s in enumerate(self.torch.skipped):
                if s:
                    pick |= {i - 1, i, i + 1}
            steps = sorted(i for i in pick if 0 <= i < n)
        rd = self.rel_diff
        rows = []
        prev = None
        for i in steps:
            if prev is not None and i > prev + 1:
                rows.append(["...", "", "", "", "", ""])
            prev = i
            rows.append([str(i), f"{self.ours.losses[i]:.6e}", f"{self.torch.losses[i]:.6e}", f"{rd[i]:.1e}",
                         f"{_pow2(self.ours.scales[i])} / {_pow2(self.torch.scales[i])}",
                         _skip(self.ours.skipped[i], self.torch.skipped[i])])
        cols = ["step", "loss, fpsim", "loss, PyTorch", "rel. diff", "scale fpsim / PyTorch", "skipped"]
        return "\n".join(text_table(cols, rows, right=(1, 2, 3)))

    def summary(self) -> str:
        rd = self.rel_diff
        n = len(rd)
        sk = [i for i, s in enumerate(self.ours.skipped) if s]
        tk = [i for i, s in enumerate(self.torch.skipped) if s]
        return wrapped([
            f"{n} steps, autocast {self.dtype}: losses agree to a relative {rd.max():.1e} at worst "
            f"(median {np.median(rd):.1e});",
            f"  the first step (same weights, same data) to {rd[0]:.1e}",
            f"scale at every step identical: {self.same_scales}; skipped steps fpsim {sk}, PyTorch {tk}",
        ])

    def figure(self, path=None):
        """Left: both loss curves (log axis); middle: their relative difference per step;
        right: both scale trajectories, skipped steps marked."""
        from ..tools import plots

        plt = plots.pyplot()
        fig = plt.figure(figsize=(16, 4.6), dpi=plots.STYLE["figure.dpi"])
        with plt.rc_context(plots.STYLE):
            a1, a2, a3 = fig.subplots(1, 3)
            a1.plot(self.torch.losses, color="black", lw=3, alpha=0.35, label="PyTorch")
            a1.plot(self.ours.losses, color=plots.FORMAT_COLORS[self.dtype], ls="--", label="fpsim")
            a1.set_yscale("log")
            a1.set(xlabel="step", ylabel="loss", title="training loss")
            a2.semilogy(np.maximum(self.rel_diff, 1e-12), color=plots.FORMAT_COLORS[self.dtype])
            a2.set(xlabel="step", ylabel="|fpsim - PyTorch| / PyTorch", title="how far apart the losses are")
            for trace, style in ((self.torch, {"color": "black", "lw": 3, "alpha": 0.35}),
                                 (self.ours, {"color": plots.FORMAT_COLORS[self.dtype], "ls": "--"})):
                s = np.asarray(trace.scales)
                a3.step(np.arange(s.size), s, where="post", **style)
                idx = np.flatnonzero(trace.skipped)
                a3.plot(idx, s[idx], "X", ms=10, color=plots.BAND_COLORS["flush"], ls="none")
            a3.set_yscale("log", base=2)
            a3.set(xlabel="step", ylabel="loss scale", title="GradScaler's scale (X: skipped)")
            handles, labels = a1.get_legend_handles_labels()
            fig.legend(handles, labels, loc="lower center", ncol=2, frameon=False)
            fig.tight_layout(rect=(0, 0.08, 1, 1))
        return plots.finish_figure(fig, path)


def _pow2(s: float) -> str:
    k = math.log2(s) if s > 0 else float("nan")
    return f"2^{int(k)}" if k == int(k) else f"{s:g}"


def _skip(a: bool, b: bool) -> str:
    if a == b:
        return "both" if a else ""
    return "fpsim only" if a else "PyTorch only"


def compare_with_torch(dtype="float16", steps: int = 40, *, task: ReferenceTask | None = None, lr: float | None = None,
                       init_scale: float = 2.0**16, growth_interval: int = 10, seed: int = 0) -> Bridge:
    """:func:`fpsim_amp_run` and :func:`torch_amp_run` with the same arguments (ImportError
    without PyTorch; check :func:`torch_available` first)."""
    kw = {"task": task, "lr": lr, "init_scale": init_scale, "growth_interval": growth_interval, "seed": seed}
    theirs = torch_amp_run(dtype, steps, **kw)
    ours = fpsim_amp_run(dtype, steps, **kw)
    return Bridge(get_format(dtype).name, ours, theirs)
