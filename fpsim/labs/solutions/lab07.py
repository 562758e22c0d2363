"""Reference solutions for lab 07 (clipping and the order of operations), and wrong answers the
self-checks must reject (``WRONG``: exercise -> [(the mistake, code), ...])."""

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


WRONG = {
    1: [
        ("the folklore: always S times smaller", """
def exercise1(grad_norm, scale, max_norm):
    return scale
"""),
        ("always S * |g| / max_norm, whatever the size of the gradient", """
def exercise1(grad_norm, scale, max_norm):
    return scale * grad_norm / max_norm
"""),
        ("the ratio upside down: wrong / right", """
def exercise1(grad_norm, scale, max_norm):
    right = min(grad_norm, max_norm)
    wrong = min(scale * grad_norm, max_norm) / scale
    return wrong / right
"""),
        ("forgets that tiny gradients are not clipped in either order", """
def exercise1(grad_norm, scale, max_norm):
    return min(scale, scale * grad_norm / max_norm)
"""),
        ("measures it with clip_order_demo instead of working it out", """
def exercise1(grad_norm, scale, max_norm):
    return clip_order_demo(grads=(0.6 * grad_norm, 0.8 * grad_norm), scale=scale, max_norm=max_norm).ratio
"""),
    ],
    2: [
        ("no GradScaler at all: backward, clip, step", """
def exercise2(loss, params, opt, scaler, max_norm):
    loss.backward()
    norm = clip_grad_norm_(params, max_norm)
    opt.step()
    return norm
"""),
        ("clips the scaled gradients: no unscale_ before the clip", """
def exercise2(loss, params, opt, scaler, max_norm):
    scaler.scale(loss).backward()
    norm = clip_grad_norm_(params, max_norm)
    scaler.step(opt)
    scaler.update()
    return norm
"""),
        ("forgets scaler.update()", """
def exercise2(loss, params, opt, scaler, max_norm):
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    norm = clip_grad_norm_(params, max_norm)
    scaler.step(opt)
    return norm
"""),
        ("calls opt.step() itself, so an overflowing step is not skipped", """
def exercise2(loss, params, opt, scaler, max_norm):
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    norm = clip_grad_norm_(params, max_norm)
    opt.step()
    scaler.update()
    return norm
"""),
        ("returns the norm after clipping instead of what clip_grad_norm_ returned", """
def exercise2(loss, params, opt, scaler, max_norm):
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    clip_grad_norm_(params, max_norm)
    norm = float(np.sqrt(sum(float((p.grad.f32().astype(np.float64) ** 2).sum()) for p in params)))
    scaler.step(opt)
    scaler.update()
    return norm
"""),
    ],
}
