"""Finding the Linear layers a low-precision recipe swaps out (the ``skip`` rule ``lowp.convert``
follows, per-tensor fp8 and block scaling alike), sharing a layer's parameters, and the argument
check of the linears swapped in."""

from __future__ import annotations

from .. import nn
from ..tensor import Tensor

__all__ = ["linears_to_swap", "share_linear", "check_linear_args"]


def linears_to_swap(model: nn.Module, skip, who: str) -> list[tuple]:
    """``(parent, child name, full name)`` of every ``nn.Linear`` inside ``model`` that is not
    skipped, in module order.

    ``skip`` names Linear layers to leave alone: module names as ``model.named_modules()`` gives
    them (``"0"``, ``"encoder.1"``), or ``"first"`` / ``"last"`` for the first and last Linear
    (unless a Linear has that name).  A name that is not a Linear of ``model``, a lone Linear, a
    model with none, or a skip that leaves none raise ValueError naming ``who``; nothing changes.
    """
    if isinstance(model, nn.Linear):
        raise ValueError(f"{who}() swaps the Linear layers inside a model; wrap a lone Linear in nn.Sequential")
    skip = (skip,) if isinstance(skip, str) else tuple(skip)
    linears = [(parent, cname, f"{mname}.{cname}" if mname else cname)
               for mname, parent in list(model.named_modules())
               for cname, child in list(parent._modules.items()) if type(child) is nn.Linear]
    if not linears:
        raise ValueError(f"{who}(): {type(model).__name__} has no nn.Linear layers to convert")
    names = [n for _, _, n in linears]
    alias = {k: v for k, v in (("first", names[0]), ("last", names[-1])) if k not in names}  # a real name wins
    unknown = [str(k) for k in skip if alias.get(k, k) not in names]
    if unknown:
        raise ValueError(f"{who}(skip=...): {', '.join(map(repr, unknown))} not a Linear of "
                         f"{type(model).__name__}; its Linear layers: {', '.join(names)} (or 'first', 'last')")
    keep = {alias.get(k, k) for k in skip}
    if keep >= set(names):
        raise ValueError(f"{who}(skip=...) leaves no Linear to convert (Linear layers: {', '.join(names)})")
    return [lin for lin in linears if lin[2] not in keep]


def share_linear(module: nn.Module, layer: nn.Linear, who: str) -> None:
    """Give ``module`` (a low-precision Linear being built) the sizes and the very weight and bias
    tensors of ``layer``, so that an optimizer holding them keeps working after the swap."""
    if not isinstance(layer, nn.Linear):
        raise TypeError(f"{who} wraps an nn.Linear, got {type(layer).__name__}")
    module.in_features, module.out_features = layer.in_features, layer.out_features
    module.weight = layer.weight
    if layer.bias is not None:
        module.bias = layer.bias
    else:
        object.__setattr__(module, "bias", None)


def check_linear_args(who: str, x, weight, bias) -> None:
    """``x @ weight.T + bias`` can be formed: x a Tensor whose last axis is weight's second, a 2-D
    weight, a bias of weight's first length (or None); else the error names ``who`` and shapes."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{who}: x must be a Tensor, got {type(x).__name__}")
    if weight.ndim != 2 or x.ndim < 1 or x.shape[-1] != weight.shape[1]:
        raise ValueError(f"{who}: input shape {x.shape} does not fit weight shape {weight.shape}")
    if bias is not None and bias.shape != (weight.shape[0],):
        raise ValueError(f"{who}: bias shape {bias.shape} does not fit weight shape {weight.shape}")
