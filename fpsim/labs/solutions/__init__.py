"""Reference solutions to the labs' "try it" exercises, one module per lab (``lab02``, ...).

In a notebook: ``from fpsim.labs.solutions import reveal; reveal(2, 1)`` prints the solution
to exercise 1 of lab 02; ``solution_source(2, 1)`` returns that text, ``solution(2, 1)`` the
function itself, so a self-check cell can run it.
"""

from __future__ import annotations

import importlib
import inspect

__all__ = ["solution", "solution_source", "reveal"]


def solution(lab: int, exercise: int):
    """The function ``exercise<N>`` of module ``lab<NN>``."""
    try:
        mod = importlib.import_module(f"{__name__}.lab{int(lab):02d}")
    except ModuleNotFoundError:
        raise ValueError(f"there are no solutions for lab {lab}") from None
    fn = getattr(mod, f"exercise{int(exercise)}", None)
    if fn is None:
        raise ValueError(f"lab {lab} has no exercise {exercise}")
    return fn


def solution_source(lab: int, exercise: int) -> str:
    """The source of the solution to exercise ``exercise`` of lab ``lab``, as text."""
    return inspect.getsource(solution(lab, exercise))


def reveal(lab: int, exercise: int) -> None:
    """Print the source of a solution.  It returns nothing, so that a notebook cell ending in
    ``reveal(12, 2)`` shows the code once, not again as an escaped string."""
    print(solution_source(lab, exercise))
