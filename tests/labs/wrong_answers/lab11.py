"""Wrong answers to lab 11's exercises (the bridge to PyTorch): the self-checks must reject each one.

``WRONG``: exercise number -> [(the mistake, the code of a wrong ``exerciseN``), ...].  tests/labs/
test_labs.py runs each code string in the notebook's kernel in place of the exercise cell (so it
may use the names the notebook has imported) and expects the check cell after it to fail,
saying what it expected.  The reference solutions are fpsim.labs.solutions.lab11.
"""

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
