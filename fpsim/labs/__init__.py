"""Support for the Jupyter labs in ``labs/``: self-checks, sliders, reference solutions.

The notebooks hold no library logic; anything a lab needs twice lives in the package.

Exercise convention (the test suite relies on it): an exercise cell carries the tag
``exercise`` and defines ``exerciseN``; until the learner fills it in, its body is
``raise Unanswered``.  The self-check cell (tag ``check``) calls :func:`selfcheck`, which
reports "not attempted yet" for an unanswered exercise instead of failing, so a notebook runs
top to bottom either way; a wrong answer fails its assertions.  The tests run every notebook
as written and again with each exercise cell replaced by the reference solution from
``fpsim.labs.solutions.labNN``.
"""

from __future__ import annotations

__all__ = ["Unanswered", "selfcheck", "slider"]


class Unanswered(Exception):
    """Raised by an exercise the learner has not written yet."""


def selfcheck(name: str, test) -> bool:
    """Run ``test()`` (a function holding assertions about the learner's answer).

    Prints "passed" when every assertion holds, "not attempted yet" when the exercise still
    raises :class:`Unanswered`; a wrong answer raises AssertionError with the reason.
    """
    try:
        test()
    except Unanswered:
        print(f"{name}: not attempted yet - write your answer above, or reveal the solution "
              f"(fpsim.labs.solutions.reveal(lab, exercise))")
        return False
    print(f"{name}: passed")
    return True


def slider(fn, *, default, values, name="value", description=None):
    """An ipywidgets slider over ``values`` calling ``fn(value)``; without ipywidgets (or
    outside Jupyter) it just calls ``fn(default)`` - the plain-code fallback the tests run."""
    try:
        import ipywidgets as widgets
        from IPython import get_ipython

        if get_ipython() is None or not hasattr(get_ipython(), "kernel"):
            raise ImportError
    except ImportError:
        return fn(default)
    w = widgets.SelectionSlider(options=list(values), value=default, description=description or name,
                                continuous_update=False)
    return widgets.interact(fn, **{name: w})
