"""What the labs' self-check cells are built from.

A check calls the learner's function through :func:`expect`, which compares the result with
the expected value and, when they differ, fails with one sentence that names the call, what
was expected and what came back (plus, where it helps, the likely reason)::

    exercise1(1.0, 'float16'): expected 0.00048828125, got 0.0009765625 - that is the whole gap, not half of it

``forbid=`` lists library functions that already compute the answer (``fpsim.ulp`` in an
exercise that asks you to derive the ulp): while the learner's function runs, a call to one of
them from the learner's own code fails the check instead of passing it.  Calls made inside
numpy, ml_dtypes or fpsim itself go through untouched, so ``fpsim.round_to`` may still use
whatever it needs.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable, Iterable

import numpy as np

__all__ = ["CheckFailed", "expect", "forbid", "fail", "describe"]

# Modules whose calls into a forbidden function are the library's own business.  The reference
# solutions live inside fpsim but are held to the same rule as a learner's answer.
_LIBRARY = ("numpy", "ml_dtypes", "fpsim", "matplotlib")
_NOT_LIBRARY = ("fpsim.labs.solutions",)


class Unanswered(Exception):
    """Raised by an exercise the learner has not written yet."""


class CheckFailed(AssertionError):
    """A self-check found a wrong answer; the message says what was expected and what came back."""


class _Forbidden(CheckFailed):
    def __init__(self, name: str):
        super().__init__(f"it called {name}, which this exercise asks you to write yourself")
        self.name = name


def fail(message: str):
    """Fail a check with ``message`` (one sentence: what was expected, what came back)."""
    raise CheckFailed(message)


def describe(x, limit: int = 60) -> str:
    """A short readable form of an argument or a result, for a failure message."""
    if isinstance(x, np.ndarray):
        if x.size > 6:
            return f"an array of {x.size:,} {x.dtype} values"
        return f"np.array({x.tolist()!r}, dtype={x.dtype})" if x.dtype != np.float64 else f"np.array({x.tolist()!r})"
    if isinstance(x, float | np.floating) and not isinstance(x, bool):
        return repr(float(x)) if type(x) is float else f"{type(x).__name__}({float(x)!r})"
    if isinstance(x, list) and len(x) > 6:
        return f"a list of {len(x)} values"
    if isinstance(x, tuple):
        return "(" + ", ".join(describe(v, limit) for v in x) + ("," if len(x) == 1 else "") + ")"
    if callable(x) and hasattr(x, "__name__"):
        return x.__name__
    text = repr(x)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _same(got, want, rel: float, abs_: float) -> bool:
    if isinstance(want, np.ndarray) or isinstance(got, np.ndarray):
        g, w = np.asarray(got), np.asarray(want)
        if g.shape != w.shape or (isinstance(want, np.ndarray) and g.dtype != w.dtype):
            return False
        if rel or abs_:
            return bool(np.allclose(g.astype(np.float64), w.astype(np.float64), rtol=rel, atol=abs_, equal_nan=True))
        return bool(np.array_equal(g, w, equal_nan=True)) if g.dtype.kind == "f" else bool(np.array_equal(g, w))
    if isinstance(want, tuple | list):
        return (isinstance(got, tuple | list) and len(got) == len(want)
                and all(_same(g, w, rel, abs_) for g, w in zip(got, want)))
    if want is None:
        return got is None
    if isinstance(want, bool):
        return isinstance(got, bool | np.bool_) and bool(got) == want
    if isinstance(want, str):
        return isinstance(got, str) and got == want
    if isinstance(got, bool | np.bool_ | str) or got is None:
        return False
    try:
        g, w = float(got), float(want)
    except (TypeError, ValueError):
        return got == want
    if math.isnan(w):
        return math.isnan(g)
    if rel or abs_:
        return abs(g - w) <= max(abs_, rel * abs(w))
    return g == w


def expect(fn: Callable, *args, want, rel: float = 0.0, abs: float = 0.0, why: str = "", call: str | None = None,
           forbid: Iterable = (), show: Callable = describe, **kwargs):
    """Call ``fn(*args, **kwargs)`` (the learner's function) and require the result to be ``want``.

    Numbers compare exactly unless ``rel`` / ``abs`` give a tolerance; arrays compare shape and
    values (exactly, NaN equal to NaN); tuples element by element; ``None``, ``True``, ``False``
    and strings by identity or equality.  ``why`` is appended to the failure message: the
    misconception this case catches.  ``call`` replaces the generated description of the call.
    ``forbid``: functions the learner's code must not call (see the module docstring).
    Returns the result.  An exception from ``fn`` other than ``Unanswered`` fails the check with
    the expected value and the exception named.
    """
    label = call or f"{getattr(fn, '__name__', 'your function')}(" + ", ".join(
        [describe(a) for a in args] + [f"{k}={describe(v)}" for k, v in kwargs.items()]) + ")"
    expected = show(want)
    try:
        with _forbidden(forbid, fn):
            got = fn(*args, **kwargs)
    except Unanswered:
        raise
    except _Forbidden as e:
        raise CheckFailed(f"{label}: expected {expected}, but {e}") from None
    except Exception as e:  # the learner's code raised: say which call, and what it should have given
        raise CheckFailed(f"{label}: expected {expected}, but it raised {type(e).__name__}: {e}") from e
    if not _same(got, want, rel, abs):
        detail = (_array_difference(got, want) if isinstance(want, np.ndarray)
                  else _list_difference(got, want, rel, abs) if isinstance(want, list) else "")
        raise CheckFailed(f"{label}: expected {expected}, got {show(got)}{detail}" + (f" - {why}" if why else ""))
    return got


def _list_difference(got, want, rel, abs_) -> str:
    """The first position where two lists of the same length differ."""
    if not isinstance(got, list | tuple) or len(got) != len(want):
        return f" (a list of {len(want)} values was expected)" if not isinstance(got, list | tuple) else ""
    for i, (g, w) in enumerate(zip(got, want)):
        if not _same(g, w, rel, abs_):
            return f" (first difference at index {i}: expected {describe(w)}, got {describe(g)})"
    return ""


def _array_difference(got, want) -> str:
    """Where two arrays of the same shape and dtype differ: how many elements, and the first."""
    try:
        g = np.asarray(got)
    except Exception:  # not array-like at all: the types already say it
        return ""
    if g.shape != want.shape or g.dtype != want.dtype:
        return ""
    with np.errstate(invalid="ignore"):
        bad = ~((g == want) | (np.isnan(g) & np.isnan(want)) if g.dtype.kind == "f" else (g == want))
    idx = np.argwhere(bad)
    if not idx.size:
        return ""
    first = tuple(int(i) for i in idx[0])
    at = first[0] if len(first) == 1 else first
    return (f" ({idx.shape[0]:,} of {g.size:,} values differ; at index {at} expected {describe(want[first])}, "
            f"got {describe(g[first])})")


def _name(obj) -> str:
    mod = getattr(obj, "__module__", None) or ""
    qual = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", repr(obj))
    public = {"fpsim.formats": "fpsim", "numpy": "np"}
    mod = public.get(mod, "np" if mod.startswith("numpy") else mod)
    return f"{mod}.{qual}" if mod else qual


def _from_library(frame) -> bool:
    name = frame.f_globals.get("__name__", "") or ""
    if name.startswith(_NOT_LIBRARY):
        return False
    return name.split(".")[0] in _LIBRARY


def _tripwire(original, name):
    def tripwire(*args, **kwargs):
        if _from_library(sys._getframe(1)):
            return original(*args, **kwargs)
        raise _Forbidden(name)

    tripwire.__name__ = getattr(original, "__name__", "tripwire")
    tripwire.__wrapped_forbidden__ = original
    return tripwire


@contextlib.contextmanager
def forbid(*functions, namespace: dict | None = None):
    """While the block runs, every reference to one of ``functions`` in the modules of numpy,
    ml_dtypes, fpsim and the notebook (and in ``namespace``) is replaced by a tripwire: a call
    from outside the library raises :class:`CheckFailed` naming the function.  Restored on exit.
    A method is given as ``(cls, "name")``."""
    patches = []  # (container, key, original, is_attr)
    try:
        for item in functions:
            if isinstance(item, tuple):
                cls, attr = item
                original = cls.__dict__[attr]
                setattr(cls, attr, _tripwire(original, f"{cls.__name__}.{attr}"))
                patches.append((cls, attr, original, True))
                continue
            name = _name(item)
            trip = _tripwire(item, name)
            dicts = [vars(m) for k, m in list(sys.modules.items())
                     if m is not None and (k.split(".")[0] in _LIBRARY or k == "__main__")]
            if namespace is not None:
                dicts.append(namespace)
            seen = set()
            for d in dicts:
                if id(d) in seen:
                    continue
                seen.add(id(d))
                for key, value in list(d.items()):
                    if value is item:
                        d[key] = trip
                        patches.append((d, key, item, False))
        yield
    finally:
        for container, key, original, is_attr in reversed(patches):
            if is_attr:
                setattr(container, key, original)
            else:
                container[key] = original


def _forbidden(functions, fn):
    functions = tuple(functions)
    if not functions:
        return contextlib.nullcontext()
    return forbid(*functions, namespace=getattr(fn, "__globals__", None))
