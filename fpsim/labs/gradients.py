"""Real gradients for the labs: a model trained a few float32 steps, and copies of it.

Labs 05, 06 and 08 look at the gradients of a run that has started learning, not of a freshly
initialised network (whose gradients are larger than they will be a few steps later).  The
helpers here train in float32 only, so what the labs then measure in float16 / bfloat16 / fp8
is what those formats would do to the float32 numbers, one rounding each.
"""

from __future__ import annotations

import copy

import numpy as np

from .. import ops
from ..checks import check_integer
from ..experiments import ReferenceTask
from ..numerics.scalars import log2_64
from ..optim import SGD, Adam
from ..tensor import Tensor, tensor

WIDTH = 100  # what these tables print fits in this many characters (JupyterLab wraps longer lines)

__all__ = ["clone", "fit", "warm_reference", "binade_span", "capture_totals", "monitor_totals", "audit_totals"]


def clone(model, fmt=None):
    """A deep copy of ``model`` with its own parameters (no ``.grad``), rounded into ``fmt``
    if given (one rounding from the parameters' exact values; ``None`` keeps their format).

    Backends and format records are shared, not copied (they hold modules and dtypes)."""
    memo = {}
    for p in model.parameters():
        memo[id(p.backend)] = p.backend
        memo[id(p.fmt)] = p.fmt
        memo[id(p.grad_fmt)] = p.grad_fmt
    new = copy.deepcopy(model, memo)
    for p in new.parameters():
        p.grad = None
    return new.to(fmt) if fmt is not None else new


def _as_input(x, fmt):
    if isinstance(x, Tensor):
        return x
    return tensor(np.asarray(x, dtype=np.float32), fmt)


def _as_target(t):
    """Float targets become float32 tensors; integer class labels stay numpy arrays."""
    if isinstance(t, Tensor):
        return t
    arr = np.asarray(t)
    return tensor(arr.astype(np.float32), "float32") if arr.dtype.kind == "f" else arr


def fit(model, loss_fn, x, *targets, steps: int = 20, lr: float = 1e-2, optimizer: str = "adam") -> list[float]:
    """Train ``model`` in place, full batch: ``loss_fn(model(x), *targets)``, ``steps`` times.

    ``x`` (numpy or Tensor) is rounded once into the model's parameter format; float targets
    become float32 tensors, integer labels pass through.  ``optimizer``: ``"adam"`` or
    ``"sgd"`` (plain, no momentum), without master weights.  Returns the loss before each step
    (floats).  Meant for float32 models: it is how the labs get a model "a few steps in".
    """
    if optimizer not in ("adam", "sgd"):
        raise ValueError(f"optimizer must be 'adam' or 'sgd', got {optimizer!r}")
    check_integer(steps, "steps", 0)
    params = model.parameters()
    xt = _as_input(x, params[0].fmt)
    ts = [_as_target(t) for t in targets]
    opt = Adam(params, lr=lr) if optimizer == "adam" else SGD(params, lr=lr)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(model(xt), *ts)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def warm_reference(n: int = 4096, steps: int = 20, seed: int = 0):
    """The reference autoencoder (``ReferenceTask(n=n)``: 64-32-8-32-64, tanh, MSE over all
    n x 64 outputs) after ``steps`` float32 Adam steps at the task's learning rate.

    Returns ``(model, x)``: the float32 model and the data (float32 numpy, (n, 64)), which is
    also the target.  With the default n = 4096 the loss averages 2^18 outputs (the full task:
    2^20), so gradients are about 4x larger than in ``fpsim compare`` - smaller, faster, and
    still tiny.
    """
    task = ReferenceTask(n=n)
    x = task.data()
    model = task.model(seed)
    fit(model, ops.mse_loss, x, x, steps=steps, lr=task.lr)
    return model, x


def binade_span(values, lo: float = 0.001, hi: float = 0.999) -> tuple[float, float]:
    """(log2 of the ``lo`` quantile, log2 of the ``hi`` quantile) of the non-zero finite |values|,
    in float64: where the bulk of a tensor lies, in powers of two.  Their difference is how
    many binades (factors of two) a format must cover to hold all but the extreme tails."""
    v = np.abs(np.asarray(values, dtype=np.float64).ravel())
    v = v[np.isfinite(v) & (v != 0)]
    if v.size == 0:
        raise ValueError("binade_span needs at least one non-zero finite value")
    if not 0 <= lo < hi <= 1:
        raise ValueError(f"need 0 <= lo < hi <= 1, got lo={lo}, hi={hi}")
    q = np.quantile(v, [lo, hi])
    return log2_64(q[0]), log2_64(q[1])  # correctly rounded: numpy's log2 differs by CPU in the last bit


def _pct(k: int, n: int) -> str:
    if not n:
        return "-"
    if k == 0 or k == n:
        return "0%" if k == 0 else "100%"
    p = 100.0 * k / n
    if p < 0.1:
        return f"{p:.2g}%"
    return ">99.9%" if p > 99.9 else f"{p:.1f}%"


def capture_totals(cap, formats=None, scale=None, layers: bool = False) -> str:
    """What each format does to a :class:`~fpsim.monitor.GradientCapture`'s gradients, summed
    over all layers: one row for the activation gradients (flowing between layers), one for the
    weight and bias gradients; per format the % of the non-zero values flushed to zero and,
    after the slash, the % left subnormal.  ``layers=True`` adds one row per Linear output
    (the tanh outputs carry the same numbers one step later).  ``scale``: multiply first (a loss
    scale), as :meth:`GradientCapture.summary` does."""
    from ..experiments.report import split_table

    summ = cap.summary(scale=scale)
    names = [n for n in summ if formats is None or n in {_fmt_name(f) for f in formats}]
    groups = [("activation gradients, all layers", lambda k: k[1] == "activation"),
              ("weight and bias gradients", lambda k: k[1] == "weight")]
    if layers:
        linear = [k for k in cap.grads if k[1] == "activation" and _is_linear(cap, k)]
        groups += [(f"  activation gradient at layer {k[0]}'s output", lambda j, k=k: j == k) for k in linear]
    rows = []
    for label, pick in groups:
        keys = [k for k in cap.grads if pick(k)]
        first = summ[names[0]] if names else {}
        n = sum(first[k]["n"] for k in keys) if names else sum(cap.grads[k].size for k in keys)
        nz = sum(first[k]["nonzero"] for k in keys) if names else 0
        cells = []
        for name in names:
            f = sum(summ[name][k]["flushed"] for k in keys)
            s = sum(summ[name][k]["subnormal"] for k in keys)
            cells.append(f"{_pct(f, nz)} / {_pct(s, nz)}")
        rows.append([label, f"{n:,}", *cells])
    cols = ["gradients", "values", *names]
    title = [f"loss scale {scale:g}"] if scale not in (None, 1, 1.0) else []
    legend = ["each format's cell: % of the non-zero values flushed to 0 / % left subnormal"] if names else []
    return "\n".join(title + split_table(cols, rows, WIDTH, right=range(1, len(cols))) + legend)


def _fmt_name(f) -> str:
    from ..formats import get_format

    return get_format(f).name


def _is_linear(cap, key) -> bool:
    """Whether the capture key is the output of a Linear (its scope also holds a weight)."""
    return (key[0], "weight", "weight") in cap.grads


def monitor_totals(m, fmt="float16") -> str:
    """A few rows that sum up a :func:`fpsim.monitor` of one training step: the values rounded
    into ``fmt`` in the forward pass, the gradients handed from layer to layer in the backward
    pass, the weight and bias gradients, and the optimizer's roundings; for each, how many were
    rounded and the % flushed to zero (underflow) and left subnormal.  ``m.table()`` has one
    row per op and tensor."""
    from ..monitor import COUNTERS
    from ..textable import text_table

    rows = []
    groups = [("forward: layer outputs", "forward", lambda t: True),
              ("backward: gradients between layers", "backward", lambda t: t == ""),
              ("backward: weight and bias gradients", "backward", lambda t: t in ("weight", "bias")),
              ("update: optimizer (all formats)", "update", None)]
    for label, direction, pick in groups:
        tot = {"n": 0, "underflow": 0, "subnormal": 0, "overflow": 0}
        for (d, _s, _o, t, f), c in m.counts.items():
            if d != direction or (pick is not None and (f != _fmt_name(fmt) or not pick(t))):
                continue
            v = dict(zip(COUNTERS, c))
            for k in tot:
                tot[k] += v[k]
        rows.append([label, f"{tot['n']:,}", _pct(tot["underflow"], tot["n"]), _pct(tot["subnormal"], tot["n"]),
                     str(tot["overflow"])])
    cols = ["rounded into " + _fmt_name(fmt), "values", "flushed to 0", "subnormal", "overflow"]
    return "\n".join(text_table(cols, rows, right=range(1, len(cols))))


def audit_totals(report) -> str:
    """The verdict of an :class:`~fpsim.tools.audit.AuditReport` in one row per format: the share of the
    non-zero values flushed and left subnormal unscaled, the power-of-two loss scales that are
    safe for all the values together, and those safe for every tensor on its own (the overlap
    of the per-tensor ranges).  ``report.table()`` lists every tensor."""
    from ..textable import text_table

    rows = []
    for name, fa in report.overall.formats.items():
        ranges = [t.formats[name].scale_range for t in report.tensors]
        if ranges and all(r is not None for r in ranges):
            lo, hi = max(r[0] for r in ranges), min(r[1] for r in ranges)
            each = f"2^{lo} .. 2^{hi}" if lo <= hi else "none"
        else:
            each = "none"
        both = f"2^{fa.scale_range[0]} .. 2^{fa.scale_range[1]}" if fa.scale_range else "none"
        rows.append([name, _pct(fa.flushed, fa.nonzero), _pct(fa.subnormal, fa.nonzero), both, each])
    cols = ["format", "flushed (unscaled)", "subnormal", "safe scales, all values", "safe for every tensor"]
    return "\n".join(text_table(cols, rows, right=(1, 2)))
