"""Modules and losses: ``Module``, ``Linear``, ``Sequential``, ``MLP``, activations, losses, and the
transformer pieces (``Embedding``, ``LayerNorm``, ``CausalSelfAttention``, ``TransformerBlock``,
``TinyGPT``).

- ``modules.py``     the module system and the basic layers;
- ``transformer.py`` the tiny GPT and its parts;
- ``utils.py``       ``clip_grad_norm_``.

Parameters are tensors that require grad, assigned as module attributes.  Calling a module
attributes every op inside it to the module's name, so monitors can report per layer.
"""

from __future__ import annotations

from .. import ops
from ..tensor import Tensor
from . import utils
from .modules import ACTIVATIONS, GELU, MLP, Identity, Linear, Module, ReLU, Sequential, Sigmoid, Tanh
from .transformer import CausalSelfAttention, Embedding, LayerNorm, TinyGPT, TransformerBlock
from .unit import UnitActivation, UnitLinear, UnitMLP, unit_mse_loss

__all__ = ["Module", "Linear", "Sequential", "MLP", "ReLU", "Tanh", "Sigmoid", "GELU", "Identity",
           "mse_loss", "cross_entropy", "softmax", "log_softmax", "utils", "ACTIVATIONS",
           "Embedding", "LayerNorm", "CausalSelfAttention", "TransformerBlock", "TinyGPT",
           "UnitLinear", "UnitActivation", "UnitMLP", "unit_mse_loss"]


# ------------------------------------------------------------------------------------ losses

mse_loss = ops.mse_loss
softmax = ops.softmax
log_softmax = ops.log_softmax


def cross_entropy(logits: Tensor, target) -> Tensor:
    """Mean cross-entropy from logits (N, C) and integer class indices (N,): log_softmax
    (stable, float32 inside), pick each row's target, negate, average."""
    be = logits.backend
    t = target.data if isinstance(target, Tensor) else target
    t = be.asarray(t)
    if logits.ndim != 2 or t.ndim != 1 or t.shape[0] != logits.shape[0]:
        raise ValueError(f"cross_entropy: logits {logits.shape} need shape (N, C) and targets (N,), got {tuple(t.shape)}")
    if t.dtype.kind not in "iu":
        raise TypeError(f"cross_entropy targets must be integer class indices, got dtype {t.dtype}")
    n, c = logits.shape
    if n and (int(t.min()) < 0 or int(t.max()) >= c):
        raise ValueError(f"cross_entropy: target classes must lie in [0, {c}), got {int(t.min())}..{int(t.max())}")
    logp = ops.log_softmax(logits, axis=-1)
    picked = logp[be.xp.arange(n), t]
    return -ops.mean(picked)
