"""Gradient utilities: ``clip_grad_norm_``, PyTorch's, with the arithmetic spelled out.

The total norm is computed in float32 from the exact float32 values of every gradient,
whatever format the gradients are stored in; each gradient is then multiplied by the clip
coefficient in float32 and rounded ONCE back into its own format (op ``"clip"``, direction
``"backward"``, so monitors see it).

With loss scaling, clip AFTER ``GradScaler.unscale_``: clipping the scaled gradients clips at
``max_norm / S`` (``fpsim.labs.clipping.clip_order_demo`` shows it).  With master weights clip
``optimizer.master_params()``, whose float32 gradients ``unscale_`` has just written.
"""

from __future__ import annotations

import math

import numpy as np

from ..backend import get_backend
from ..checks import is_real
from ..tensor import Tensor, round_result

__all__ = ["clip_grad_norm_"]


def _norm_order(norm_type) -> float:
    if isinstance(norm_type, str):
        if norm_type.strip().lower() not in ("inf", "+inf"):
            raise ValueError(f"norm_type must be a number > 0 or 'inf', got {norm_type!r}")
        return math.inf
    if not is_real(norm_type):
        raise ValueError(f"norm_type must be a number > 0 or 'inf', got {norm_type!r}")
    p = float(norm_type)
    if not p > 0:  # also rejects NaN
        raise ValueError(f"norm_type must be > 0 (or inf), got {norm_type!r}")
    return p


def _p_norm(a32, p: float, be) -> np.float32:
    """The p-norm of float32 values: the largest |x| (p = inf), or (sum |x|**p)**(1/p) with each
    power rounded to float32 and the sum exact, rounded once to float32 (the backend's sum and
    pow: on the CPU, the same bits on every machine), as a host float32."""
    a = be.xp.abs(a32)
    if p == math.inf:
        n = a.max() if a.size else be.xp.float32(0)
    elif p == 1.0:
        n = be.sum(a)
    elif p == 2.0:
        n = be.xp.sqrt(be.sum(a * a))
    else:
        n = be.pow(be.xp.asarray(be.sum(be.pow(a, p))), 1.0 / p)
    return np.float32(float(n))


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite: bool = False) -> np.float32:
    """Scale the gradients of ``parameters`` in place so that their total norm is at most
    ``max_norm``; return the total norm BEFORE clipping, as a 0-d float32 (``np.float32``:
    ``float(n)`` and ``n.item()`` both work).

    ``parameters`` is a Tensor or an iterable of Tensors; those without a ``.grad`` are
    ignored (no gradients at all: returns 0.0 and changes nothing).  ``norm_type`` is a
    number > 0 or ``inf`` / ``"inf"`` (the largest magnitude).

    The numbers, as PyTorch computes them for float32 gradients:

    - each gradient's p-norm: the exact sum of |g|**2 (of |g|**p, each power rounded to float32)
      rounded once to float32, then its square root (p-th root); the total is the p-norm of those
      per-tensor norms, the same way.  (PyTorch's float32 sums follow its kernel's order; fpsim's
      are exact, so the last bit can differ from PyTorch's.)
    - ``coef = max_norm / (total + 1e-6)``, evaluated as PyTorch evaluates a number divided by
      a tensor: ``float32(1 / float32(total + 1e-6)) * float32(max_norm)``, then clamped to
      ``<= 1`` (NaN stays NaN).  It is applied even when it is 1 (a no-op on finite values).
    - each gradient becomes ``round(float32(g) * coef)`` in the gradient's own format.

    Where fpsim differs from PyTorch: for float16 / bfloat16 gradients PyTorch rounds each
    per-tensor norm, the total and the coefficient into the gradients' own dtype (a float16
    norm above 65504 is inf); fpsim keeps them in float32.

    A non-finite total norm raises ``RuntimeError`` when ``error_if_nonfinite`` is true;
    otherwise the gradients are scaled by it anyway (coef 0, and inf * 0 = NaN), as in PyTorch.
    """
    if isinstance(parameters, Tensor):
        params = [parameters]
    else:
        try:
            params = list(parameters)
        except TypeError:
            raise TypeError(f"parameters must be a Tensor or an iterable of Tensors, got "
                            f"{type(parameters).__name__}") from None
    for i, p in enumerate(params):
        if not isinstance(p, Tensor):
            raise TypeError(f"parameters[{i}] is a {type(p).__name__}, not a Tensor")
    if not is_real(max_norm) or not float(max_norm) >= 0:
        raise ValueError(f"max_norm must be a number >= 0, got {max_norm!r}")
    p_order = _norm_order(norm_type)

    with_grad = [p for p in params if p.grad is not None]
    if not with_grad:
        return np.float32(0.0)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        norms = np.array([_p_norm(p.grad.f32(), p_order, p.backend) for p in with_grad], dtype=np.float32)
        total = _p_norm(norms, p_order, get_backend("numpy"))  # the norm of the per-tensor norms
        if error_if_nonfinite and not np.isfinite(total):
            raise RuntimeError(
                f"The total norm of order {p_order} for gradients from `parameters` is non-finite, so it cannot be "
                "clipped. To disable this error and scale the gradients by the non-finite norm anyway, set "
                "`error_if_nonfinite=False`")
        coef = np.float32(np.float32(1.0) / (total + np.float32(1e-6))) * np.float32(max_norm)
        coef = np.minimum(coef, np.float32(1.0))
        for p in with_grad:
            g = p.grad
            be = g.backend
            g.data = round_result(g.f32() * be.xp.float32(coef), g.fmt, be, "clip", "backward", p.name)
    return total
