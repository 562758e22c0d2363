"""Reference solutions for lab 11 (the bridge to PyTorch)."""

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
