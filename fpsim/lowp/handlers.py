"""The layer handlers of :func:`fpsim.lowp.convert`, looked up by the type of the config (torchao's
``quantize_`` handler table, ``register_quantize_module_handler``, is the model).

A handler is ``handler(model, config, skip)``: it swaps the model's Linear layers for the layer the
config describes and returns what the caller keeps (a scaling group, the swapped names).  A new layer
config is one registration where its swap is defined::

    @LAYER_HANDLERS.register(None, MyScaling)
    def swap_my_linears(model, config, skip=()): ...

A config whose type (or a base of it) has no handler is refused, the known config types named.
"""

from __future__ import annotations

from ..registry import Registry

__all__ = ["LAYER_HANDLERS", "handler_for"]

LAYER_HANDLERS = Registry("layer handler")


def handler_for(config):
    """The handler registered for ``type(config)`` or its nearest base; TypeError naming the known ones."""
    try:
        return LAYER_HANDLERS.for_type(config)
    except TypeError:
        known = ", ".join(LAYER_HANDLERS.names())
        raise TypeError(f"config must be a layer config with a registered handler ({known}), got "
                        f"{type(config).__name__}") from None
