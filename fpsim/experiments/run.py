"""One run being trained: :class:`Run`, built by :meth:`Recipe.prepare
<fpsim.experiments.Recipe.prepare>` (the only recipe -> run builder), stepped by :meth:`Run.step`
(the only training-step body every task, the labs and the bench use).

A step: zero the gradients, compute the task's float32 loss (the forward pass in the model's
formats), backward through ``scaler.scale(loss)`` - the loss times the scale, a float32 constant,
where the recipe has a scaler - then the optimizer update through the scaler (unscale, skip on
inf/NaN, update the scale), then the fp8 scaling states (this step's amaxes set the next
step's scales).  A recipe without a scaler has one too, that does nothing: a disabled
``GradScaler`` (PyTorch's ``GradScaler(enabled=False)``: ``scale`` hands the loss back untouched -
not multiplied by 1 -, ``step`` just steps, never skips, ``get_scale()`` is 1.0), so the step has
one body.  Every stored value is rounded where the engine rounds it; nothing here rounds.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import state
from ..amp import GradScaler, StaticScaler

__all__ = ["Run", "StepOutcome", "make_scaler", "no_scaler"]


def make_scaler(recipe, init_scale: float = 2.0**16):
    """The recipe's loss scaler, always an object with GradScaler's interface (``scale``,
    ``unscale_``, ``step``, ``update``, ``get_scale``): ``StaticScaler(recipe.static_scale)``, a
    ``GradScaler`` starting at ``init_scale`` with the recipe's growth interval, or, for a recipe
    without one, :func:`no_scaler`."""
    if recipe.scaler is None:
        return no_scaler()
    if recipe.scaler == "static":
        return StaticScaler(recipe.static_scale)
    return GradScaler(init_scale=init_scale, growth_interval=recipe.growth_interval)


def no_scaler():
    """The scaler of a run without loss scaling: ``GradScaler(enabled=False)`` - ``scale(loss)``
    returns ``loss`` itself (nothing multiplied, so a float16 loss is not touched), ``unscale_``
    and ``update`` do nothing, ``step(opt)`` is ``opt.step()`` and never skips, the scale is 1.0."""
    return GradScaler(enabled=False)


@dataclass
class StepOutcome:
    """What one :meth:`Run.step` did: the float32 loss (the Tensor; ``loss.item()`` is the
    unscaled value), the loss scale it was multiplied by, whether the update was skipped, and,
    when asked for, ``unchanged``: (parameter entries the update left equal, all entries) -
    counted on the device (0-d arrays on cupy) until read."""

    loss: object
    scale: float
    skipped: bool = False
    unchanged: tuple | None = None


@dataclass
class Run:
    """A model prepared for a recipe: the model (in the recipe's formats, its Linears converted),
    its optimizer (float32 masters where the recipe says), the loss scaler (an object always:
    :func:`no_scaler` where the recipe has none; None given is taken for that), and the fp8
    scaling group of the converted Linears (None without per-tensor fp8)."""

    recipe: object
    model: object
    opt: object
    scaler: object = None
    scaling: object = None

    def __post_init__(self):
        if self.scaler is None:
            self.scaler = no_scaler()

    def masters(self) -> list:
        """The float32 values the optimizer updates: the masters, or the parameters widened."""
        return [p.f32() for p in self.opt.master_params()]

    def forward_backward(self, loss_fn, hook=None):
        """Zero the gradients, ``loss = loss_fn(self.model)`` (a float32 Tensor) and backward
        through ``scaler.scale(loss)``; ``hook``, if given, sees every rounding meanwhile.
        Returns (loss, scale used)."""
        self.opt.zero_grad()
        if hook is not None:
            with state.hooked(hook):
                return self._forward_backward(loss_fn)
        return self._forward_backward(loss_fn)

    def _forward_backward(self, loss_fn):
        loss = loss_fn(self.model)
        scale = self.scaler.get_scale()
        self.scaler.scale(loss).backward()
        return loss, scale

    def update(self) -> bool:
        """The optimizer step through the scaler (step, then update), then the fp8 scaling
        states.  Whether the step was skipped."""
        self.scaler.step(self.opt)
        self.scaler.update()
        if self.scaling is not None:
            self.scaling.update()
        return self.scaler.last_step_skipped(self.opt)

    def step(self, loss_fn, *, hook=None, count_unchanged: bool = False) -> StepOutcome:
        """One training step (module docstring) on the loss ``loss_fn(model)``: a :class:`StepOutcome`.
        ``hook`` sees the forward and backward passes' roundings (not the update's);
        ``count_unchanged`` counts the entries of :meth:`masters` the update left equal."""
        loss, scale = self.forward_backward(loss_fn, hook)
        before = [a.copy() for a in self.masters()] if count_unchanged else None
        skipped = self.update()
        unchanged = None
        if before is not None:
            xp = self.opt.params[0].backend.xp
            same = sum(xp.count_nonzero(a == b) for a, b in zip(before, self.masters()))
            unchanged = (same, sum(a.size for a in before))
        return StepOutcome(loss, float(scale), skipped, unchanged)
