"""``Tensor``: an array stored in a float format, and the graph that differentiates it.

A tensor's ``data`` lives in its format's storage dtype (``np.float16``,
``ml_dtypes.bfloat16``, ...), so ``nbytes`` is the real memory.  Ops (``fpsim.ops``) compute in
float32 and hand their float32 result to :func:`round_result`, the ONE place where the engine
rounds: into the output's format going forward, into each input's ``grad_fmt`` going
backward.  Monitors (``monitor.py``) watch that one place.

``backward`` walks the graph iteratively (no recursion limit), in reverse topological order.
Each op's backward returns float32 gradients for its inputs; each is rounded once into the
input's gradient format, and contributions from several uses are added in float32 and
rounded again, as PyTorch accumulates a tensor's gradient in the tensor's own dtype.
"""

from __future__ import annotations

import numbers

import numpy as np

from . import state
from .backend import Backend, get_backend
from .formats import TENSOR_FORMATS, Format, cast, get_block_format, get_format, promote, tensor_format
from .state import HOOKS, RoundingEvent, backward_scope, event_scope, is_grad_enabled, no_grad

__all__ = ["Tensor", "tensor", "no_grad", "is_grad_enabled", "promote", "round_result", "make_node", "Exact",
           "block_format_named", "storage_format"]



def block_format_named(fmt) -> str | None:
    """The canonical name of the block-scaled format ``fmt`` names (``"mxfp8"`` -> ``"mxfp8_e4m3"``,
    in any case), or None when it names none - what an error about a tensor format says instead
    of 'unknown format' when a block format's name is given where a tensor format goes."""
    try:
        return get_block_format(fmt).name
    except (ValueError, TypeError, AttributeError):
        return None


def storage_format(fmt, owner: str = "Tensor", what: str = "fmt") -> Format:
    """:func:`fpsim.formats.tensor_format` (a format a Tensor can be stored in), where a block-scaled
    format's name (mxfp8, nvfp4, fp8_block) is refused in one line saying it is one and where block
    scaling goes - ``fpsim.quantize`` for an array, ``lowp.convert`` for a model's Linear layers -
    prefixed ``owner: what``; every other refusal is tensor_format's own."""
    try:
        return tensor_format(fmt)
    except ValueError:
        block = block_format_named(fmt)
        if block is None:
            raise
        raise ValueError(f"{owner}: {what} {fmt!r} is the block-scaled format {block}: a tensor is stored in a "
                         f"tensor format ({', '.join(TENSOR_FORMATS)}); quantize an array into it with "
                         f"fpsim.quantize(x, {block!r}), or train a model's Linear layers block-scaled with "
                         f"fpsim.lowp.convert(model, fpsim.lowp.BlockScaling({block!r}))") from None


def round_result(x32, fmt: Format, backend: Backend, op: str, direction: str, target: str = "", *,
                 saturate: bool = False, rounding: str | None = None, rng=None, stored=None, inputs=()):
    """Round a float32 result into ``fmt`` (one rounding) and tell any monitor about it.

    ``rounding=None`` (what the ops pass) is the engine's rounding: to nearest, ties to even, or
    what an enclosing ``fpsim.rounding_mode(...)`` says (every mode of ``fpsim.ROUNDING_MODES``,
    few-bit SR included; the backend's ``round`` applies it); ``"stochastic"`` given here rounds
    stochastically whatever the engine's mode.

    ``saturate=True`` clamps to +-fmt.max first, as fp8 hardware conversions do (monitors still
    get the unclamped value, so they count the clamp as an overflow); ``rounding="stochastic"``
    rounds with numpy generator ``rng`` (see ``fpsim.formats.cast``) - both used by fp8 and the optimizers.
    ``stored``: the result already in fmt's storage, for ops whose result is exact (relu picks
    stored values): nothing is rounded, monitors still see it; ``x32`` may then be None (the
    hooks get ``exact32=None``: the stored value is the exact one).  ``inputs``: what ``x32`` was
    computed from, handed to the hooks only (``RoundingEvent.inputs``).
    """
    if stored is not None:
        out = stored
    elif saturate or (rounding is not None and rounding != "nearest"):
        out = _round_special(x32, fmt, backend, saturate, rounding or "nearest", rng)
    else:
        out = backend.round(x32, fmt)
    if HOOKS:
        event = RoundingEvent(op, direction, event_scope(direction), target, fmt, x32, out, backend, inputs)
        for h in HOOKS:
            h(event)
    return out


def _round_special(x32, fmt: Format, backend: Backend, saturate: bool, rounding: str, rng):
    if rounding == "nearest":  # so saturate is True
        return backend.round_saturating(x32, fmt)
    if saturate:
        x32 = backend.clip_to_max(x32, fmt)
    vals = cast(backend.to_numpy(x32), fmt, rounding, rng=rng).astype(np.float32)
    return backend.round(backend.asarray(vals), fmt)  # already on fmt's grid: stored exactly


def make_node(out32, fmt: Format, parents: tuple, backward, op: str, *, stored=None, inputs=None) -> Tensor:
    """The one way an op makes its output node: ``out32`` (float32) rounded once into ``fmt`` by
    :func:`round_result` (or ``stored``, a result already exact in fmt), on the first parent's
    backend, with ``backward(g32, out)`` returning one float32 gradient (or None, or an
    :class:`Exact`) per parent.  The node records its parents and backward only where grad mode is
    on and a parent requires grad.  ``inputs``: what the hooks are told the result was computed
    from (default: the parents; ``()`` tells them nothing).  The ops (``fpsim.ops``), the
    low-precision layers (``fpsim.lowp``) and unit scaling (``fpsim.nn.unit``) all use it."""
    be = parents[0].backend
    out = round_result(out32, fmt, be, op, "forward", stored=stored, inputs=parents if inputs is None else inputs)
    return Tensor._from_op(out, fmt, parents, backward, op, be)


class Exact:
    """What an op's backward returns for an input whose gradient is the incoming one moved or
    selected (reshape, transpose, relu, masked_fill): ``fn`` of the *stored* incoming gradient is
    the input's gradient, exactly, in the same format - so when the input's gradient format is
    the output's, nothing is rounded (hooks still see the value).  ``fn`` must work on any storage
    dtype: views, and selections on the bits (``ops.elementwise._select``)."""

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn


class Tensor:
    """An n-d array stored in a float format, with autograd.

    ``fmt`` is the format of ``data``; ``grad_fmt`` the format its gradient is rounded into
    (the same, unless a recipe says otherwise - fp8 training keeps gradients in e5m2).  ``data``
    in the backend's storage dtype for ``fmt`` is held as it is (its values are taken to be
    ``fmt``'s); anything else - numbers, a list, an array of another dtype - is rounded once into
    ``fmt`` first, as :func:`tensor` rounds it.
    """

    __slots__ = ("data", "fmt", "grad_fmt", "grad", "requires_grad", "backend", "name",
                 "_parents", "_backward", "_op", "_scope", "__weakref__")
    __array_ufunc__ = None  # numpy defers to our reflected operators: array * Tensor works

    def __init__(self, data, fmt=None, *, requires_grad=False, backend=None, grad_fmt=None, name=""):
        be = get_backend(backend)
        self.backend = be
        self.fmt = storage_format(fmt) if fmt is not None else get_format("float32")
        self.grad_fmt = storage_format(grad_fmt, what="grad_fmt") if grad_fmt is not None else self.fmt
        if getattr(data, "dtype", None) != be.storage_dtype(self.fmt):  # numbers, a list, another dtype:
            data = tensor(data, self.fmt, backend=be).data  # rounded once into fmt, as tensor() rounds them
        self.data = data
        self.grad: Tensor | None = None
        self.requires_grad = bool(requires_grad)
        self.name = name
        self._parents: tuple = ()
        self._backward = None
        self._op = ""
        self._scope = ""

    # -- construction helpers ------------------------------------------------------------

    @classmethod
    def _from_op(cls, data, fmt, parents, backward, op, backend):
        t = cls.__new__(cls)
        t.backend, t.fmt, t.grad_fmt, t.data, t.grad, t.name = backend, fmt, fmt, data, None, ""
        track = state.is_grad_enabled() and any([p.requires_grad for p in parents])
        t.requires_grad = track
        t._parents = parents if track else ()
        t._backward = backward if track else None
        t._op, t._scope = op, state.current_scope()
        return t

    # -- properties ------------------------------------------------------------------------

    @property
    def shape(self) -> tuple:
        return tuple(self.data.shape)

    @property
    def ndim(self) -> int:
        return self.data.ndim

    @property
    def size(self) -> int:
        return int(self.data.size)

    @property
    def dtype(self) -> np.dtype:
        """The storage dtype of the format (``np.float16``, ``ml_dtypes.bfloat16``, ...), as
        numpy and PyTorch mean it; the format record itself is ``fmt``."""
        return self.fmt.dtype

    @property
    def nbytes(self) -> int:
        """The bytes the values take in the format (2 per float16 value, 1 per fp8 value), also
        where a backend holds them in float32 arrays (``numpy-f32``; fp8 on CuPy)."""
        return self.size * self.fmt.bits // 8

    @property
    def is_leaf(self) -> bool:
        return self._backward is None

    def f32(self):
        """The exact values as a float32 array on this tensor's backend (no rounding)."""
        return self.backend.to_f32(self.data)

    def numpy(self) -> np.ndarray:
        """The values as a numpy array in the storage dtype (bfloat16 stays bfloat16)."""
        out = self.backend.to_numpy(self.data)
        if out.dtype != self.fmt.dtype:  # cupy stores bf16/fp8 in float32
            out = out.astype(self.fmt.dtype)
        return out

    def item(self) -> float:
        if self.size != 1:
            raise ValueError(f"item() needs a tensor with one element, this one has shape {self.shape}")
        return float(self.backend.to_numpy(self.f32()).reshape(()))

    def detach(self) -> Tensor:
        return Tensor(self.data, self.fmt, backend=self.backend, grad_fmt=self.grad_fmt)

    def requires_grad_(self, flag: bool = True) -> Tensor:
        self.requires_grad = flag
        return self

    def zero_grad(self) -> None:
        self.grad = None

    def __repr__(self) -> str:
        vals = np.array2string(self.backend.to_numpy(self.f32()), precision=6, threshold=20)
        extra = ", requires_grad=True" if self.requires_grad else ""
        return f"Tensor({vals}, fmt={self.fmt.name}{extra})"

    def __len__(self) -> int:
        return self.shape[0]

    # -- autograd ----------------------------------------------------------------------------

    @np.errstate(all="ignore")  # inf/NaN gradients are results (GradScaler looks for them), as in the ops' forward
    def backward(self, gradient=None, retain_graph: bool = False) -> None:
        """Accumulate d(self)/d(leaf) into every leaf's ``.grad``.

        ``gradient`` is required unless self has one element (then it is 1).  The seed is
        rounded into self's gradient format, as ``loss.backward()`` seeds with a 1 of the
        loss's dtype.

        As in PyTorch, the walk frees the graph (each node's backward and what it saved) unless
        ``retain_graph=True``; a second backward through a freed node raises RuntimeError before
        any gradient changes.  (PyTorch frees only saved tensors, so it lets a graph of nothing
        but additions, scalar products and views be walked twice; fpsim frees every node.)
        """
        if not self.requires_grad:
            raise RuntimeError("backward() on a tensor that does not require grad (no parameter led to it)")
        be = self.backend
        xp = be.xp
        if gradient is None:
            if self.size != 1:
                raise RuntimeError(
                    f"backward() without a gradient needs a scalar (one element); this tensor has shape "
                    f"{self.shape}. Pass gradient= with the same shape, or reduce it first (sum, mean).")
            seed = xp.ones(self.shape, dtype=xp.float32)
        else:
            seed = be.to_f32(gradient.data) if isinstance(gradient, Tensor) else xp.asarray(gradient, dtype=xp.float32)
            if tuple(seed.shape) != self.shape:
                raise ValueError(f"gradient shape {tuple(seed.shape)} does not match tensor shape {self.shape}")
        order = _topo_order(self)
        if any(node._backward is _freed for node in order):
            raise RuntimeError(_FREED_MESSAGE)
        # the seed is rounded into the gradient format like every stored value: the hooks see it
        grads = {id(self): round_result(seed, self.grad_fmt, be, "backward_seed", "backward", self.name)}
        wide: dict = {}  # id -> the float32 values of a gradient passed through unchanged (see _propagate)
        with state.pinned_blas():  # one fixed BLAS thread count for every product of the walk
            for node in order:
                g = grads.pop(id(node), None)
                g32 = wide.pop(id(node), None)
                if g is None:
                    continue
                if node._backward is None:  # a leaf: its gradient is kept
                    _accumulate_leaf(node, g)
                    continue
                with backward_scope(node._scope):
                    _propagate(node, g, grads, wide, g32)
        if not retain_graph:
            for node in order:
                if node._backward is not None:
                    node._backward = _freed  # drops the closure and the values it saved

    # The operators (+ - * / @ ** [] and unary -), ``to`` / ``float`` / ``half`` / ``bfloat16`` and
    # the numpy-style methods (``sum``, ``mean``, ``reshape``, ``exp``, ...) are the ops of
    # ``fpsim.ops``, bound onto this class there (``ops/__init__.py``), once they exist: tensor.py never
    # imports the ops.


_FREED_MESSAGE = ("Trying to backward through the graph a second time: its saved values were freed by the "
                  "first backward(). Specify retain_graph=True on the first call to backward through it again.")


def _freed(g, node):
    raise RuntimeError(_FREED_MESSAGE)


def _propagate(node: Tensor, g, grads: dict, wide: dict, g32=None) -> None:
    """Run one node's backward on its (stored) output gradient ``g`` and hand each parent its
    gradient, rounded once into the parent's gradient format on the parent's backend (the same
    as the node's, except across :func:`to_backend`); a parent reached twice gets the float32
    sum of both, rounded again.

    ``g32``: g's float32 values where the walk has them already; a gradient passed through
    unchanged (an add's) is handed on with its float32 values in ``wide``, so that a 16-bit
    gradient is widened once, not again by the parent (the same values: widening is exact; no
    backward writes into the g32 it is given)."""
    if g32 is None:
        g32 = node.backend.to_f32(g)
    parent_grads = node._backward(g32, node)
    ins = (g, node, *node._parents) if HOOKS else ()  # for the hooks only (the non-finite tracer)
    for p, pg in zip(node._parents, parent_grads):
        if pg is None or not p.requires_grad:
            continue
        be = p.backend
        same = p.grad_fmt is node.grad_fmt or p.grad_fmt == node.grad_fmt
        if isinstance(pg, Exact):
            if same:  # moved or selected from the stored gradient: exact, nothing to round
                r = round_result(None, p.grad_fmt, be, node._op, "backward", p.name, stored=pg.fn(g), inputs=ins)
            else:
                r = round_result(pg.fn(g32), p.grad_fmt, be, node._op, "backward", p.name, inputs=ins)
        elif pg is g32 and same:
            r = g  # passed through unchanged (add, cast to the same format): no rounding
        else:
            r = round_result(pg, p.grad_fmt, be, node._op, "backward", p.name, inputs=ins)
        r32 = g32 if r is g and be is node.backend else None
        prev = grads.get(id(p))
        if prev is not None:  # a node used twice: add in float32, round again
            prev32 = wide.pop(id(p), None)
            r = round_result((be.to_f32(prev) if prev32 is None else prev32) + (be.to_f32(r) if r32 is None else r32),
                             p.grad_fmt, be, "accumulate", "backward", p.name, inputs=(prev, r) if HOOKS else ())
            r32 = None
        grads[id(p)] = r
        if r32 is not None:
            wide[id(p)] = r32


def _topo_order(root: Tensor) -> list[Tensor]:
    """Nodes reachable from root, each after every node that uses it (iterative DFS)."""
    order, seen = [], set()
    stack = [(root, False)]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for p in node._parents:
            if p.requires_grad and id(p) not in seen:
                stack.append((p, False))
    order.reverse()
    return order


def _accumulate_leaf(leaf: Tensor, g) -> None:
    if leaf.grad is None:
        leaf.grad = Tensor(g, leaf.grad_fmt, backend=leaf.backend)
    else:  # gradients accumulate across backward calls, added in float32 and rounded once
        be = leaf.backend
        s = round_result(be.to_f32(leaf.grad.data) + be.to_f32(g), leaf.grad_fmt, be, "accumulate_grad",
                         "backward", leaf.name, inputs=(leaf.grad, g) if HOOKS else ())
        leaf.grad = Tensor(s, leaf.grad_fmt, backend=be)


def move(t: Tensor, be: Backend) -> Tensor:
    """t on backend ``be``: the same values and format, a new leaf (``Module.to`` moves its
    parameters so)."""
    return Tensor(_moved(t, be), t.fmt, requires_grad=t.requires_grad, backend=be, grad_fmt=t.grad_fmt,
                  name=t.name)


def to_backend(t: Tensor, be: Backend) -> Tensor:
    """t on backend ``be`` (``Tensor.to(backend=)``): the same values and format, nothing rounded,
    and a node of t's graph - its gradient (float32) moves back to t's backend, where it is
    stored in t's gradient format (exact: it holds that format's values already)."""
    src = t.backend

    def backward(g, out):
        return (src.asarray(be.to_numpy(g), dtype=src.xp.float32),)

    out = Tensor._from_op(_moved(t, be), t.fmt, (t,), backward, "to_backend", be)
    out.grad_fmt = t.grad_fmt
    return out


def _moved(t: Tensor, be: Backend):
    vals = t.backend.to_numpy(t.f32())
    return be.round(be.asarray(vals, dtype=be.xp.float32), t.fmt)  # exact: the values are in fmt


def tensor(data, fmt=None, *, requires_grad=False, backend=None, grad_fmt=None, rounding="nearest",
           name="") -> Tensor:
    """Make a leaf tensor: ``data`` rounded once (correctly, from float64 too) into ``fmt``.

    ``fmt`` defaults to the data's own format when it is one of fpsim's, else float32.
    """
    be = get_backend(backend)
    if isinstance(data, Tensor):
        data = data.backend.to_numpy(data.f32())
    if isinstance(data, numbers.Number) and not isinstance(data, numbers.Real):
        raise TypeError(f"expected real numbers, got {type(data).__name__}")
    if fmt is None:
        dt = getattr(data, "dtype", None)
        try:
            f = tensor_format(dt) if dt is not None else get_format("float32")
        except ValueError:
            f = get_format("float32")
    else:
        f = storage_format(fmt, "tensor")
    if be.name != "numpy" and hasattr(data, "__cuda_array_interface__"):
        data = be.to_numpy(data)
    stored = cast(data, f, rounding)  # numpy, in the format's real dtype
    if be.name != "numpy":
        stored = be.round(be.asarray(stored.astype(np.float32)), f)
    return Tensor(stored, f, requires_grad=requires_grad, backend=be, grad_fmt=grad_fmt, name=name)

