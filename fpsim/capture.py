"""Gradient capture: one forward + backward pass that keeps every gradient, per layer, and says
what each format would keep of them (``capture_gradients``, for the histograms of the labs and
``fpsim figures``).  It reads everything from the rounding hooks; the model is neither copied nor
patched, and comes back as it was.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import numpy as np

from . import state
from .formats import F32, LOW_FORMATS, get_format
from .formats.survival import survival
from .tensor import Tensor, _topo_order, tensor
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
    """One forward + backward pass of ``model`` in float32, keeping every gradient.

    ``loss = loss_fn(model(inputs[0]), *inputs[1:])``: the first input feeds the model, the
    rest (targets) go to the loss.  Float inputs are widened exactly (or rounded once from
    float64) to float32; autocast is off inside.  The parameters run as their float32 values
    (a low-format parameter widened exactly) for this one pass; afterwards every parameter has
    its own data, format and ``.grad`` back, the very objects it had - the model is neither
    copied nor patched.

    Everything is read from the rounding hooks: parameter gradients are the float32 gradients
    the backward pass rounds into them; activation gradients are those it rounds into each
    module's output (the tensor made inside the module that the rest of the graph uses; the last
    rounding into a tensor used twice is its sum).
    """
    if not inputs:
        raise TypeError("capture_gradients needs at least one input: capture_gradients(model, loss_fn, x, *targets)")
    fnames = tuple(get_format(f).name for f in formats)
    params = model.parameters()
    be = params[0].backend if params else None
    x0 = _widen(inputs[0], be)
    rest = [_widen(x, be) for x in inputs[1:]]
    paths = [path for path, _ in model.named_modules()]
    caught: list = []

    def hook(ev):
        if ev.direction == "backward" and ev.target.startswith((_OUT_MARK, _PARAM_MARK)):
            exact = ev.exact32 if ev.exact32 is not None else ev.backend.to_f32(ev.stored)
            caught.append((ev.target, np.array(ev.backend.to_numpy(ev.backend.to_f32(exact)), np.float32)))

    with _as_float32(model) as names:
        with state.autocast_as(None), state.set_grad_enabled(True), state.hooked(hook):
            out = model(x0)
            loss = loss_fn(out, *rest)
            if not isinstance(loss, Tensor):
                raise TypeError(f"loss_fn must return a Tensor, got {type(loss).__name__}")
            owners = _mark_outputs(loss, out, paths)
            loss.backward()
    last: dict[str, np.ndarray] = dict(caught)  # in order: the last rounding into a tensor is its full gradient
    grads: dict[tuple[str, str, str], np.ndarray] = {}
    for mark, mpaths in owners.items():
        if mark in last:
            for p in [p for p in mpaths if p] or mpaths:  # the root shares its output with its last child
                grads[(p, "activation", "output")] = last[mark]
    for mark, pname in names.items():
        if mark in last:
            scope, _, name = pname.rpartition(".")
            grads[(scope, "weight", name)] = last[mark]
    order = {path: i for i, path in enumerate(paths)}
    grads = dict(sorted(grads.items(), key=lambda kv: (order.get(kv[0][0], len(order)), kv[0][1] != "activation",
                                                         kv[0][2])))
    return GradientCapture(grads=grads, formats=fnames, scale=float(scale), loss=loss.item())


_PARAM_MARK = "__fpsim_capture_param_"


@contextlib.contextmanager
def _as_float32(model):
    """The parameters as float32 (data widened exactly, float32 gradients, no gradient yet, a
    marked name the hooks see) inside; each gets its own attributes back on exit.  Yields
    mark -> parameter name."""
    named = list(model.named_parameters())
    saved = [(p, p.data, p.fmt, p.grad_fmt, p.grad, p.name) for _, p in named]
    try:
        names = {}
        for i, (pname, p) in enumerate(named):
            p.data, p.fmt, p.grad_fmt, p.grad = p.backend.to_f32(p.data), F32, F32, None
            p.name = f"{_PARAM_MARK}{i}"
            names[p.name] = pname
        yield names
    finally:
        for p, data, fmt, grad_fmt, grad, name in saved:
            p.data, p.fmt, p.grad_fmt, p.grad, p.name = data, fmt, grad_fmt, grad, name


def _widen(x, be):
    """Float data as a float32 tensor; anything else (integer class targets) unchanged."""
    if isinstance(x, Tensor):
        return tensor(x, "float32", backend=x.backend)
    arr = np.asarray(x) if isinstance(x, np.ndarray | list | float) else None
    if arr is not None and arr.dtype.kind == "f":
        return tensor(arr, "float32", backend=be)
    return x


def _mark_outputs(loss, out, paths) -> dict[str, list[str]]:
    """Name each module's output tensor in the graph of ``loss`` so the backward rounding into it
    can be told apart: the node made inside the module's scope that a node outside it uses (the
    model's own output ``out`` for the root).  Returns mark -> module paths (a tensor several
    modules return - a Sequential and its last child - lists them all)."""
    order = _topo_order(loss)
    used_in: dict[int, list[str]] = {}  # node -> the scopes of the nodes that use it
    for node in order:
        for parent in node._parents or ():
            used_in.setdefault(id(parent), []).append(node._scope or "")

    def inside(scope: str, path: str) -> bool:
        return not path or scope == path or scope.startswith(path + ".")

    owners: dict[str, list[str]] = {}
    for node in order:
        if node.is_leaf or not node.requires_grad or node.name:
            continue
        scope = node._scope or ""
        mpaths = [p for p in paths if inside(scope, p)
                  and (node is out or any(not inside(s, p) for s in used_in.get(id(node), ())))]
        if mpaths:
            node.name = f"{_OUT_MARK}{len(owners)}"
            owners[node.name] = mpaths
    return owners
