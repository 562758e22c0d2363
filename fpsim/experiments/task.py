"""The task interface: what :func:`~fpsim.experiments.train` needs to train something.

A task is a small (frozen dataclass) object with its settings as fields and these methods:

- ``model(seed)``: a fresh float32 model (the initial weights are the seed's);
- ``batches(recipe, backend)``: a function of the step giving that step's batch, already in the
  form ``loss`` takes (inputs rounded into the recipe's parameter format where the task wants);
- ``loss(model, batch, recipe)``: the float32 loss of one batch (the forward pass under
  ``recipe.forward_context()``; losses run in float32, as autocast runs them);
- ``lr_at(step, steps, lr)``: the learning rate of a step (constant unless the task schedules it);
- ``metrics(model, recipe)``: the final model's numbers, a dict (:attr:`RunResult.metrics`).

and these class-level settings: ``steps`` and ``lr`` (defaults), ``optimizer`` (``"adam"`` or
``"sgd"``), ``measure_at`` (the steps whose gradients are counted by default), ``loss_kills``
(whether a non-finite loss ends the run, or only non-finite parameters do: with a loss scaler a
NaN loss just skips the step) and ``trace_nonfinite`` (whether a
:class:`~fpsim.trace.NonFiniteTracer` watches the whole run).

What ``fpsim compare`` says about a task comes from the task too: ``summary`` (its line in
``--help``), ``default_recipes`` (what runs when no ``--recipes`` are named), ``figure_name``
(the figure's default file in ``figures/``), :meth:`Task.title` (the figure's title),
:meth:`Task.describe_run` (the line printed before the runs), ``table_columns`` (the table's columns
for its metrics: :class:`~fpsim.experiments.result.Column` records) and ``table_legend`` (the
table's closing lines about them; None: the default lines about stalled updates).

:class:`Task` holds the defaults; a new task subclasses it in one file and registers itself in
:data:`TASKS` (``@TASKS.register("name")`` on the class), which is where ``fpsim compare --task``,
its ``--help`` and the findings' sweeps look tasks up by name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from ..registry import Registry
from .recipes import DEFAULT_RECIPES

__all__ = ["Task", "TASKS", "get_task"]


def _check_task(cls) -> None:
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise TypeError(f"TASKS.register: a task is a Task subclass, got {cls!r}")


# The tasks by name: classes (subclasses of Task), built with their own defaults or with settings.
TASKS = Registry("task", check=_check_task, entry_points="fpsim.tasks")


def get_task(task, **settings):
    """A task object: ``task`` itself if it is one, else the class registered under that name
    (:data:`TASKS`) built with ``settings``."""
    if isinstance(task, Task):
        return task
    return TASKS.get(task)(**settings)


class Task(ABC):
    """The defaults of the task interface (module docstring); subclasses give ``model``,
    ``batches``, ``loss`` and, where they have more to say about the final model, ``metrics``
    (a subclass without one of the three cannot be instantiated: TypeError naming it)."""

    optimizer = "adam"
    measure_at = "all"
    loss_kills = True
    trace_nonfinite = False
    summary = ""  # one line for ``fpsim compare --help`` (the class docstring's first line if empty)
    default_recipes: tuple = DEFAULT_RECIPES
    figure_name = "compare_loss.png"
    table_columns: tuple = ()
    table_legend: tuple | None = None

    @classmethod
    def help_line(cls) -> str:
        """``summary``, or the first line of the class docstring."""
        return cls.summary or (cls.__doc__ or cls.__name__).strip().splitlines()[0].rstrip(".")

    def title(self) -> str:
        """What the comparison figure's title calls this task."""
        return type(self).__name__

    def describe_run(self, steps: int, lr: float) -> str:
        """The line ``fpsim compare`` prints before training (the seeds are added after it)."""
        return f"{self.title()}: {steps} steps, {self.optimizer} lr {lr:g}"

    @abstractmethod
    def model(self, seed: int = 0):
        """A fresh float32 model, its initial weights drawn from ``seed``."""

    @abstractmethod
    def batches(self, recipe, backend):
        """A function of the step giving that step's batch, in the form ``loss`` takes."""

    @abstractmethod
    def loss(self, model, batch, recipe):
        """The float32 loss of one batch."""

    def lr_at(self, step: int, steps: int, lr: float) -> float:
        """The learning rate of ``step``: ``lr`` throughout."""
        return lr

    def metrics(self, model, recipe) -> dict:
        """The final model's numbers (:attr:`RunResult.metrics <fpsim.experiments.RunResult.metrics>`); none here."""
        return {}
