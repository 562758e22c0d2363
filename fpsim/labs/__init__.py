"""Support for the Jupyter labs in ``labs/``: self-checks, sliders, reference solutions.

The notebooks hold no library logic; anything a lab needs twice lives in the package.

Exercise convention (the test suite relies on it): an exercise cell carries the tag
``exercise`` and defines ``exerciseN``; until the learner fills it in, its body is
``raise Unanswered``.  The self-check cell (tag ``check``) that follows it calls
:func:`selfcheck`, which reports "not attempted yet" for an unanswered exercise instead of
failing, so a notebook runs top to bottom either way.  A wrong answer prints "not right yet"
and one sentence that says what was expected and what came back (:func:`~fpsim.labs.checks.expect`
builds it) - it does not raise, so the rest of the lab runs - and every verdict is recorded: the
lab's last cell prints :func:`summary` (passed, not right yet, not attempted, not run).

``fpsim.labs.solutions.labNN`` holds the reference solution of every exercise; the tests keep
at least three plausible wrong answers to each (tests/labs/wrong_answers/), run every notebook as
written, then each check again with every wrong answer (its recorded verdict must be "not right
yet", saying what it expected) and with the reference solution (it must pass).
"""

from __future__ import annotations

import warnings

from .checks import PASSED, CheckFailed, Unanswered, expect, fail, forbid, judge, summary

__all__ = ["Unanswered", "CheckFailed", "selfcheck", "summary", "expect", "fail", "forbid", "slider",
           "widgets_available", "set_numpy_blas_threads", "numpy_blas_threads"]


def selfcheck(name: str, test, lab: int | None = None) -> bool:
    """Run ``test()`` (a function that checks the learner's answer with :func:`expect`) and print
    its verdict (:func:`~fpsim.labs.checks.judge`): "passed"; "not attempted yet" while the
    exercise still raises :class:`Unanswered`, with the ``reveal`` call that shows the solution
    (naming the lab when ``lab`` is given and the exercise from ``name``); or "not right yet"
    and the one-line reason.  A wrong answer does not raise, so the rest of the lab runs; the
    verdict is recorded for :func:`~fpsim.labs.checks.summary`.  True when it passed.
    """
    return judge(name, test, lab).status == PASSED


def widgets_available() -> bool:
    """Whether interactive widgets can be shown: ipywidgets is installed, this runs in a Jupyter
    kernel, and the environment variable ``FPSIM_LABS_NO_WIDGETS`` is not set (the tests set it,
    so that every slider and explorer runs its plain-code fallback, where an error shows)."""
    import os

    if os.environ.get("FPSIM_LABS_NO_WIDGETS"):
        return False
    try:
        import ipywidgets  # noqa: F401
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and hasattr(ip, "kernel")


def slider(fn, *, default, values, name="value", description=None):
    """An ipywidgets slider over ``values`` calling ``fn(value)``; without widgets
    (:func:`widgets_available`) it just calls ``fn(default)`` - the plain-code fallback the
    tests run.  Returns None either way, so the cell shows no stray object."""
    if not widgets_available():
        fn(default)
        return None
    import ipywidgets as widgets

    w = widgets.SelectionSlider(options=list(values), value=default, description=description or name,
                                continuous_update=False)
    widgets.interact(fn, **{name: w})
    return None


def set_numpy_blas_threads(n: int = 1) -> None:
    """Set the number of threads numpy's BLAS uses in this process to ``n`` (threadpoolctl): the
    count of every matrix product outside fpsim's own, which run on the count fpsim pins
    (``fpsim.blas_threads()`` reads it, ``fpsim.set_blas_threads`` sets it).

    The labs multiply matrices of a few thousand numbers.  At that size a second BLAS thread
    only adds synchronisation, and on a busy two-core machine, where the threads wait for each
    other, it made the labs' training loops about 20 times slower (measured: 51 ms against
    2.3 ms per step of the reference task).  :func:`numpy_blas_threads` tells what came of it.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    import threadpoolctl

    threadpoolctl.threadpool_limits(n, user_api="blas")


def numpy_blas_threads() -> int | None:
    """The number of threads numpy's BLAS uses in this process now (what :func:`set_numpy_blas_threads`
    set), or None where no BLAS library is found.  Not fpsim's pinned count: ``fpsim.blas_threads()``."""
    import threadpoolctl

    blas = [i for i in threadpoolctl.threadpool_info() if i.get("user_api") == "blas"]
    return int(blas[0]["num_threads"]) if blas else None


# The old names (one name per idea: fpsim.blas_threads reads fpsim's pinned count), kept until 2027-06-01.
_RENAMED = {"blas_threads": "set_numpy_blas_threads", "blas_thread_count": "numpy_blas_threads"}


def __getattr__(name: str):
    """``blas_threads`` and ``blas_thread_count``, the old names of :func:`set_numpy_blas_threads` and
    :func:`numpy_blas_threads`: deprecated (removed 2027-06-01)."""
    if name in _RENAMED:
        new = _RENAMED[name]
        warnings.warn(f"fpsim.labs.{name} is deprecated (removed 2027-06-01): use fpsim.labs.{new}",
                      DeprecationWarning, stacklevel=2)
        return globals()[new]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
