"""Wrong answers to lab 02's exercises ("Underflow and the worked example"): the self-checks must reject each one.

``WRONG``: exercise number -> [(the mistake, the code of a wrong ``exerciseN``), ...].  tests/labs/
test_labs.py runs each code string in the notebook's kernel in place of the exercise cell (so it
may use the names the notebook has imported) and expects the check cell after it to fail,
saying what it expected.  The reference solutions are fpsim.labs.solutions.lab02.
"""

WRONG = {
    1: [
        ("classifies x itself instead of the rounded value", """
def exercise1(x):
    a = abs(x)
    if a == 0:
        return "zero"
    if a > 65504:
        return "inf"
    return "subnormal" if a < 2.0**-14 else "normal"
"""),
        ("the folklore threshold: below 6e-8 is zero", """
def exercise1(x):
    a = abs(x)
    if a < 6e-8:
        return "zero"
    r = abs(float(fpsim.round_to(x, "float16")))
    if r == float("inf"):
        return "inf"
    return "subnormal" if r < 2.0**-14 else "normal"
"""),
        ("rounds into bfloat16 instead of float16", """
def exercise1(x):
    r = abs(float(fpsim.round_to(x, "bfloat16")))
    if r == 0:
        return "zero"
    if r == float("inf"):
        return "inf"
    return "subnormal" if r < 2.0**-14 else "normal"
"""),
        ("calls fpsim.classify, which answers the question for you", """
def exercise1(x):
    return str(fpsim.classify(x, "float16").names())
"""),
    ],
    2: [
        ("never casts to float16 (the source text's code): S*g/S", """
def exercise2(g, scale):
    return float(g * scale / scale)
"""),
        ("unscales in float16 instead of float32", """
def exercise2(g, scale):
    scaled16 = fpsim.round_to(np.float32(g) * np.float32(scale), "float16")
    return float(fpsim.round_to(np.float32(scaled16) * np.float32(1.0 / scale), "float16"))
"""),
        ("unscales in float64 (divides by S) instead of multiplying by float32(1/S)", """
def exercise2(g, scale):
    scaled16 = fpsim.round_to(np.float32(g) * np.float32(scale), "float16")
    return float(scaled16) / scale
"""),
        ("rounds into bfloat16 instead of float16", """
def exercise2(g, scale):
    scaled = fpsim.round_to(np.float32(g) * np.float32(scale), "bfloat16")
    return float(np.float32(scaled) * np.float32(1.0 / scale))
"""),
        ("forgets to unscale", """
def exercise2(g, scale):
    return float(fpsim.round_to(np.float32(g) * np.float32(scale), "float16"))
"""),
    ],
    3: [
        ("the smallest normal written as 6.1e-5 instead of 2**-14", """
def exercise3(g):
    k = 0
    while abs(g) * 2.0**k < 6.1e-5:
        k += 1
    return 2.0**k
"""),
        ("strictly above 2**-14 instead of at least", """
def exercise3(g):
    k = 0
    while abs(g) * 2.0**k <= 2.0**-14:
        k += 1
    return 2.0**k
"""),
        ("aims at the smallest subnormal (survives) instead of the smallest normal", """
def exercise3(g):
    k = 0
    while abs(g) * 2.0**k < 2.0**-24:
        k += 1
    return 2.0**k
"""),
        ("returns the exponent k instead of the scale 2**k", """
def exercise3(g):
    k = 0
    while abs(g) * 2.0**k < 2.0**-14:
        k += 1
    return k
"""),
        ("calls the library function the exercise asks you to write", """
def exercise3(g):
    from fpsim.examples import smallest_normalizing_scale
    return smallest_normalizing_scale(g, "float16")
"""),
    ],
}
