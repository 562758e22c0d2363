"""What the labs' self-check cells are built from.

A check calls the learner's function through :func:`expect`, which compares the result with
the expected value and, when they differ, fails with one sentence that names the call, what
was expected and what came back (plus, where it helps, the likely reason)::

    exercise1(1.0, 'float16'): expected 0.00048828125, got 0.0009765625 - that is the whole gap, not half of it

A check cell hands its test to :func:`judge` (through ``fpsim.labs.selfcheck``), which never
raises: it prints the verdict - passed, not attempted yet, or not right yet with the sentence
above - and records it, so that one wrong answer does not stop the rest of the lab, the lab's
last cell can print :func:`summary`, and the tests read :func:`last_verdict` to see that every
check spoke and what it said.

``forbid=`` lists library functions that already compute the answer (``fpsim.ulp`` in an
exercise that asks you to derive the ulp): while the learner's function runs, a call to one of
them from the learner's own code fails the check instead of passing it.  Calls made inside
numpy, ml_dtypes or fpsim itself go through untouched, so ``fpsim.round_to`` may still use
whatever it needs.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import math
import re
import sys
import textwrap
from collections.abc import Callable, Iterable
from typing import NamedTuple

import numpy as np

from ..checks import check_integer
from ..textable import text_table

__all__ = ["CheckFailed", "expect", "forbid", "fail", "describe", "Verdict", "judge", "last_verdict", "verdicts",
           "summary"]

WIDTH = 100  # what a verdict or the summary prints fits in this many characters

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


# ---------------------------------------------------------------------------- verdicts

PASSED, FAILED, UNANSWERED, NOT_RUN = "passed", "not right yet", "not attempted", "not run"


class Verdict(NamedTuple):
    """What one run of a check cell found: the lab (or None), the check's name ("Try it 2"), its
    status (``"passed"``, ``"not right yet"``, ``"not attempted"``), the one-line reason of a
    wrong answer ("exercise2(...): expected 1.0, got 2.0 - why"; "" otherwise), and a serial
    number that grows with every verdict, so a reader can tell a fresh one from an old one."""

    lab: int | None
    name: str
    status: str
    message: str
    serial: int


class _Record:
    """The verdicts of this Python process, in the order the checks ran (a notebook's log, like
    its printed output; not a mode of any computation)."""

    def __init__(self):
        self.items: list[Verdict] = []
        self.serials = itertools.count(1)

    def add(self, lab, name, status, message="") -> Verdict:
        v = Verdict(None if lab is None else int(lab), name, status, message, next(self.serials))
        self.items.append(v)
        return v


_RECORD = _Record()


def last_verdict() -> Verdict | None:
    """The verdict the most recent check gave, or None before any check ran."""
    return _RECORD.items[-1] if _RECORD.items else None


def verdicts(lab: int | None = None) -> dict[str, Verdict]:
    """The latest verdict of each check (of lab ``lab`` when given), by check name, in the order
    the checks first ran.  A check cell run again replaces its earlier verdict."""
    latest: dict[str, Verdict] = {}
    for v in _RECORD.items:
        if lab is None or v.lab == int(lab):
            latest[v.name] = v
    return latest


def _reveal_hint(name: str, lab) -> str:
    """How to see the solution: ``reveal(16, 2)`` when the lab is given and ``name`` ends in the
    exercise's number ("Try it 2"), else the call with its two arguments named."""
    number = re.search(r"(\d+)\s*$", name)
    if lab is None or number is None:
        return "reveal the solution (fpsim.labs.solutions.reveal(lab, exercise))"
    return f"reveal the solution with reveal({int(lab)}, {int(number[1])})"


def _wrapped(text: str) -> str:
    """``text`` in lines of at most :data:`WIDTH` characters, broken between words only (a number
    is never split), the continuation lines indented."""
    return "\n".join(textwrap.wrap(text, WIDTH, subsequent_indent="    ", break_long_words=False,
                                    break_on_hyphens=False))


def _outcome(test: Callable) -> tuple[str, str]:
    """Run ``test()``; its status and, for a wrong answer, the one-line reason."""
    try:
        test()
    except Unanswered:
        return UNANSWERED, ""
    except AssertionError as e:  # CheckFailed, or a plain assert in a check
        return FAILED, " ".join(str(e).split()) or "a check failed without saying why"
    except Exception as e:  # the check itself stumbled on the answer (a call outside expect)
        return FAILED, " ".join(f"the check raised {type(e).__name__}: {e}".split())
    return PASSED, ""


def judge(name: str, test: Callable, lab: int | None = None) -> Verdict:
    """Run ``test()`` (a function that checks the learner's answer with :func:`expect`), print its
    verdict in lines of at most :data:`WIDTH` characters, record it and return it.  Never raises
    for a wrong answer: the rest of the lab runs on.

    Passed: "Try it 1: passed".  ``test`` raised :class:`Unanswered`: "not attempted yet", with the
    ``reveal`` call that shows the solution (naming the lab when ``lab`` is given and the
    exercise from ``name``).  It raised anything else: "not right yet" and the reason, one
    sentence (what was expected, what came back), printed to stderr so that it stands out.
    """
    status, message = _outcome(test)
    verdict = _RECORD.add(lab, name, status, message)
    if status == PASSED:
        print(f"{name}: passed")
    elif status == UNANSWERED:
        print(_wrapped(f"{name}: not attempted yet - write your answer above, or {_reveal_hint(name, lab)}"))
    else:
        print(_wrapped(f"{name}: not right yet - {message}"), file=sys.stderr)
    return verdict


def _exercise_count(lab: int) -> int:
    """How many exercises lab ``lab`` has: the ``exerciseN`` of its reference solutions."""
    mod = importlib.import_module(f"fpsim.labs.solutions.lab{int(lab):02d}")
    return len([n for n in vars(mod) if re.fullmatch(r"exercise\d+", n)])


def summary(lab: int) -> None:
    """Print where lab ``lab``'s checks stand: one row per exercise ("Try it 1", ...)
    with its latest verdict - passed, not right yet (and why, shortened), not attempted, or not
    run (its check cell never ran) - and a count of those passed.  Every line fits in
    :data:`WIDTH` characters.  Returns nothing, so a cell ending in ``summary(12)`` shows the table
    once, not again as an escaped string."""
    check_integer(lab, "lab (a lab's number)", 1)
    found = verdicts(lab)
    names = [f"Try it {i}" for i in range(1, _exercise_count(lab) + 1)]
    names += [n for n in found if n not in names]
    rows = []
    for n in names:
        v = found.get(n)
        status = v.status if v else NOT_RUN
        why = textwrap.shorten(v.message, WIDTH - 30, placeholder=" ...") if v and v.message else ""
        rows.append([n, status + (f": {why}" if why else "")])
    passed = sum(1 for v in found.values() if v.status == PASSED)
    text = "\n".join([f"lab {lab:02d}: {passed} of {len(names)} checks passed", *text_table(["check", "verdict"], rows)])
    print(text)
