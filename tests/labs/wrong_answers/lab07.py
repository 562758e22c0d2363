"""Wrong answers to lab 07's exercises (clipping and the order of operations): the self-checks must reject each one.

``WRONG``: exercise number -> [(the mistake, the code of a wrong ``exerciseN``), ...].  tests/labs/
test_labs.py runs each code string in the notebook's kernel in place of the exercise cell (so it
may use the names the notebook has imported) and expects the check cell after it to fail,
saying what it expected.  The reference solutions are fpsim.labs.solutions.lab07.
"""

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
