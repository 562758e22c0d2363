"""Gradient capture: one forward + backward pass that keeps every gradient, per layer, and says
what each format would keep of them (``capture_gradients``, for the histograms of the labs and
``fpsim figures``).  It watches the backward pass with a monitor hook; the model is not touched.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np

from . import state
from .formats import LOW_FORMATS, get_format
from .formats.survival import survival
from .monitor import monitor
from .tensor import Tensor, tensor
from .textable import text_table

__all__ = ["capture_gradients", "GradientCapture"]

_OUT_MARK = "__fpsim_capture_out_"


@dataclass
class GradientCapture:
    """The float32 gradients of one forward + backward pass, per layer, and what formats keep.

    ``grads`` maps ``(scope, kind, name)`` to a float32 numpy array (the layer's shape):
    kind ``"weight"`` for a parameter's gradient (``name`` = the parameter, e.g. ``"weight"``,
    ``"bias"``), kind ``"activation"`` for the gradient flowing into a module's output from
    the layers above it (``name`` = ``"output"``).  ``loss`` is the float32 loss value.
    """

    grads: dict[tuple[str, str, str], np.ndarray]
    formats: tuple[str, ...] = LOW_FORMATS
    scale: float = 1.0
    loss: float = float("nan")
    _cache: dict = field(default_factory=dict, repr=False)

    def keys(self, kind=None, scope=None) -> list[tuple[str, str, str]]:
        return [k for k in self.grads if (kind is None or k[1] == kind) and (scope is None or k[0] == scope)]

    def values(self, kind=None, scope=None) -> np.ndarray:
        """Every matching gradient, flattened into one float32 array (for a histogram)."""
        parts = [self.grads[k].ravel() for k in self.keys(kind, scope)]
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)

    def summary(self, fmt=None, scale=None) -> dict:
        """What each format keeps of each gradient, after multiplying by ``scale``.

        Returns ``{format: {(scope, kind, name): stats}}`` (only ``fmt`` when given), stats as
        :func:`fpsim.formats.survival.survival` gives them: counts ``n, zero, nonzero, nonfinite,
        flushed, subnormal, normal, overflow`` and fractions ``frac_flushed, frac_subnormal,
        frac_normal, frac_overflow`` of the non-zero finite values.  The product with the
        scale is formed in float64 and rounded once into the format.
        """
        scale = self.scale if scale is None else float(scale)
        names = [get_format(fmt).name] if fmt is not None else [get_format(f).name for f in self.formats]
        out = {}
        for name in names:
            ck = (name, scale)
            if ck not in self._cache:
                self._cache[ck] = {k: survival(v, name, scale) for k, v in self.grads.items()}
            out[name] = self._cache[ck]
        return out if fmt is None else out[names[0]]

    def table(self, scale=None) -> str:
        """Per layer and kind, the % of non-zero gradient values each format flushes to zero
        (and, after a slash, the % left subnormal)."""
        summ = self.summary(scale=scale)
        names = list(summ)
        cols = ["scope", "kind", "name", "n", "nonzero"] + [f"{n} flushed/subn." for n in names]
        rows = []
        for k, v in self.grads.items():
            first = summ[names[0]][k] if names else None
            row = [k[0] or "-", k[1], k[2], str(v.size), str(first["nonzero"]) if first else ""]
            for n in names:
                s = summ[n][k]
                row.append(f"{100 * s['frac_flushed']:.1f}% / {100 * s['frac_subnormal']:.1f}%")
            rows.append(row)
        lines = text_table(cols, rows)
        s = self.scale if scale is None else scale
        return f"loss scale {s:g}\n" + "\n".join(lines)


def capture_gradients(model, loss_fn, *inputs, formats=LOW_FORMATS, scale=1.0) -> GradientCapture:
    """One forward + backward pass of a float32 copy of ``model``, keeping every gradient.

    ``loss = loss_fn(model(inputs[0]), *inputs[1:])``: the first input feeds the model, the
    rest (targets) go to the loss.  Float inputs are widened exactly (or rounded once from
    float64) to float32; autocast is off inside.  The user's model, its parameters and their
    ``.grad`` are not touched: a deep copy is converted to float32 and differentiated.

    Parameter gradients are read from the copy's ``.grad`` (float32); activation gradients
    are the float32 gradients the backward pass rounds into each module's output tensor,
    collected by a monitor hook (the last rounding of a tensor used twice is its sum).
    """
    if not inputs:
        raise TypeError("capture_gradients needs at least one input: capture_gradients(model, loss_fn, x, *targets)")
    fnames = tuple(get_format(f).name for f in formats)
    params = model.parameters()
    be = params[0].backend if params else None
    memo = {}
    for p in params:
        memo[id(p.backend)] = p.backend
        memo[id(p.fmt)] = p.fmt
        memo[id(p.grad_fmt)] = p.grad_fmt
    work = copy.deepcopy(model, memo)
    work.to("float32")
    for p in work.parameters():
        p.grad = None

    x0 = _widen(inputs[0], be)
    rest = [_widen(x, be) for x in inputs[1:]]

    owners = _name_module_outputs(work)  # so the backward rounding into each can be told apart
    with state.autocast_as(None), state.set_grad_enabled(True), \
            monitor(capture=lambda ev: ev.direction == "backward" and ev.target.startswith(_OUT_MARK)) as m:
        loss = loss_fn(work(x0), *rest)
        if not isinstance(loss, Tensor):
            raise TypeError(f"loss_fn must return a Tensor, got {type(loss).__name__}")
        loss.backward()

    grads: dict[tuple[str, str, str], np.ndarray] = {}
    last: dict[str, np.ndarray] = {}
    for key, arr in m.captured:  # in order: the last rounding into a tensor is its full gradient
        last[key[3]] = arr
    for mark, paths in owners.items():
        if mark not in last:
            continue
        keep = [p for p in paths if p] or paths  # the root shares its output with its last child
        for p in keep:
            grads[(p, "activation", "output")] = last[mark]
    for pname, p in work.named_parameters():
        scope, _, name = pname.rpartition(".")
        if p.grad is not None:
            grads[(scope, "weight", name)] = np.asarray(p.grad.backend.to_numpy(p.grad.f32()), dtype=np.float32)
    order = {path: i for i, (path, _) in enumerate(work.named_modules())}
    grads = dict(sorted(grads.items(), key=lambda kv: (order.get(kv[0][0], len(order)), kv[0][1] != "activation",
                                                         kv[0][2])))
    return GradientCapture(grads=grads, formats=fnames, scale=float(scale), loss=loss.item())


def _widen(x, be):
    """Float data as a float32 tensor; anything else (integer class targets) unchanged."""
    if isinstance(x, Tensor):
        return tensor(x, "float32", backend=x.backend)
    arr = np.asarray(x) if isinstance(x, np.ndarray | list | float) else None
    if arr is not None and arr.dtype.kind == "f":
        return tensor(arr, "float32", backend=be)
    return x


def _name_module_outputs(work) -> dict[str, list[str]]:
    """Wrap every module's forward so that its output tensor gets a marked name; returns the
    mark -> module paths map, filled as the forward pass runs (a tensor returned by several
    modules - a Sequential and its last child - lists them all)."""
    owners: dict[str, list[str]] = {}

    def wrap(path, mod):
        orig = mod.forward

        def forward(*a, **kw):
            out = orig(*a, **kw)
            if isinstance(out, Tensor) and out.requires_grad and not out.is_leaf:
                if out.name.startswith(_OUT_MARK):
                    owners[out.name].append(path)
                elif not out.name:
                    out.name = f"{_OUT_MARK}{len(owners)}"
                    owners[out.name] = [path]
            return out

        object.__setattr__(mod, "forward", forward)

    for path, mod in list(work.named_modules()):
        wrap(path, mod)
    return owners
