"""Reference solutions for lab 11 (the bridge to PyTorch), and wrong answers the self-checks
must reject (``WRONG``: exercise -> [(the mistake, code), ...])."""

from __future__ import annotations


def exercise1(skipped, init_scale=2.0**16, growth_interval=2000, growth_factor=2.0, backoff_factor=0.5):
    """The scale GradScaler uses at each step, from the list of skipped steps (a step is
    skipped exactly when its scaled gradients held inf/NaN)."""
    import numpy as np

    scale, tracker, out = float(init_scale), 0, []
    for found_inf in skipped:
        out.append(scale)
        if found_inf:
            scale, tracker = float(np.float32(scale * backoff_factor)), 0
        else:
            tracker += 1
            if tracker == growth_interval:
                grown = float(np.float32(scale * growth_factor))
                scale = grown if np.isfinite(grown) else scale
                tracker = 0
    return out


def exercise2(model, x, target, opt, scaler):
    """One step of PyTorch's AMP recipe written with fpsim: returns the loss as a float."""
    import fpsim
    from fpsim import ops

    opt.zero_grad()
    with fpsim.autocast("float16"):
        loss = ops.mse_loss(model(x), target)  # the loss runs in float32 under autocast
    scaler.scale(loss).backward()
    scaler.step(opt)  # skipped when the scaled gradients held inf/NaN
    scaler.update()
    return loss.item()


WRONG = {
    1: [
        ("records the scale after the update instead of the one the step used", """
def exercise1(skipped, init_scale=2.0**16, growth_interval=2000, growth_factor=2.0, backoff_factor=0.5):
    scale, tracker, out = float(init_scale), 0, []
    for found_inf in skipped:
        if found_inf:
            scale, tracker = scale * backoff_factor, 0
        else:
            tracker += 1
            if tracker == growth_interval:
                scale, tracker = scale * growth_factor, 0
        out.append(scale)
    return out
"""),
        ("keeps counting clean steps across an overflow", """
def exercise1(skipped, init_scale=2.0**16, growth_interval=2000, growth_factor=2.0, backoff_factor=0.5):
    scale, tracker, out = float(init_scale), 0, []
    for found_inf in skipped:
        out.append(scale)
        if found_inf:
            scale = scale * backoff_factor
        else:
            tracker += 1
            if tracker == growth_interval:
                scale, tracker = scale * growth_factor, 0
    return out
"""),
        ("grows after growth_interval + 1 clean steps", """
def exercise1(skipped, init_scale=2.0**16, growth_interval=2000, growth_factor=2.0, backoff_factor=0.5):
    scale, tracker, out = float(init_scale), 0, []
    for found_inf in skipped:
        out.append(scale)
        if found_inf:
            scale, tracker = scale * backoff_factor, 0
        elif tracker == growth_interval:
            scale, tracker = scale * growth_factor, 0
        else:
            tracker += 1
    return out
"""),
        ("a skipped step leaves the scale alone", """
def exercise1(skipped, init_scale=2.0**16, growth_interval=2000, growth_factor=2.0, backoff_factor=0.5):
    scale, tracker, out = float(init_scale), 0, []
    for found_inf in skipped:
        out.append(scale)
        if found_inf:
            tracker = 0
        else:
            tracker += 1
            if tracker == growth_interval:
                scale, tracker = scale * growth_factor, 0
    return out
"""),
        ("always doubles: growth_factor ignored", """
def exercise1(skipped, init_scale=2.0**16, growth_interval=2000, growth_factor=2.0, backoff_factor=0.5):
    scale, tracker, out = float(init_scale), 0, []
    for found_inf in skipped:
        out.append(scale)
        if found_inf:
            scale, tracker = scale * backoff_factor, 0
        else:
            tracker += 1
            if tracker == growth_interval:
                scale, tracker = scale * 2.0, 0
    return out
"""),
        ("grows by 1 / backoff_factor, as if growth undid a backoff", """
def exercise1(skipped, init_scale=2.0**16, growth_interval=2000, growth_factor=2.0, backoff_factor=0.5):
    scale, tracker, out = float(init_scale), 0, []
    for found_inf in skipped:
        out.append(scale)
        if found_inf:
            scale, tracker = scale * backoff_factor, 0
        else:
            tracker += 1
            if tracker == growth_interval:
                scale, tracker = scale / backoff_factor, 0
    return out
"""),
    ],
    2: [
        ("no autocast: the whole forward pass in float32", """
def exercise2(model, x, target, opt, scaler):
    opt.zero_grad()
    loss = ops.mse_loss(model(x), target)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    return loss.item()
"""),
        ("autocast to bfloat16 instead of float16", """
def exercise2(model, x, target, opt, scaler):
    opt.zero_grad()
    with fpsim.autocast("bfloat16"):
        loss = ops.mse_loss(model(x), target)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    return loss.item()
"""),
        ("forgets scaler.update(): the scale never moves", """
def exercise2(model, x, target, opt, scaler):
    opt.zero_grad()
    with fpsim.autocast("float16"):
        loss = ops.mse_loss(model(x), target)
    scaler.scale(loss).backward()
    scaler.step(opt)
    return loss.item()
"""),
        ("calls opt.step() itself: scaled gradients, and overflowing steps are not skipped", """
def exercise2(model, x, target, opt, scaler):
    opt.zero_grad()
    with fpsim.autocast("float16"):
        loss = ops.mse_loss(model(x), target)
    scaler.scale(loss).backward()
    opt.step()
    return loss.item()
"""),
        ("forgets zero_grad: gradients pile up from step to step", """
def exercise2(model, x, target, opt, scaler):
    with fpsim.autocast("float16"):
        loss = ops.mse_loss(model(x), target)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    return loss.item()
"""),
    ],
}
