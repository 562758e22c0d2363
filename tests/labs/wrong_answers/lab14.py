"""Wrong answers to lab 14's exercises ("Hunting a NaN"): the self-checks must reject each one.

``WRONG``: exercise number -> [(the mistake, the code of a wrong ``exerciseN``), ...].  tests/labs/
test_labs.py runs each code string in the notebook's kernel in place of the exercise cell (so it
may use the names the notebook has imported) and expects the check cell after it to fail,
saying what it expected.  The reference solutions are fpsim.labs.solutions.lab14.
"""

WRONG = {
    1: [
        ("the first op whose output holds any inf or NaN, made there or handed on", """
def exercise1(records):
    for i, (op, inputs, output) in enumerate(records):
        if not np.all(np.isfinite(output)):
            return i
    return None
"""),
        ("looks for NaN only: an inf is not a problem yet", """
def exercise1(records):
    for i, (op, inputs, output) in enumerate(records):
        if np.isnan(output).any() and not any(np.isnan(a).any() for a in inputs):
            return i
    return None
"""),
        ("an origin needs all-finite inputs: ignores which kind of value is new", """
def exercise1(records):
    for i, (op, inputs, output) in enumerate(records):
        if not np.all(np.isfinite(output)) and all(np.all(np.isfinite(a)) for a in inputs):
            return i
    return None
"""),
        ("returns the last origin, not the first", """
def exercise1(records):
    found = None
    for i, (op, inputs, output) in enumerate(records):
        kinds = lambda a: {k for k, f in (("nan", np.isnan), ("inf", np.isposinf), ("-inf", np.isneginf))
                           if f(np.asarray(a, dtype=np.float64)).any()}
        held = set().union(*(kinds(a) for a in inputs))
        if kinds(output) - held:
            found = i
    return found
"""),
        ("+inf and -inf as one kind: a sign flip of an inf is no news", """
def exercise1(records):
    for i, (op, inputs, output) in enumerate(records):
        kinds = lambda a: {k for k, f in (("nan", np.isnan), ("inf", np.isinf)) if f(np.asarray(a, dtype=np.float64)).any()}
        held = set().union(*(kinds(a) for a in inputs))
        if kinds(output) - held:
            return i
    return None
"""),
        ("compares the output with its first input only", """
def exercise1(records):
    for i, (op, inputs, output) in enumerate(records):
        kinds = lambda a: {k for k, f in (("nan", np.isnan), ("inf", np.isposinf), ("-inf", np.isneginf))
                           if f(np.asarray(a, dtype=np.float64)).any()}
        if kinds(output) - kinds(inputs[0]):
            return i
    return None
"""),
    ],
    2: [
        ("the naive bound g_max * scale <= 65504 (up to 65520 rounds down to 65504)", """
def exercise2(g_max, init_scale=2.0**16):
    scale, skipped = float(init_scale), 0
    while g_max * scale > 65504:
        scale, skipped = scale / 2, skipped + 1
    return scale, skipped
"""),
        ("never backs off below 1", """
def exercise2(g_max, init_scale=2.0**16):
    scale, skipped = float(init_scale), 0
    while scale > 1 and not np.isfinite(fpsim.round_to(g_max * scale, "float16")):
        scale, skipped = scale / 2, skipped + 1
    return scale, skipped
"""),
        ("the largest safe power of two, even above the starting scale (a scaler that only backs off never grows past it)", """
def exercise2(g_max, init_scale=2.0**16):
    import math
    k = math.floor(math.log2(65519 / g_max))
    return 2.0**k, max(0, round(math.log2(init_scale)) - k)
"""),
        ("counts the step that finally fits as skipped too", """
def exercise2(g_max, init_scale=2.0**16):
    scale, skipped = float(init_scale), 1
    while not np.isfinite(fpsim.round_to(g_max * scale, "float16")):
        scale, skipped = scale / 2, skipped + 1
    return scale, skipped
"""),
        ("tests the scaled gradient in bfloat16 instead of float16", """
def exercise2(g_max, init_scale=2.0**16):
    scale, skipped = float(init_scale), 0
    while not np.isfinite(fpsim.round_to(g_max * scale, "bfloat16")):
        scale, skipped = scale / 2, skipped + 1
    return scale, skipped
"""),
    ],
}
