"""The one entry point that converts a model for a low-precision recipe, in torchao's shape
(``quantize_(model, config)``): :func:`convert`.  The config says what the Linear layers become,
its type which handler swaps them; adding a recipe adds a config and a handler, not a conversion."""

from __future__ import annotations

from .. import nn
from . import block, linear  # noqa: F401  (they register their handlers)
from .handlers import handler_for
from .recipes import DelayedScaling

__all__ = ["convert"]


def convert(model: nn.Module, config=None, skip=()):
    """Swap every ``nn.Linear`` inside ``model`` (in place, sharing the parameters, so an
    optimizer holding them keeps working) for the layer ``config`` names:

    - a per-tensor fp8 recipe (:class:`DelayedScaling`, :class:`CurrentScaling`; None means
      ``DelayedScaling()``): an fp8 :class:`Fp8Linear` whose three GEMMs cast each operand to
      e4m3fn / e5m2 with its own float32 scale.  Returns the :class:`ScalingGroup` of their
      scaling states (call its ``update()`` after every optimizer step);
    - a block-scaled recipe (:class:`BlockScaling`: MX, NVFP4, fp8 blocks): a
      :class:`BlockLinear` whose GEMMs quantize each operand in blocks along their own
      reduction axis.  Returns the names of the layers swapped (nothing to update per step).

    ``skip``: Linear layers left in the model's own format - module names as
    ``model.named_modules()`` gives them, or ``"first"`` / ``"last"``.  A name that is not a
    Linear of ``model`` raises ValueError and the model is left as it was.

    The layer is found by the config's type in ``LAYER_HANDLERS`` (:mod:`.handlers`): a new kind of
    layer is a config class and one registration; a config of a type with no handler raises
    TypeError naming the known config types."""
    config = DelayedScaling() if config is None else config
    return handler_for(config)(model, config, skip)
