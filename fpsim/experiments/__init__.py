"""The experiment pipeline: task + recipe -> run -> result -> one table.

- ``task.py``    :class:`Task`: what a task gives the loop (data, model factory, loss, metrics, steps),
  :data:`TASKS` (the tasks by name: ``fpsim compare --task``), :func:`get_task`;
- ``tasks.py``   :class:`ReferenceTask`, the autoencoder whose gradients are tiny (why: there);
- ``tinygpt.py`` :class:`TinyGPTTask` (a 2-layer GPT sorting digits), its recipes and :data:`OVERFLOW`;
- ``studentteacher.py`` :class:`StudentTeacherTask`, the MX instability paper's proxy;
- ``recipes.py`` :class:`Recipe` (``Recipe.prepare(model, ...) -> Run``), :data:`RECIPES`,
  :data:`DEFAULT_RECIPES`, :data:`EXTENDED_RECIPES`, :func:`get_recipe` (each recipe described there);
- ``run.py``     :class:`Run`: one prepared run, ``Run.step`` the one training-step body;
- ``loop.py``    :func:`train` (the one training loop, the one public way to train once);
- ``sweep.py``   :func:`compare`, :func:`compare_seeds`: recipes x seeds from the same initial weights;
- ``result.py``  :class:`RunResult`, what every run records (``died_at``: the step it died at);
- ``measure.py`` the flushed-gradient counter, the measured steps, where a run died;
- ``report.py``  :func:`format_table`, :func:`format_seed_table`: the tables ``fpsim compare`` prints.
"""

from .loop import run_recipe, train  # noqa: F401  (run_recipe: deprecated, kept until 2027-06-01)
from .recipes import DEFAULT_RECIPES, EXTENDED_RECIPES, RECIPES, Recipe, get_recipe
from .report import format_seed_table, format_table
from .result import Column, RunResult
from .run import Run
from .studentteacher import StudentTeacherTask
from .sweep import compare, compare_seeds
from .task import TASKS, Task, get_task
from .tasks import ReferenceTask
from .tinygpt import OVERFLOW, TINYGPT_RECIPES, TinyGPTTask, run_tinygpt  # noqa: F401  (run_tinygpt: the same)

# run_recipe and run_tinygpt (deprecated aliases of train, removed 2027-06-01) still import from here.
__all__ = ["Recipe", "RECIPES", "get_recipe", "RunResult", "Column", "Run", "Task", "TASKS", "get_task", "ReferenceTask",
           "StudentTeacherTask", "train", "compare", "compare_seeds", "format_seed_table", "format_table",
           "DEFAULT_RECIPES", "EXTENDED_RECIPES", "TinyGPTTask", "TINYGPT_RECIPES", "OVERFLOW"]


def __getattr__(name: str):
    """``TinyGPTResult``, the old name of :class:`RunResult`: deprecated (removed 2027-06-01)."""
    if name == "TinyGPTResult":
        from . import tinygpt

        return tinygpt.TinyGPTResult
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
