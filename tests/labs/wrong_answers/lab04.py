"""Wrong answers to lab 04's exercises ("Loss scaling"): the self-checks must reject each one.

``WRONG``: exercise number -> [(the mistake, the code of a wrong ``exerciseN``), ...].  tests/labs/
test_labs.py runs each code string in the notebook's kernel in place of the exercise cell (so it
may use the names the notebook has imported) and expects the check cell after it to fail,
saying what it expected.  The reference solutions are fpsim.labs.solutions.lab04.
"""

WRONG = {
    1: [
        ("keeps the tracker when growth is refused (the scale would overflow float32)", """
def exercise1(scale, tracker, found_inf, growth_interval=2000, growth_factor=2.0, backoff_factor=0.5):
    if found_inf:
        return float(np.float32(scale * backoff_factor)), 0
    tracker += 1
    if tracker == growth_interval:
        grown = np.float32(scale * growth_factor)
        if np.isfinite(grown):
            return float(grown), 0
    return float(scale), tracker
"""),
        ("grows one step late: after growth_interval + 1 clean steps", """
def exercise1(scale, tracker, found_inf, growth_interval=2000, growth_factor=2.0, backoff_factor=0.5):
    if found_inf:
        return float(np.float32(scale * backoff_factor)), 0
    if tracker == growth_interval:
        grown = np.float32(scale * growth_factor)
        return (float(grown) if np.isfinite(grown) else float(scale)), 0
    return float(scale), tracker + 1
"""),
        ("backs off without resetting the tracker", """
def exercise1(scale, tracker, found_inf, growth_interval=2000, growth_factor=2.0, backoff_factor=0.5):
    if found_inf:
        return float(np.float32(scale * backoff_factor)), tracker
    tracker += 1
    if tracker == growth_interval:
        grown = np.float32(scale * growth_factor)
        return (float(grown) if np.isfinite(grown) else float(scale)), 0
    return float(scale), tracker
"""),
        ("grows in float64, without the float32 rounding and the finiteness test", """
def exercise1(scale, tracker, found_inf, growth_interval=2000, growth_factor=2.0, backoff_factor=0.5):
    if found_inf:
        return scale * backoff_factor, 0
    tracker += 1
    if tracker == growth_interval:
        return scale * growth_factor, 0
    return scale, tracker
"""),
        ("halves on overflow whatever backoff_factor says", """
def exercise1(scale, tracker, found_inf, growth_interval=2000, growth_factor=2.0, backoff_factor=0.5):
    if found_inf:
        return float(np.float32(scale / 2)), 0
    tracker += 1
    if tracker == growth_interval:
        grown = np.float32(scale * growth_factor)
        return (float(grown) if np.isfinite(grown) else float(scale)), 0
    return float(scale), tracker
"""),
        ("never lets the scale fall below 1", """
def exercise1(scale, tracker, found_inf, growth_interval=2000, growth_factor=2.0, backoff_factor=0.5):
    if found_inf:
        return max(float(np.float32(scale * backoff_factor)), 1.0), 0
    tracker += 1
    if tracker == growth_interval:
        grown = np.float32(scale * growth_factor)
        return (float(grown) if np.isfinite(grown) else float(scale)), 0
    return float(scale), tracker
"""),
    ],
    2: [
        ("the naive test S * g <= 65504 (values up to 65520 round down to 65504)", """
def exercise2(max_grad):
    k = 60
    while max_grad * 2.0**k > 65504:
        k -= 1
    return 2.0**k
"""),
        ("floor(log2(65504 / g)): the same naive bound, by formula", """
def exercise2(max_grad):
    import math
    return 2.0 ** math.floor(math.log2(65504 / max_grad))
"""),
        ("everything below 2**16 fits", """
def exercise2(max_grad):
    k = 60
    while max_grad * 2.0**k >= 65536:
        k -= 1
    return 2.0**k
"""),
        ("never below 1: starts at S = 1 and only grows", """
def exercise2(max_grad):
    k = 0
    while np.isfinite(fpsim.round_to(max_grad * 2.0 ** (k + 1), "float16")):
        k += 1
    return 2.0**k
"""),
        ("returns the first scale that overflows", """
def exercise2(max_grad):
    k = -40
    while np.isfinite(fpsim.round_to(max_grad * 2.0**k, "float16")):
        k += 1
    return 2.0**k
"""),
        ("tests the product in bfloat16 instead of float16", """
def exercise2(max_grad):
    k = -40
    while np.isfinite(fpsim.round_to(max_grad * 2.0 ** (k + 1), "bfloat16")) and k < 200:
        k += 1
    return 2.0**k
"""),
    ],
}
