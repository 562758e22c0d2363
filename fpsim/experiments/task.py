"""The task interface: what :func:`~fpsim.experiments.train` needs to train something.

A task is a small (frozen dataclass) object with its settings as fields and these methods:

- ``model(seed)``: a fresh float32 model (the initial weights are the seed's);
- ``batches(recipe, backend)``: a function of the step giving that step's batch, already in the
  form ``loss`` takes (inputs rounded into the recipe's parameter format where the task wants);
- ``loss(model, batch, recipe)``: the float32 loss of one batch (the forward pass under
  ``recipe.forward_context()``; losses run in float32, as autocast runs them);
- ``lr_at(step, steps, lr)``: the learning rate of a step (constant unless the task schedules it);
- ``metrics(model, recipe)``: the final model's numbers, as :class:`RunResult` fields.

and these class-level settings: ``steps`` and ``lr`` (defaults), ``optimizer`` (``"adam"`` or
``"sgd"``), ``measure_at`` (the steps whose gradients are counted by default), ``loss_kills``
(whether a non-finite loss ends the run, or only non-finite parameters do: with a loss scaler a
NaN loss just skips the step) and ``trace_nonfinite`` (whether a
:class:`~fpsim.trace.NonFiniteTracer` watches the whole run).  :class:`Task` holds the defaults;
a new task subclasses it in one file.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

__all__ = ["Task"]


class Task(ABC):
    """The defaults of the task interface (module docstring); subclasses give ``model``,
    ``batches``, ``loss`` and, where they have more to say about the final model, ``metrics``
    (a subclass without one of the three cannot be instantiated: TypeError naming it)."""

    optimizer = "adam"
    measure_at = "all"
    loss_kills = True
    trace_nonfinite = False

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
        """The final model's numbers (:class:`~fpsim.experiments.RunResult` fields); none here."""
        return {}
