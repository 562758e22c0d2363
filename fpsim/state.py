"""Program-wide state, owned here and nowhere else: grad mode, the autocast format, the module
scope, the rounding hooks, the generator stochastic rounding draws from - and, for what fpsim
starts (worker processes, notebook kernels), environment variables set for a while (:func:`environment`) -
and the number of BLAS threads fpsim's own matrix products run on (:func:`blas_threads`, :func:`pinned_blas`).

Every other module reads and changes this state through the functions below (context managers
restore it on the way out, exceptions included); nothing else keeps a global of its own.

Hooks are how the instruments (``fpsim.monitor``, the experiments' counters) see what rounding
did: the engine's one rounding point (``tensor.round_result``) calls each hook with one
:class:`RoundingEvent`.  With no hook registered it pays one truth test of :data:`HOOKS`.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from typing import NamedTuple

import numpy as np

__all__ = [
    "RoundingEvent",
    "HOOKS",
    "add_hook",
    "remove_hook",
    "hooked",
    "is_grad_enabled",
    "set_grad_enabled",
    "no_grad",
    "autocast_format",
    "autocast_as",
    "tensor_core",
    "tensor_core_as",
    "scope",
    "current_scope",
    "backward_scope",
    "event_scope",
    "manual_seed",
    "seeded",
    "default_rng",
    "EngineRounding",
    "ENGINE_ROUNDING",
    "engine_rounding",
    "rounding_as",
    "blas_threads",
    "set_blas_threads",
    "pinned_blas",
    "blas_call",
    "ARITHMETICS",
    "arithmetic",
    "arithmetic_mode",
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


# The hooks, called in order with one RoundingEvent.  This list object is never rebound, so
# ``from .state import HOOKS`` sees every change; change it through add_hook / remove_hook.
HOOKS: list = []


def add_hook(fn) -> None:
    """Call ``fn(event)`` for every rounding from now on."""
    if not callable(fn):
        raise TypeError(f"a hook must be callable, got {type(fn).__name__}")
    HOOKS.append(fn)


def remove_hook(fn) -> None:
    """Stop calling ``fn`` (the last registration of it); no error if it is not registered."""
    for i in range(len(HOOKS) - 1, -1, -1):
        if HOOKS[i] is fn:
            del HOOKS[i]
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

_grad_enabled = True


def is_grad_enabled() -> bool:
    return _grad_enabled


@contextlib.contextmanager
def set_grad_enabled(flag: bool):
    """Inside, ops record a graph (``True``) or not (``False``)."""
    global _grad_enabled
    prev, _grad_enabled = _grad_enabled, bool(flag)
    try:
        yield
    finally:
        _grad_enabled = prev


def no_grad():
    """Inside, ops record no graph (for evaluation and optimizer updates)."""
    return set_grad_enabled(False)


# --------------------------------------------------------------------------------- autocast

_autocast_fmt = None  # a Format, or None when autocast is off


def autocast_format():
    """The format autocast narrows matmul-like ops to, or None outside autocast."""
    return _autocast_fmt


@contextlib.contextmanager
def autocast_as(fmt):
    """Inside, autocast's format is ``fmt`` (a Format, or None to switch autocast off)."""
    global _autocast_fmt
    prev, _autocast_fmt = _autocast_fmt, fmt
    try:
        yield
    finally:
        _autocast_fmt = prev


# --------------------------------------------------------------------------------- tensor core

_tensor_core = None  # (architecture name, promote_every) while matmuls run as tensor cores, else None


def tensor_core():
    """The (architecture, promote_every) that matmul and linear accumulate as, or None (float32 BLAS)."""
    return _tensor_core


@contextlib.contextmanager
def tensor_core_as(setting):
    """Inside, matmul-like ops accumulate as ``setting`` = (architecture, promote_every), or in
    float32 (``None``); ``fpsim.tensorcore.emulate`` is the public door."""
    global _tensor_core
    prev, _tensor_core = _tensor_core, setting
    try:
        yield
    finally:
        _tensor_core = prev


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
    token = _arithmetic.set(mode.lower())
    try:
        yield mode.lower()
    finally:
        _arithmetic.reset(token)


# --------------------------------------------------------------------------------- scope

_scope: list[str] = []  # names of the modules being called, outermost first
_bwd_scope = ""  # the scope of the graph node whose backward is running


@contextlib.contextmanager
def scope(name: str):
    """Ops created inside are attributed to module ``name`` (``Module.__call__`` uses this)."""
    _scope.append(name)
    try:
        yield
    finally:
        _scope.pop()


def current_scope() -> str:
    """The module path of the ops being created now, e.g. ``"net.0"``."""
    return ".".join(filter(None, _scope))


@contextlib.contextmanager
def backward_scope(name: str):
    """Roundings inside belong to ``name``: the backward of a node created in that scope."""
    global _bwd_scope
    prev, _bwd_scope = _bwd_scope, name
    try:
        yield
    finally:
        _bwd_scope = prev


def event_scope(direction: str) -> str:
    """The scope a rounding in ``direction`` is attributed to."""
    return current_scope() if direction == "forward" else _bwd_scope


# --------------------------------------------------------------------------------- randomness

_rng = np.random.default_rng(0)


def manual_seed(seed: int) -> None:
    """Reset the generator stochastic rounding uses when no ``seed``/``rng`` is passed (``fpsim.cast``,
    the optimizers' stochastic updates)."""
    global _rng
    _rng = np.random.default_rng(seed)


@contextlib.contextmanager
def seeded(seed: int):
    """Inside, stochastic rounding without its own ``seed``/``rng`` draws from a generator seeded
    with ``seed``; the previous generator (and its position) comes back on exit."""
    global _rng
    prev, _rng = _rng, np.random.default_rng(seed)
    try:
        yield
    finally:
        _rng = prev


def default_rng() -> np.random.Generator:
    """The generator stochastic rounding uses when no ``seed``/``rng`` is passed."""
    return _rng


# --------------------------------------------------------------------------------- engine rounding


class EngineRounding(NamedTuple):
    """How the engine rounds where an op asks for nothing special (``fpsim.rounding_mode`` sets it):
    a mode of ``fpsim.ROUNDING_MODES``, few-bit SR's ``sr_bits`` and ``sr_variant``, and the
    generator stochastic rounding draws from (None: :func:`default_rng` at the time)."""

    mode: str
    sr_bits: int | None = None
    sr_variant: str = "rne"
    rng: object = None


# The engine's rounding settings, innermost last; empty means round to nearest, ties to even (the
# default, which costs the engine one truth test).  Never rebound; changed through rounding_as.
ENGINE_ROUNDING: list = []


def engine_rounding():
    """The engine's current :class:`EngineRounding`, or None for the default (nearest)."""
    return ENGINE_ROUNDING[-1] if ENGINE_ROUNDING else None


@contextlib.contextmanager
def rounding_as(setting: EngineRounding):
    """Inside, the engine rounds as ``setting`` says (validated by ``fpsim.rounding_mode``)."""
    ENGINE_ROUNDING.append(setting)
    try:
        yield setting
    finally:
        ENGINE_ROUNDING.pop()


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
# An optimised BLAS does not give the same float32 bits for the same ``a @ b`` at every thread
# count: OpenBLAS picks other kernels and another order of the K sum at 1 thread than at 2 (seven
# of eight GEMM shapes of the reference task and the MLP step differed here).  So fpsim runs
# its OWN products on a thread count it fixes - ``FPSIM_BLAS_THREADS`` (default 1) or
# :func:`set_blas_threads` - and hands the user's count back afterwards: the same run gives
# the same bits whatever OPENBLAS_NUM_THREADS / OMP_NUM_THREADS say, whatever --jobs or the load.
# (The bits still depend on the BLAS build and the CPU kernel it picks, e.g. Haswell vs SkylakeX.)


def _threads_from_environment() -> int:
    text = os.environ.get("FPSIM_BLAS_THREADS", "1").strip() or "1"
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"FPSIM_BLAS_THREADS must be a whole number >= 1, got {text!r}")
    return n


_blas = {"threads": None, "depth": 0}  # the pinned count (None: not read yet); how deep inside pinned_blas


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


class _PinnedBlas:
    """The context manager :func:`pinned_blas` returns (a class, not a generator: the engine enters
    one around every module call, and the nested case must cost next to nothing)."""

    __slots__ = ("_before",)

    def __enter__(self):
        if _blas["depth"] == 0:
            n = blas_threads()
            libs = _blas_controllers()
            self._before = [lib.get_num_threads() for lib in libs]
            for lib, old in zip(libs, self._before):
                if old != n:
                    lib.set_num_threads(n)
        _blas["depth"] += 1
        return self

    def __exit__(self, *exc):
        _blas["depth"] -= 1
        if _blas["depth"] == 0:
            n = blas_threads()
            for lib, old in zip(_blas_controllers(), self._before):
                if old is not None and old != n:
                    lib.set_num_threads(old)
        return False


def pinned_blas() -> _PinnedBlas:
    """Inside, numpy's BLAS runs on :func:`blas_threads` threads; the count it had before comes back
    on exit, exceptions included.  Nested uses cost one integer test, so the engine pins once
    around a module call or a backward walk and every product inside pays nothing more.  (The
    count is process-wide: Python threads running numpy products of their own meanwhile get it too.)"""
    return _PinnedBlas()


def blas_call(fn, *args):
    """``fn(*args)`` with numpy's BLAS pinned (:func:`pinned_blas`); inside a pinned block a plain call."""
    if _blas["depth"]:
        return fn(*args)
    with pinned_blas():
        return fn(*args)
