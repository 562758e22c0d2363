"""Wrong answers to lab 06's exercises (bfloat16): the self-checks must reject each one.

``WRONG``: exercise number -> [(the mistake, the code of a wrong ``exerciseN``), ...].  tests/labs/
test_labs.py runs each code string in the notebook's kernel in place of the exercise cell (so it
may use the names the notebook has imported) and expects the check cell after it to fail,
saying what it expected.  The reference solutions are fpsim.labs.solutions.lab06.
"""

WRONG = {
    1: [
        ("does not round w into the format first", """
def exercise1(w, fmt):
    return float(fpsim.ulp(float(w), fmt)) / 2
"""),
        ("the whole gap instead of half of it", """
def exercise1(w, fmt):
    return float(fpsim.ulp(float(fpsim.round_to(float(w), fmt)), fmt))
"""),
        ("the rule of thumb 2**-8 x w (relative, not the gap of w's binade)", """
def exercise1(w, fmt):
    p = fpsim.get_format(fmt).mantissa_bits + 1
    return float(fpsim.round_to(float(w), fmt)) * 2.0**-p
"""),
        ("the gap below the weight instead of above it", """
def exercise1(w, fmt):
    stored = float(fpsim.round_to(float(w), fmt))
    below = float(fpsim.round_to(np.nextafter(stored, 0.0), fmt, "toward_zero"))
    return (stored - below) / 2
"""),
        ("always bfloat16, whatever the format", """
def exercise1(w, fmt):
    stored = float(fpsim.round_to(float(w), "bfloat16"))
    return float(fpsim.ulp(stored, "bfloat16")) / 2
"""),
        ("rounds the weight in bfloat16 whatever the format, then takes fmt's gap", """
def exercise1(w, fmt):
    stored = float(fpsim.round_to(float(w), "bfloat16"))
    return float(fpsim.ulp(stored, fmt)) / 2
"""),
        ("rounds the weight in float16 whatever the format, then takes fmt's gap", """
def exercise1(w, fmt):
    stored = float(np.float16(w))
    return float(fpsim.ulp(stored, fmt)) / 2
"""),
        ("the gap from float64's ulp scaled to fmt's mantissa: wrong below the smallest normal", """
def exercise1(w, fmt):
    import math
    stored = float(fpsim.round_to(float(w), fmt))
    return math.ulp(stored) * 2.0 ** (52 - fpsim.get_format(fmt).mantissa_bits) / 2
"""),
        ('rounds w toward zero into fmt, not to nearest', """
def exercise1(w, fmt):
    stored = float(fpsim.round_to(np.float64(w), fmt, "toward_zero"))
    return float(fpsim.ulp(stored, fmt)) / 2
"""),
    ],
    2: [
        ("divides by the scale instead of multiplying by float32(1/scale)", """
def exercise2(g, scale):
    g32 = np.asarray(g, dtype=np.float32)
    scaled = fpsim.round_to(g32 * np.float32(scale), "bfloat16")
    return (scaled / np.float32(scale)).astype(np.float32)
"""),
        ("never rounds into bfloat16", """
def exercise2(g, scale):
    g32 = np.asarray(g, dtype=np.float32)
    return ((g32 * np.float32(scale)) * np.float32(1.0 / scale)).astype(np.float32)
"""),
        ("rounds into float16 instead of bfloat16", """
def exercise2(g, scale):
    g32 = np.asarray(g, dtype=np.float32)
    scaled = fpsim.round_to(g32 * np.float32(scale), "float16")
    return (scaled * np.float32(1.0 / scale)).astype(np.float32)
"""),
        ("returns float64 instead of float32", """
def exercise2(g, scale):
    g32 = np.asarray(g, dtype=np.float32)
    scaled = fpsim.round_to(g32 * np.float32(scale), "bfloat16")
    return scaled.astype(np.float64) / scale
"""),
        ("ignores the scale: a plain cast", """
def exercise2(g, scale):
    return fpsim.round_to(np.asarray(g, dtype=np.float32), "bfloat16")
"""),
    ],
    3: [
        ("the update in gaps of w, without finding the neighbour below w + u", """
def exercise3(w, u, fmt):
    stored = float(fpsim.round_to(float(w), fmt))
    return float(u) / float(fpsim.ulp(stored, fmt))
"""),
        ("the probability of rounding down", """
def exercise3(w, u, fmt):
    x = float(fpsim.round_to(float(w), fmt)) + float(u)
    lower = float(fpsim.round_to(np.float64(x), fmt, "toward_zero"))
    return 1 - (x - lower) / float(fpsim.ulp(lower, fmt))
"""),
        ("takes the nearest neighbour for the one below", """
def exercise3(w, u, fmt):
    x = float(fpsim.round_to(float(w), fmt)) + float(u)
    near = float(fpsim.round_to(np.float64(x), fmt))
    return (x - near) / float(fpsim.ulp(near, fmt))
"""),
        ("does not round w into the format first", """
def exercise3(w, u, fmt):
    x = float(w) + float(u)
    lower = float(fpsim.round_to(np.float64(x), fmt, "toward_zero"))
    return (x - lower) / float(fpsim.ulp(lower, fmt))
"""),
        ("estimates it by drawing stochastic roundings", """
def exercise3(w, u, fmt):
    x = float(fpsim.round_to(float(w), fmt)) + float(u)
    lower = float(fpsim.round_to(np.float64(x), fmt, "toward_zero"))
    draws = fpsim.round_to(np.full(20000, x), fmt, rounding="stochastic", seed=0)
    return float(np.mean(draws > lower))
"""),
        ('rounds the weight in float16 whatever the format', """
def exercise3(w, u, fmt):
    x = float(np.float16(w)) + float(u)
    lower = float(fpsim.round_to(np.float64(x), fmt, "toward_zero"))
    return (x - lower) / float(fpsim.ulp(lower, fmt))
"""),
    ],
}
