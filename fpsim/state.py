"""Program-wide state, owned here and nowhere else: grad mode, the autocast format, the module
scope, the rounding hooks, the generator stochastic rounding draws from - and, for what fpsim
starts (worker processes, notebook kernels), environment variables set for a while (:func:`environment`) -
and the number of BLAS threads fpsim's own matrix products run on (:func:`blas_threads`, :func:`pinned_blas`).

Every other module reads and changes this state through the functions below (context managers
restore it on the way out, exceptions included); nothing else keeps a global of its own.

The modes - grad mode, autocast, tensor-core emulation, the engine's rounding mode, the arithmetic,
the module scope, the hooks and a ``seeded`` generator - are context-local (:mod:`contextvars`, as
``decimal.localcontext``): a mode set in one thread (or asyncio task) is not seen by another, so two
threads in two modes each get their own bits.  A thread started with ``threading.Thread`` begins
from the defaults (Python 3.11 gives it an empty context, like PyTorch's thread-local grad mode);
``contextvars.copy_context().run(fn)`` hands it the caller's modes.  Process-wide by nature: the
generator :func:`manual_seed` resets, the environment variables and the BLAS thread count.

Hooks are how the instruments (``fpsim.monitor``, the experiments' counters) see what rounding
did: the engine's one rounding point (``tensor.round_result``) calls each hook with one
:class:`RoundingEvent`.  With no hook registered it pays one truth test of :data:`HOOKS`.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
from typing import NamedTuple

import numpy as np

from .checks import check_integer

__all__ = [
    "RoundingEvent", "HOOKS", "add_hook", "remove_hook", "hooked", "is_grad_enabled", "set_grad_enabled",
    "no_grad", "autocast_format", "autocast_as", "tensor_core", "tensor_core_as", "scope", "current_scope",
    "backward_scope", "event_scope", "manual_seed", "seeded", "default_rng", "EngineRounding",
    "ENGINE_ROUNDING", "engine_rounding", "rounding_as", "blas_threads", "set_blas_threads", "pinned_blas",
    "blas_call", "ARITHMETICS", "arithmetic", "arithmetic_mode",
]


class RoundingEvent(NamedTuple):
    """One rounding the engine performed (immutable; a named tuple because one is built for every
    rounding while a hook is installed, and a frozen dataclass costs ~5x more to build).

    - ``op``: the op that rounded (``"matmul"``, ``"fp8.cast"``, ``"adam.exp_avg"``, ...);
    - ``direction``: ``"forward"``, ``"backward"`` or ``"update"`` (optimizer / master copy);
    - ``scope``: the module path it happened in (``"net.0"``), ``""`` outside any module;
    - ``target``: what was rounded where the op alone does not say (a parameter's name, ``"input"``);
    - ``fmt``: the format rounded into;
    - ``exact32``: the float32 value before rounding (None for ops whose result is exact);
    - ``stored``: the value stored, in ``fmt``'s storage on the tensor's backend;
    - ``backend``: that backend (its ``xp`` is the array module of ``exact32`` and ``stored``);
    - ``inputs``: what the value was computed from, where the engine knows it - going forward the
      op's input Tensors; going backward the incoming gradient (an array), the node's output and
      its inputs (Tensors); ``()`` where it is not given (optimizer updates, fp8 casts).  The
      non-finite tracer reads it to tell an op that MADE an inf or NaN from one that passed it on.
    """

    op: str
    direction: str
    scope: str
    target: str
    fmt: object
    exact32: object
    stored: object
    backend: object
    inputs: tuple = ()


class ContextStack:
    """A read-only, list-like view (truth test, ``len``, ``[i]``, iteration, ``in``) of a context
    variable holding a tuple, innermost last.  The engine imports the view once (``from .state import
    HOOKS``) and each read sees the value of the context reading it."""

    __slots__ = ("_var",)

    def __init__(self, var: contextvars.ContextVar):
        self._var = var

    def __bool__(self) -> bool:
        return bool(self._var.get())

    def __len__(self) -> int:
        return len(self._var.get())

    def __getitem__(self, i):
        return self._var.get()[i]

    def __iter__(self):
        return iter(self._var.get())

    def __contains__(self, item) -> bool:
        return item in self._var.get()  # identity or ==, as a list's ``in``

    def __eq__(self, other) -> bool:  # compares as the list it stands for: ``state.HOOKS == []``
        if isinstance(other, (list, tuple, ContextStack)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None

    def __repr__(self) -> str:
        return f"ContextStack({self._var.name}: {list(self._var.get())!r})"


class _Pushed:
    """A context manager that pushes ``value`` onto the tuple in ``var`` for the block - in this
    context only - and pops it on exit, exceptions included.  The same object may be entered again,
    nested or one block after another, and from several threads (each exit undoes its own context's
    innermost entry)."""

    __slots__ = ("_var", "_value", "_tokens")

    def __init__(self, var: contextvars.ContextVar, value):
        self._var, self._value, self._tokens = var, value, []

    def __enter__(self):
        self._tokens.append(self._var.set(self._var.get() + (self._value,)))
        return self._value

    def __exit__(self, *exc) -> bool:
        for i in range(len(self._tokens) - 1, -1, -1):
            try:
                self._var.reset(self._tokens[i])
            except ValueError:  # entered in another context (thread): that one's exit undoes it
                continue
            del self._tokens[i]
            return False
        raise RuntimeError(f"{self._var.name}: exited a block that was not entered in this thread / context")


# The hooks, called in order with one RoundingEvent, of this context only (a monitor started in one
# thread hears that thread's roundings).  ``from .state import HOOKS`` is a view that always reads
# the current context; change it through add_hook / remove_hook.
_hooks = contextvars.ContextVar("fpsim_hooks", default=())
HOOKS = ContextStack(_hooks)


def add_hook(fn) -> None:
    """Call ``fn(event)`` for every rounding in this context (thread) from now on."""
    if not callable(fn):
        raise TypeError(f"a hook must be callable, got {type(fn).__name__}")
    _hooks.set(_hooks.get() + (fn,))


def remove_hook(fn) -> None:
    """Stop calling ``fn`` (the last registration of it); no error if it is not registered."""
    hooks = _hooks.get()
    for i in range(len(hooks) - 1, -1, -1):
        if hooks[i] is fn:
            _hooks.set(hooks[:i] + hooks[i + 1:])
            return


@contextlib.contextmanager
def hooked(fn):
    """``fn`` is a hook inside the block."""
    add_hook(fn)
    try:
        yield fn
    finally:
        remove_hook(fn)


# --------------------------------------------------------------------------------- grad mode

_grad_enabled = contextvars.ContextVar("fpsim_grad_enabled", default=True)


def is_grad_enabled() -> bool:
    """Whether ops record a graph in this context (True unless inside ``no_grad``)."""
    return _grad_enabled.get()


class set_grad_enabled(_Pushed, contextlib.ContextDecorator):  # noqa: N801 - PyTorch's name
    """Inside (this thread / context only), ops record a graph (``True``) or not (``False``).  One
    object may be entered again, nested or one block after another, from several threads, and
    decorate a function (as ``torch.no_grad()``)."""

    def __init__(self, flag: bool):
        super().__init__(_grad_enabled, bool(flag))

    def __enter__(self) -> None:  # sets the flag (where _Pushed pushes onto a tuple)
        self._tokens.append(self._var.set(self._value))


def no_grad():
    """Inside (this thread / context only), ops record no graph (for evaluation and optimizer updates)."""
    return set_grad_enabled(False)


def _set_for_block(var: contextvars.ContextVar, value):
    """Set ``var`` to ``value`` for a ``with`` block (a generator's body; ``as`` gives ``value``),
    restoring it after."""
    token = var.set(value)
    try:
        yield value
    finally:
        var.reset(token)


# --------------------------------------------------------------------------------- autocast

_autocast_fmt = contextvars.ContextVar("fpsim_autocast", default=None)  # a Format, or None: autocast off


def autocast_format():
    """The format autocast narrows matmul-like ops to in this context, or None outside autocast."""
    return _autocast_fmt.get()


@contextlib.contextmanager
def autocast_as(fmt):
    """Inside (this thread / context only), autocast's format is ``fmt`` (a Format, or None: off)."""
    yield from _set_for_block(_autocast_fmt, fmt)


# --------------------------------------------------------------------------------- tensor core

# (architecture name, promote_every) while matmuls run as tensor cores, else None
_tensor_core = contextvars.ContextVar("fpsim_tensor_core", default=None)


def tensor_core():
    """The (architecture, promote_every) that matmul and linear accumulate as in this context, or
    None (the engine's own float32 sum)."""
    return _tensor_core.get()


@contextlib.contextmanager
def tensor_core_as(setting):
    """Inside (this thread / context only), matmul-like ops accumulate as ``setting`` =
    (architecture, promote_every), or in float32 (``None``); ``fpsim.tensorcore.emulate`` is the
    public door."""
    yield from _set_for_block(_tensor_core, setting)


# --------------------------------------------------------------------------------- arithmetic

ARITHMETICS = ("exact", "library")
_ARITH_ENV = "FPSIM_ARITHMETIC"
_arith_default = os.environ.get(_ARITH_ENV, "").strip().lower() or "exact"  # read once; checked on use
_arithmetic = contextvars.ContextVar("fpsim_arithmetic", default=None)


def arithmetic_mode() -> str:
    """How the CPU backends compute products, sums, exp, log, tanh and pow: ``"exact"`` (the
    default: fpsim's own definitions, :mod:`fpsim.numerics` - exact sums rounded once, correctly
    rounded functions, the same bits on every machine) or ``"library"`` (numpy's and the BLAS's
    own float32 arithmetic: faster, but the last bits follow the CPU's BLAS kernel, numpy's SIMD
    loops and the BLAS thread count - outside fpsim's promise).  The environment variable
    ``FPSIM_ARITHMETIC`` sets the default for a process; :func:`arithmetic` for a block."""
    mode = _arithmetic.get()
    if mode is None:
        if _arith_default not in ARITHMETICS:
            raise ValueError(f"the environment variable {_ARITH_ENV}={_arith_default!r} names no arithmetic; "
                             f"known: {', '.join(ARITHMETICS)}")
        return _arith_default
    return mode


@contextlib.contextmanager
def arithmetic(mode: str):
    """Inside the block (this thread / task only: a context variable), the CPU backends compute
    with ``mode`` = ``"exact"`` or ``"library"`` (:func:`arithmetic_mode` says what each means)."""
    if not isinstance(mode, str) or mode.lower() not in ARITHMETICS:
        raise ValueError(f"arithmetic: mode must be one of {', '.join(ARITHMETICS)}, got {mode!r}")
    yield from _set_for_block(_arithmetic, mode.lower())


# --------------------------------------------------------------------------------- scope

_scope = contextvars.ContextVar("fpsim_scope", default="")  # the module path being called, "net.0"
_bwd_scope = contextvars.ContextVar("fpsim_backward_scope", default="")  # the node whose backward runs


@contextlib.contextmanager
def scope(name: str):
    """Ops created inside are attributed to module ``name`` below the current path (``Module.__call__``
    uses this); an empty name adds nothing to the path."""
    outer = _scope.get()
    yield from _set_for_block(_scope, f"{outer}.{name}" if outer and name else outer or name)


def current_scope() -> str:
    """The module path of the ops being created now in this context, e.g. ``"net.0"``."""
    return _scope.get()


@contextlib.contextmanager
def backward_scope(name: str):
    """Roundings inside belong to ``name``: the backward of a node created in that scope."""
    yield from _set_for_block(_bwd_scope, name)


def event_scope(direction: str) -> str:
    """The scope a rounding in ``direction`` is attributed to."""
    return _scope.get() if direction == "forward" else _bwd_scope.get()


# --------------------------------------------------------------------------------- randomness

_rng = {"process": np.random.default_rng(0)}  # the process's generator (manual_seed), as torch's
_seeded_rng = contextvars.ContextVar("fpsim_seeded_rng", default=None)  # a ``seeded`` block's, per context


def manual_seed(seed: int) -> None:
    """Reset the generator stochastic rounding uses when no ``seed``/``rng`` is passed (``fpsim.cast``,
    the optimizers' stochastic updates): the process's generator, shared by every thread - or,
    inside a :func:`seeded` block, that block's (which ends with the block, as it always did)."""
    check_integer(seed, "manual_seed: seed", 0)
    if _seeded_rng.get() is not None:
        _seeded_rng.set(np.random.default_rng(seed))
    else:
        _rng["process"] = np.random.default_rng(seed)


@contextlib.contextmanager
def seeded(seed: int):
    """Inside (this thread / context only), stochastic rounding without its own ``seed``/``rng``
    draws from a generator seeded with ``seed``; the previous generator (and its position) is
    used again on exit.  Another thread meanwhile keeps drawing from its own."""
    yield from _set_for_block(_seeded_rng, np.random.default_rng(seed))


def default_rng() -> np.random.Generator:
    """The generator stochastic rounding uses when no ``seed``/``rng`` is passed: this context's
    ``seeded`` one, else the process's."""
    rng = _seeded_rng.get()
    return _rng["process"] if rng is None else rng


# --------------------------------------------------------------------------------- engine rounding


class EngineRounding(NamedTuple):
    """How the engine rounds where an op asks for nothing special (``fpsim.rounding_mode`` sets it):
    a mode of ``fpsim.ROUNDING_MODES``, few-bit SR's ``sr_bits`` and ``sr_variant``, and the
    generator stochastic rounding draws from (None: :func:`default_rng` at the time)."""

    mode: str
    sr_bits: int | None = None
    sr_variant: str = "rne"
    rng: object = None


# The engine's rounding settings in this context, innermost last; empty means round to nearest,
# ties to even (the default, which costs the engine one truth test).  A view of a context variable
# (each thread reads its own); changed through rounding_as.
_engine_rounding = contextvars.ContextVar("fpsim_rounding_mode", default=())
ENGINE_ROUNDING = ContextStack(_engine_rounding)


def engine_rounding():
    """The engine's current :class:`EngineRounding` in this context, or None for the default (nearest)."""
    settings = _engine_rounding.get()
    return settings[-1] if settings else None


def rounding_as(setting: EngineRounding) -> _Pushed:
    """A context manager: inside (this thread / context only), the engine rounds as ``setting`` says
    (validated by ``fpsim.rounding_mode``).  ``as`` gives the setting; the object may be entered
    again, nested or one block after another."""
    if not isinstance(setting, EngineRounding):
        raise TypeError(f"rounding_as: setting must be an EngineRounding, got {type(setting).__name__}")
    return _Pushed(_engine_rounding, setting)


# --------------------------------------------------------------------------------- environment


@contextlib.contextmanager
def environment(values: dict):
    """The environment variables ``values`` set inside the block, so that a process started there
    inherits them (BLAS threads of ``compare --jobs`` workers, a lab's kernel); each comes back as
    it was - or is removed again - on exit, exceptions included."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# --------------------------------------------------------------------------------- BLAS threads
#
# fpsim runs its own products on a BLAS thread count it fixes - ``FPSIM_BLAS_THREADS`` (default 1)
# or :func:`set_blas_threads` - and hands the user's count back afterwards. Under the exact
# arithmetic (the default) the count is a speed setting only; under ``arithmetic("library")`` the
# last bits of a float32 product follow it (OpenBLAS sums K in another order at 1 thread than at 2).


def _threads_from_environment() -> int:
    text = os.environ.get("FPSIM_BLAS_THREADS", "1").strip() or "1"
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"FPSIM_BLAS_THREADS must be a whole number >= 1, got {text!r}")
    return n


_blas = {"threads": None, "depth": 0}  # the pinned count (None: not read yet); threads inside pinned_blas


def blas_threads() -> int:
    """The BLAS thread count fpsim's own matrix products run on (``FPSIM_BLAS_THREADS``, default 1).
    The bits of a float32 product depend on it, so it is fixed rather than left to the machine."""
    if _blas["threads"] is None:
        _blas["threads"] = _threads_from_environment()
    return _blas["threads"]


def set_blas_threads(n: int) -> None:
    """Run fpsim's matrix products on ``n`` BLAS threads from now on.  A run gives the same bits at
    the same ``n`` on one machine; another ``n`` may change the last bits of float32 sums.  The
    worker processes of ``fpsim compare --jobs`` are handed it; other processes read
    ``FPSIM_BLAS_THREADS``."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"set_blas_threads: n must be a whole number >= 1, got {n!r}")
    _blas["threads"] = n


def _blas_controllers() -> tuple:
    """The BLAS libraries loaded in this process that threadpoolctl can set (numpy's OpenBLAS),
    found once.  Empty when threadpoolctl finds none (a BLAS it cannot control)."""
    if "libs" not in _blas:
        try:
            from threadpoolctl import ThreadpoolController

            _blas["libs"] = tuple(ThreadpoolController().select(user_api="blas").lib_controllers)
        except Exception:  # threadpoolctl failing to read a library must not stop a computation
            _blas["libs"] = ()
    return _blas["libs"]


_pin_lock = threading.Lock()  # guards the process-wide count of threads inside pinned_blas
_pin_local = threading.local()  # this thread's nesting depth inside pinned_blas


class _PinnedBlas:
    """The context manager :func:`pinned_blas` returns (a class, not a generator: the engine enters
    one around every module call, and the nested case must cost next to nothing: one thread-local
    integer).  The first thread in saves the BLAS's thread counts and pins them; the last one out,
    whichever thread it is, hands the saved counts back."""

    __slots__ = ()

    def __enter__(self):
        depth = getattr(_pin_local, "depth", 0)
        _pin_local.depth = depth + 1
        if depth == 0:
            with _pin_lock:
                if _blas["depth"] == 0:
                    n = blas_threads()
                    libs = _blas_controllers()
                    _blas["before"] = [lib.get_num_threads() for lib in libs]
                    for lib, old in zip(libs, _blas["before"]):
                        if old != n:
                            lib.set_num_threads(n)
                _blas["depth"] += 1  # threads inside
        return self

    def __exit__(self, *exc):
        _pin_local.depth -= 1
        if _pin_local.depth == 0:
            with _pin_lock:
                _blas["depth"] -= 1
                if _blas["depth"] == 0:
                    n = blas_threads()
                    for lib, old in zip(_blas_controllers(), _blas.pop("before")):
                        if old is not None and old != n:
                            lib.set_num_threads(old)
        return False


_PINNED = _PinnedBlas()


def pinned_blas() -> _PinnedBlas:
    """Inside, numpy's BLAS runs on :func:`blas_threads` threads; the count it had before comes back
    on exit, exceptions included.  Nested uses cost one integer test, so the engine pins once
    around a module call or a backward walk and every product inside pays nothing more.  (The
    count is process-wide: Python threads running numpy products of their own meanwhile get it too.)"""
    return _PINNED


def blas_call(fn, *args):
    """``fn(*args)`` with numpy's BLAS pinned (:func:`pinned_blas`); inside a pinned block a plain call."""
    if getattr(_pin_local, "depth", 0):
        return fn(*args)
    with _PINNED:
        return fn(*args)
