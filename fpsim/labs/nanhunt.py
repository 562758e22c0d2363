"""Lab 14 (hunting a NaN): a small regression written the way a first float16 attempt often is,
trained with the first non-finite origin traced - and the same model in PyTorch, watched by its
own tools (forward hooks, ``torch.autograd.detect_anomaly``).

The data are what nobody normalised: 16 raw features, integers 0-255 (pixel values, counts),
and a price-like target in the thousands, ``y = x @ w`` with ``w`` uniform in [0, 2) (each sum
exact, rounded once to float64, then to float32).  The model
is ``nn.MLP([16, 32, 1])`` with ReLU.  :func:`hunt_run` trains it full batch with Adam under
fpsim's ``trace_nonfinite``; :func:`torch_hunt` trains the same model, from the same initial
weights, in PyTorch float16 on the CPU.  PyTorch is imported only when :func:`torch_hunt` runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .. import nn, ops
from ..amp import GradScaler
from ..numerics import fsum64, mean64
from ..optim import Adam
from ..tensor import tensor
from ..trace import NonFiniteTracer, trace_nonfinite

__all__ = ["raw_regression", "normalised", "HuntRun", "hunt_run", "TorchHunt", "torch_hunt", "zero_row_hunt"]


def raw_regression(n: int = 256, dim: int = 16, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)``, float32: x (n, dim) integers 0-255, y (n, 1) = x @ w with w uniform in [0, 2):
    each product rounded to float64, their exact sum rounded once to float64
    (:func:`fpsim.numerics.fsum64`: no BLAS order), then to float32."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (n, dim)).astype(np.float32)
    w = rng.uniform(0.0, 2.0, (dim, 1))
    y = fsum64(x.astype(np.float64) * w[:, 0], axis=1).astype(np.float32)[:, None]
    return x, y


def normalised(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The fix in the data: each feature and the target shifted to mean 0 and scaled to standard
    deviation 1 (statistics in float64, each mean the exact sum rounded once over the count -
    :func:`fpsim.numerics.mean64`; the standard deviation numpy's, the root mean squared
    deviation; results float32)."""
    def z(a):
        a = np.asarray(a, dtype=np.float64)
        d = a - mean64(a, axis=0)
        return (d / np.sqrt(mean64(d * d, axis=0))).astype(np.float32)

    return z(x), z(y)


@dataclass
class HuntRun:
    """One run: the float32 loss of each step (before its update; the run stops at the first
    loss that is not finite), the scale and whether the step was skipped (with a scaler), the
    step the loss first was not finite (None if it stayed finite), and the tracer."""

    losses: list = field(default_factory=list)
    scales: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    died_at: int | None = None
    tracer: NonFiniteTracer | None = None

    def summary(self) -> str:
        end = (f"loss not finite at step {self.died_at} ({self.losses[-1]})" if self.died_at is not None
               else f"{len(self.losses)} steps, loss {self.losses[0]:.4g} -> {self.losses[-1]:.4g}")
        if self.scales:
            end += (f"; {sum(self.skipped)} steps skipped, scale {self.scales[0]:g} -> {self.scales[-1]:g}")
        return end


def hunt_run(x, y, *, fmt="float16", loss_format="float32", master: bool = True, scaler: GradScaler | None = None,
             steps: int = 30, lr: float = 0.01, seed: int = 0) -> HuntRun:
    """Train ``nn.MLP([dim, 32, 1])`` (ReLU; weights from ``seed``) on ``x, y`` for ``steps`` full-batch
    Adam steps, with ``fpsim.trace_nonfinite`` watching every rounding (each step labelled).

    The model and ``x`` are stored in ``fmt``; the prediction is converted to ``loss_format``
    and ``ops.mse_loss`` runs there against ``y`` held in ``loss_format`` (one rounding of the
    float32 mean).  ``master``: Adam's float32 master weights and state; without them the update
    and Adam's moments are rounded into ``fmt``.  ``scaler``: a ``GradScaler`` (scale, step,
    update: overflowing steps are skipped); None for a plain ``backward`` and ``step``."""
    model = nn.MLP([x.shape[1], 32, 1], activation="relu", seed=seed).to(fmt)
    opt = Adam(model.parameters(), lr=lr, master_weights=master)
    xt, yt = tensor(x, fmt), tensor(y, loss_format)
    run = HuntRun()
    with trace_nonfinite() as t:
        run.tracer = t
        for step in range(steps):
            t.set_step(step)
            opt.zero_grad()
            loss = ops.mse_loss(model(xt).to(loss_format), yt)
            run.losses.append(loss.item())
            if not math.isfinite(run.losses[-1]):
                run.died_at = step
                break
            if scaler is None:
                loss.backward()
                opt.step()
                continue
            run.scales.append(scaler.get_scale())
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            run.skipped.append(scaler.last_step_skipped(opt))
    return run


@dataclass
class TorchHunt:
    """What PyTorch's tools said, per step: the first module whose forward output held inf/NaN
    (a forward hook on every module, the loss module included) and the first error
    ``torch.autograd.detect_anomaly`` raised in a backward pass (its first line); None where
    they said nothing.  ``died_at``: the first step whose loss was not finite."""

    hook: tuple | None = None  # (step, module name, "inf" or "NaN")
    anomaly: tuple | None = None  # (step, message)
    died_at: int | None = None
    losses: list = field(default_factory=list)


def _torch_model(x, seed: int):
    """fpsim's initial weights (the MLP of :func:`hunt_run`) in a float16 ``torch.nn.Sequential``."""
    import torch

    fmodel = nn.MLP([x.shape[1], 32, 1], activation="relu", seed=seed)
    layers = []
    for mod in fmodel:
        if isinstance(mod, nn.Linear):
            lin = torch.nn.Linear(*reversed(mod.weight.shape))
            with torch.no_grad():
                lin.weight.copy_(torch.from_numpy(np.array(mod.weight.f32(), dtype=np.float32)))
                lin.bias.copy_(torch.from_numpy(np.array(mod.bias.f32(), dtype=np.float32)))
            layers.append(lin)
        else:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers).half()


def torch_hunt(x, y, *, loss_format="float16", steps: int = 5, lr: float = 0.01, seed: int = 0) -> TorchHunt:
    """The pure float16 run of :func:`hunt_run` (``master=False``) in PyTorch on the CPU:
    ``model.half()``, ``torch.optim.Adam`` on the float16 parameters, ``torch.nn.MSELoss`` on
    the prediction converted to ``loss_format``.  Every module (the loss too) has a forward hook
    that notes the first non-finite output; each backward runs under ``detect_anomaly``, whose
    error is caught and noted.  Single-threaded; PyTorch's thread count is restored afterwards."""
    import warnings

    import torch

    model = _torch_model(x, seed)
    loss_fn = torch.nn.MSELoss()
    tdtype = {"float16": torch.float16, "float32": torch.float32}[loss_format]
    xt, yt = torch.from_numpy(x).half(), torch.from_numpy(y).to(tdtype)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    out, names = TorchHunt(), {m: n or "(model)" for n, m in model.named_modules()}
    names[loss_fn] = "MSELoss"
    state = {"step": 0}

    def hook(module, inputs, output):
        if out.hook is None and not torch.isfinite(output).all():
            out.hook = (state["step"], names[module], "NaN" if torch.isnan(output).any() else "inf")

    for m in [*model.modules(), loss_fn]:
        m.register_forward_hook(hook)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for step in range(steps):
            state["step"] = step
            opt.zero_grad()
            loss = loss_fn(model(xt).to(tdtype), yt)
            out.losses.append(float(loss.item()))
            if out.died_at is None and not math.isfinite(out.losses[-1]):
                out.died_at = step
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # detect_anomaly warns that it is slow
                with torch.autograd.detect_anomaly():
                    try:
                        loss.backward()
                    except RuntimeError as e:
                        if out.anomaly is None:
                            out.anomaly = (step, str(e).splitlines()[0])
            opt.step()
    finally:
        torch.set_num_threads(threads)
    return out


def zero_row_hunt(amax_floor: float = 0.0, seed: int = 0):
    """A NaN with no overflow in sight (pytorch/ao#3356): ``nn.MLP([16, 32, 1])`` whose last layer
    starts at zero, as LoRA initialises its B, with every Linear on row-wise fp8 scaling
    (:class:`fpsim.lowp.rowwise.RowwiseScaling` with ``amax_floor``), one forward and backward of
    the normalised regression under ``trace_nonfinite``.  Returns (the float32 loss, the tracer's
    first origin or None): with ``amax_floor=0`` the zero rows' scale 448 / 0 is inf, 0 x inf NaN,
    and the origin is op ``fp8.rowwise.scale`` in ``2.weight``; with the default floor (1e-12)
    the loss is finite and there is no origin."""
    from ..lowp import convert
    from ..lowp.rowwise import RowwiseScaling

    x, y = normalised(*raw_regression(seed=seed))
    model = nn.MLP([16, 32, 1], seed=seed)
    last = model[2]
    last.weight.data = last.weight.data * 0
    convert(model, RowwiseScaling(amax_floor=amax_floor))
    with trace_nonfinite() as tracer:
        loss = ops.mse_loss(model(tensor(x, "float32")), tensor(y, "float32"))
        loss.backward()
    return float(loss.item()), tracer.first_nonfinite()
