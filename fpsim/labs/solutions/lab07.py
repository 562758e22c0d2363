"""Reference solutions for lab 07 (clipping and the order of operations)."""

from __future__ import annotations


def exercise1(grad_norm, scale, max_norm):
    """|update in the right order| / |update in the wrong order| for true gradients of norm
    ``grad_norm``, loss scale ``scale`` and clip ``max_norm`` (ignoring clip_grad_norm_'s 1e-6).

    Right order: the clip sees grad_norm, the update has norm min(grad_norm, max_norm).
    Wrong order: the clip sees scale * grad_norm and leaves min(scale * grad_norm, max_norm),
    which the step then divides by scale."""
    right = min(grad_norm, max_norm)
    wrong = min(scale * grad_norm, max_norm) / scale
    return right / wrong


def exercise2(loss, params, opt, scaler, max_norm):
    """One training step in PyTorch's documented order; returns what clip_grad_norm_ returned."""
    from fpsim.nn.utils import clip_grad_norm_

    scaler.scale(loss).backward()
    scaler.unscale_(opt)  # the gradients are the true ones from here on
    norm = clip_grad_norm_(params, max_norm)  # so max_norm means what it says
    scaler.step(opt)  # skipped if the scaled gradients held inf/NaN
    scaler.update()
    return norm
