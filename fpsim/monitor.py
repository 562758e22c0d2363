"""Counting what rounding does, op by op: ``with fpsim.monitor() as m:``.

The engine rounds in one place (``tensor.round_result``) and calls every hook in
``tensor.HOOKS`` with the exact float32 value it was given and the value it stored.  A
:class:`Monitor` is such a hook.  For each (direction, scope, op, target, format) it counts

- ``n``: values rounded,
- ``inexact``: values the rounding changed,
- ``underflow``: non-zero values that became 0 (flushed),
- ``subnormal``: results that are subnormal in the format,
- ``overflow``: finite values that became inf or NaN (or were clamped to max),
- ``inf``, ``nan``: results that are inf / NaN (whatever the cause), and
- ``nan_in``: NaNs already present in the exact value (the float32 computation made them).

The comparisons run on the backend's own arrays (numpy or cupy).  On a device the counts are
also added up there, and copied to the host once, when they are read (``counts``, ``totals``,
``table``, ``to_dict``): a monitored training step synchronises nothing per op.  With no
monitor active the engine pays one ``if HOOKS:`` per rounding.

:func:`capture_gradients` uses the same hook to keep the float32 gradients a backward pass
produces, per layer, and says what each format would keep of them.
"""

from __future__ import annotations

import copy
import importlib
from dataclasses import dataclass, field

import numpy as np

from . import tensor as _tensor
from .backend import BACKENDS
from .formats import get_format
from .textable import text_table

__all__ = ["monitor", "Monitor", "COUNTERS", "capture_gradients", "GradientCapture", "DEFAULT_FORMATS"]

COUNTERS = ("n", "inexact", "underflow", "subnormal", "overflow", "inf", "nan", "nan_in")
DIRECTIONS = ("forward", "backward", "update")
DEFAULT_FORMATS = ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")
_NUMPY = BACKENDS["numpy"]


def _xp_of(x):
    """numpy for numpy arrays and scalars, else the array's own module (cupy, or a stand-in
    array type that names its module in ``_fpsim_xp``)."""
    xp = getattr(type(x), "_fpsim_xp", None)
    if xp is not None:
        return xp
    if isinstance(x, np.ndarray | np.generic | float | int):
        return np
    return importlib.import_module(type(x).__module__.split(".")[0])


def _count_rounding(fmt, exact32, stored) -> list[int]:
    """The COUNTERS for one rounding of ``exact32`` (float32) into ``stored`` (fmt's storage),
    as Python ints (on a device: one device -> host copy)."""
    xp = _xp_of(exact32)
    n, events = _event_counts(fmt, exact32, stored, xp)
    return [n, *(int(v) for v in (events.tolist() if xp is np else events.get().tolist()))]


def _event_counts(fmt, exact32, stored, xp):
    """(n, events): the number of values rounded (a Python int) and the other COUNTERS as one
    int array on ``xp``'s device, computed there - nothing is copied to the host."""
    x = xp.asarray(exact32)
    # numpy's own float16 -> float32 cast is slow on subnormals; the backend's is not.
    r = _NUMPY.to_f32(np.asarray(stored)) if xp is np else xp.asarray(stored).astype(xp.float32, copy=False)
    a = xp.abs(r)
    nan_r = xp.isnan(r)
    masks_same = [(a > 0) & (a < fmt.tiny), xp.isinf(r), nan_r]
    if r is x or r.dtype == x.dtype and fmt.name == "float32":
        # Rounding into float32 from float32 changes nothing: no underflow or overflow possible.
        sub, inf, nan = (xp.count_nonzero(m) for m in masks_same)
        zero = sub * 0
        return int(x.size), xp.stack([zero, zero, sub, zero, inf, nan, nan])
    nan_x = xp.isnan(x)
    finite_x = xp.isfinite(x)
    zero_r = a == 0
    over = finite_x & ~xp.isfinite(r)
    if fmt.name != "float32":
        # A saturating rounding clamps instead of overflowing: max where the exact value was beyond it.
        # At the threshold itself IEEE formats round to inf (max is odd), e4m3fn to max (even).
        beyond = xp.abs(x) >= fmt.overflow_threshold if fmt.has_inf else xp.abs(x) > fmt.overflow_threshold
        over = over | (finite_x & (a == fmt.max) & beyond)
    masks = [
        r != x,  # NaN != NaN as well: corrected below by the NaNs that stayed NaN
        zero_r & (x != 0),
        masks_same[0],
        over,
        masks_same[1],
        nan_r,
        nan_x,
        nan_x & nan_r,
    ]
    ne, under, sub, over_n, inf, nan, nan_in, nan_kept = (xp.count_nonzero(m) for m in masks)
    return int(x.size), xp.stack([ne - nan_kept, under, sub, over_n, inf, nan, nan_in])


class Monitor:
    """Counts of rounding events per (direction, scope, op, target, format).

    ``direction`` is ``forward`` (an op's result), ``backward`` (a gradient rounded into an
    input's gradient format) or ``update`` (an optimizer writing a parameter or its state);
    ``scope`` the dotted module path (``"0"``, ``"2"`` in a Sequential; ``""`` outside any
    module); ``op`` the op that produced the value (in backward: the op whose backward ran);
    ``target`` the name of the tensor receiving a gradient or update (``"weight"``), else ``""``.

    ``capture``: keep a float32 numpy copy of the exact values of matching roundings in
    :attr:`captured` (a list of ``(key, array)``): ``None`` (nothing), a direction, a tuple of
    directions, or a callable ``(op, direction, scope, target, fmt) -> bool``.
    """

    def __init__(self, capture=None):
        self._counts: dict[tuple, list[int]] = {}
        # On a device the counts stay there until read: key -> [n, events array] (see counts).
        self._pending: dict[tuple, list] = {}
        self._pending_xp = None
        self.captured: list[tuple[tuple, np.ndarray]] = []
        if capture is None or callable(capture):
            self._capture = capture
        else:
            dirs = (capture,) if isinstance(capture, str) else tuple(capture)
            bad = [d for d in dirs if d not in DIRECTIONS]
            if bad:
                raise ValueError(f"capture: unknown direction(s) {bad}; known: {', '.join(DIRECTIONS)}")
            self._capture = lambda op, direction, scope, target, fmt: direction in dirs
        self._hook = self._record  # one bound method, so it can be found again by identity
        self._active = 0

    # -- the hook ------------------------------------------------------------------------

    def _record(self, op, direction, scope, target, fmt, exact32, stored) -> None:
        key = (direction, scope, op, target, fmt.name)
        xp = _xp_of(exact32)
        if xp is not np:  # add on the device: no host synchronisation per op
            n, events = _event_counts(fmt, exact32, stored, xp)
            p = self._pending.get(key)
            self._pending[key] = [n, events] if p is None else [p[0] + n, p[1] + events]
            self._pending_xp = xp
        else:
            self._add(key, _count_rounding(fmt, exact32, stored))
        if self._capture is not None and self._capture(op, direction, scope, target, fmt):
            arr = exact32.get() if xp is not np else np.array(exact32, dtype=np.float32, copy=True)
            self.captured.append((key, np.asarray(arr, dtype=np.float32)))

    def _add(self, key, c) -> None:
        acc = self._counts.get(key)
        if acc is None:
            self._counts[key] = list(c)
        else:
            for i, v in enumerate(c):
                acc[i] += v

    @property
    def counts(self) -> dict[tuple, list[int]]:
        """(direction, scope, op, target, format) -> the COUNTERS as Python ints.  Counts made
        on a device are copied to the host here, all in one copy, when first read."""
        if self._pending:
            keys = list(self._pending)
            host = self._pending_xp.stack([self._pending[k][1] for k in keys]).get().tolist()
            for k, ev in zip(keys, host):
                self._add(k, [self._pending[k][0], *(int(v) for v in ev)])
            self._pending.clear()
        return self._counts

    # -- context manager -----------------------------------------------------------------

    def start(self) -> Monitor:
        """Register the hook (``with`` does this)."""
        _tensor.HOOKS.append(self._hook)
        self._active += 1
        return self

    def stop(self) -> None:
        """Remove this monitor's hook (its most recent registration), leaving any others."""
        for i in range(len(_tensor.HOOKS) - 1, -1, -1):
            if _tensor.HOOKS[i] is self._hook:
                del _tensor.HOOKS[i]
                self._active -= 1
                return

    def __enter__(self) -> Monitor:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def active(self) -> bool:
        return self._active > 0

    def reset(self) -> None:
        """Forget every count and captured array (the hook stays registered)."""
        self._counts.clear()
        self._pending.clear()
        self.captured.clear()

    # -- reading the counts ----------------------------------------------------------------

    def totals(self, direction=None, op=None, scope=None, target=None, fmt=None) -> dict[str, int]:
        """COUNTERS summed over every key matching the given fields (None matches anything).

        ``scope`` matches a module and everything inside it (``"0"`` matches ``"0"`` and
        ``"0.1"``); ``fmt`` accepts any format name or alias.
        """
        fname = get_format(fmt).name if fmt is not None else None
        out = dict.fromkeys(COUNTERS, 0)
        for (d, s, o, t, f), c in self.counts.items():
            if direction is not None and d != direction:
                continue
            if op is not None and o != op:
                continue
            if scope is not None and not (s == scope or s.startswith(scope + ".") or scope == ""):
                continue
            if target is not None and t != target:
                continue
            if fname is not None and f != fname:
                continue
            for name, v in zip(COUNTERS, c):
                out[name] += v
        return out

    def to_dict(self) -> dict:
        """Plain nested data: ``{direction: {scope: {op: {target: {format: {counter: int}}}}}}``."""
        out: dict = {}
        for (d, s, o, t, f), c in sorted(self.counts.items(), key=_order):
            out.setdefault(d, {}).setdefault(s, {}).setdefault(o, {}).setdefault(t, {})[f] = dict(zip(COUNTERS, c))
        return out

    def table(self) -> str:
        """An aligned text table, one row per key, grouped by direction, scope, op, target.

        Percentages are of the values rounded in that row; overflow and NaN are counts.
        """
        cols = ["direction", "scope", "op", "target", "format", "n", "inexact", "underflow", "subnormal",
                "overflow", "nan"]
        rows = []
        prev = ("",) * 4
        for (d, s, o, t, f), c in sorted(self.counts.items(), key=_order):
            v = dict(zip(COUNTERS, c))
            n = v["n"]
            group = (d, s or "-", o, t)
            # Print a group field only where it (or a field left of it) changes.
            first = next((i for i in range(4) if group[i] != prev[i]), 4)
            shown = [g if i >= first else "" for i, g in enumerate(group)]
            prev = group
            rows.append(shown + [f, str(n), _pct(v["inexact"], n), _pct(v["underflow"], n),
                                 _pct(v["subnormal"], n), str(v["overflow"]), str(v["nan"])])
        if not rows:
            return "(no roundings recorded)"
        return "\n".join(text_table(cols, rows, right=range(5, len(cols))))

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        return f"<Monitor: {len(self.counts)} keys, {'active' if self.active else 'inactive'}>"


def _order(item):
    (d, s, o, t, f), _ = item
    return (DIRECTIONS.index(d) if d in DIRECTIONS else len(DIRECTIONS), d, s, o, t, f)


def _pct(k: int, n: int) -> str:
    if n == 0:
        return "-"
    if k == 0:
        return "0"
    p = 100.0 * k / n
    return f"{p:.3g}%" if p < 0.01 else f"{p:.2f}%"


def monitor(capture=None) -> Monitor:
    """A :class:`Monitor` to use as ``with fpsim.monitor() as m:``; monitors nest."""
    return Monitor(capture=capture)


# --------------------------------------------------------------------------------------------
# gradient capture

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
    formats: tuple[str, ...] = DEFAULT_FORMATS
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
        :func:`fpsim.audit.survival` gives them: counts ``n, zero, nonzero, nonfinite,
        flushed, subnormal, normal, overflow`` and fractions ``frac_flushed, frac_subnormal,
        frac_normal, frac_overflow`` of the non-zero finite values.  The product with the
        scale is formed in float64 and rounded once into the format.
        """
        from .audit import survival

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


def capture_gradients(model, loss_fn, *inputs, formats=DEFAULT_FORMATS, scale=1.0) -> GradientCapture:
    """One forward + backward pass of a float32 copy of ``model``, keeping every gradient.

    ``loss = loss_fn(model(inputs[0]), *inputs[1:])``: the first input feeds the model, the
    rest (targets) go to the loss.  Float inputs are widened exactly (or rounded once from
    float64) to float32; autocast is off inside.  The user's model, its parameters and their
    ``.grad`` are not touched: a deep copy is converted to float32 and differentiated.

    Parameter gradients are read from the copy's ``.grad`` (float32); activation gradients
    are the float32 gradients the backward pass rounds into each module's output tensor,
    collected by a monitor hook (the last rounding of a tensor used twice is its sum).
    """
    from . import ops
    from .tensor import Tensor, tensor

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

    def widen(x):
        """Float data as a float32 tensor; anything else (integer class targets) unchanged."""
        if isinstance(x, Tensor):
            return tensor(x, "float32", backend=x.backend)
        arr = np.asarray(x) if isinstance(x, np.ndarray | list | float) else None
        if arr is not None and arr.dtype.kind == "f":
            return tensor(arr, "float32", backend=be)
        return x

    x0 = widen(inputs[0])
    rest = [widen(x) for x in inputs[1:]]

    # Name each module's output so the backward rounding into it can be told apart.
    owners: dict[str, list[str]] = {}
    named = list(work.named_modules())

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

    for path, mod in named:
        wrap(path, mod)

    prev_auto, prev_grad = ops._autocast_fmt, _tensor._grad_enabled
    ops._autocast_fmt, _tensor._grad_enabled = None, True
    try:
        with monitor(capture=lambda op, direction, scope, target, fmt:
                     direction == "backward" and target.startswith(_OUT_MARK)) as m:
            loss = loss_fn(work(x0), *rest)
            if not isinstance(loss, Tensor):
                raise TypeError(f"loss_fn must return a Tensor, got {type(loss).__name__}")
            loss.backward()
    finally:
        ops._autocast_fmt, _tensor._grad_enabled = prev_auto, prev_grad

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
    order = {path: i for i, (path, _) in enumerate(named)}
    grads = dict(sorted(grads.items(), key=lambda kv: (order.get(kv[0][0], len(order)), kv[0][1] != "activation",
                                                         kv[0][2])))
    return GradientCapture(grads=grads, formats=fnames, scale=float(scale), loss=loss.item())

