"""Program-wide state, owned here and nowhere else: grad mode, the autocast format, the module
scope, the rounding hooks, the generator stochastic rounding draws from - and, for what fpsim
starts (worker processes, notebook kernels), environment variables set for a while (:func:`environment`).

Every other module reads and changes this state through the functions below (context managers
restore it on the way out, exceptions included); nothing else keeps a global of its own.

Hooks are how the instruments (``fpsim.monitor``, the experiments' counters) see what rounding
did: the engine's one rounding point (``tensor.round_result``) calls each hook with one
:class:`RoundingEvent`.  With no hook registered it pays one truth test of :data:`HOOKS`.
"""

from __future__ import annotations

import contextlib
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
    "scope",
    "current_scope",
    "backward_scope",
    "event_scope",
    "manual_seed",
    "seeded",
    "default_rng",
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
