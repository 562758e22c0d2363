"""Wrong answers to lab 10's exercises (block scaling): the self-checks must reject each one.

``WRONG``: exercise number -> [(the mistake, the code of a wrong ``exerciseN``), ...].  tests/labs/
test_labs.py runs each code string in the notebook's kernel in place of the exercise cell (so it
may use the names the notebook has imported) and expects the check cell after it to fail,
saying what it expected.  The reference solutions are fpsim.labs.solutions.lab10.
"""

WRONG = {
    1: [
        ("forgets emax_elem: the scale that maps amax to 1, not to the format's top binade", """
def exercise1(block, elem):
    import math
    return math.floor(math.log2(float(np.max(np.abs(block)))))
"""),
        ("rounds log2(amax) up (the 'ceil' rounding, not the spec's floor)", """
def exercise1(block, elem):
    import math
    return math.ceil(math.log2(float(np.max(np.abs(block))))) - fpsim.get_format(elem).emax
"""),
        ("divides by the element format's max (6 for e2m1) instead of subtracting its exponent", """
def exercise1(block, elem):
    import math
    return math.floor(math.log2(float(np.max(np.abs(block))) / fpsim.get_format(elem).max))
"""),
        ("takes the mean magnitude instead of the largest", """
def exercise1(block, elem):
    import math
    return math.floor(math.log2(float(np.mean(np.abs(block))))) - fpsim.get_format(elem).emax
"""),
        ("takes the largest value, not the largest magnitude: a negative outlier is missed", """
def exercise1(block, elem):
    import math
    return math.floor(math.log2(float(np.max(block)))) - fpsim.get_format(elem).emax
"""),
    ],
    2: [
        ("strictly below 0.25: the tie at 0.25 rounds to the even neighbour 0 and is flushed too", """
def exercise2(block):
    import math
    x = np.abs(np.asarray(block, dtype=np.float64))
    scale = 2.0 ** (math.floor(math.log2(x.max())) - 2)
    return int(np.sum((x != 0) & (x / scale < 0.25)))
"""),
        ("counts the zeros that were zero already", """
def exercise2(block):
    import math
    x = np.abs(np.asarray(block, dtype=np.float64))
    scale = 2.0 ** (math.floor(math.log2(x.max())) - 2)
    return int(np.sum(x / scale <= 0.25))
"""),
        ("forgets emax_elem: a scale 4x too large", """
def exercise2(block):
    import math
    x = np.abs(np.asarray(block, dtype=np.float64))
    scale = 2.0 ** math.floor(math.log2(x.max()))
    return int(np.sum((x != 0) & (x / scale <= 0.25)))
"""),
        ("uses the smallest normal (1.0) as the threshold: values that become 0.5 are not lost", """
def exercise2(block):
    import math
    x = np.abs(np.asarray(block, dtype=np.float64))
    scale = 2.0 ** (math.floor(math.log2(x.max())) - 2)
    return int(np.sum((x != 0) & (x / scale < 1.0)))
"""),
    ],
    3: [
        ("forgets the scales", """
def exercise3(fmt, n):
    return {"mxfp8_e4m3": 1.0, "mxfp4_e2m1": 0.5, "nvfp4": 0.5}[fmt]
"""),
        ("stores a scale with every element", """
def exercise3(fmt, n):
    return {"mxfp8_e4m3": 2.0, "mxfp4_e2m1": 1.5, "nvfp4": 1.5}[fmt]
"""),
        ("NVFP4's float32 tensor scale counted once per block of 16", """
def exercise3(fmt, n):
    return {"mxfp8_e4m3": 1 + 1 / 32, "mxfp4_e2m1": 0.5 + 1 / 32, "nvfp4": 0.5 + 1 / 16 + 4 / 16}[fmt]
"""),
        ("NVFP4 with MX's blocks of 32 and no tensor scale", """
def exercise3(fmt, n):
    return {"mxfp8_e4m3": 1 + 1 / 32, "mxfp4_e2m1": 0.5 + 1 / 32, "nvfp4": 0.5 + 1 / 32}[fmt]
"""),
    ],
}
