"""The one entry point that converts a model for a low-precision recipe, in torchao's shape
(``quantize_(model, config)``): :func:`convert`.  The config says what the Linear layers become;
adding a recipe adds a config, not a conversion function."""

from __future__ import annotations

from .. import nn
from .block import BlockScaling, swap_block_linears
from .linear import swap_fp8_linears
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
    Linear of ``model`` raises ValueError and the model is left as it was; a config of another
    type raises TypeError."""
    if config is None or isinstance(config, DelayedScaling):
        return swap_fp8_linears(model, config, skip)
    if isinstance(config, BlockScaling):
        return swap_block_linears(model, config, skip)
    raise TypeError(f"config must be a DelayedScaling, CurrentScaling or BlockScaling, got {type(config).__name__}")
