"""Wrong answers to lab 12's exercises (how tensor cores add): the self-checks must reject each one.

``WRONG``: exercise number -> [(the mistake, the code of a wrong ``exerciseN``), ...].  tests/labs/
test_labs.py runs each code string in the notebook's kernel in place of the exercise cell (so it
may use the names the notebook has imported) and expects the check cell after it to fail,
saying what it expected.  The reference solutions are fpsim.labs.solutions.lab12.
"""

_ONE_STEP_HEAD = '''
def exercise1(a, b, c, F=13):
    import math

    def exponent(x):
        return math.frexp(x)[1] - 1

    terms = [(x * y, exponent(x) + exponent(y)) for x, y in zip(a, b) if x * y != 0]
    if c != 0:
        terms.append((c, exponent(c)))
    if not terms:
        return 0.0
'''
_RZ13 = '''
    if total == 0:
        return 0.0
    ulp = 2.0 ** (exponent(total) - 13)
    return math.trunc(total / ulp) * ulp
'''

WRONG = {
    1: [
        ("rounds each aligned term to nearest even where the hardware truncates", _ONE_STEP_HEAD + '''
    grid = 2.0 ** (max(e for _, e in terms) - F)
    total = sum(round(p / grid) for p, _ in terms) * grid
''' + _RZ13),
        ("adds the terms exactly and rounds once at the end", _ONE_STEP_HEAD + '''
    total = sum(p for p, _ in terms)
''' + _RZ13),
        ("keeps float32's 23 fraction bits instead of F", _ONE_STEP_HEAD + '''
    grid = 2.0 ** (max(e for _, e in terms) - 23)
    total = sum(math.trunc(p / grid) for p, _ in terms) * grid
''' + _RZ13),
        ("aligns to each product's own exponent floor(log2|a*b|), not e_a + e_b", _ONE_STEP_HEAD + '''
    grid = 2.0 ** (max(exponent(p) for p, _ in terms) - F)
    total = sum(math.trunc(p / grid) for p, _ in terms) * grid
''' + _RZ13),
        ('rounds the final sum to nearest even at 13 bits, not toward zero', """
def exercise1(a, b, c, F=13):
    import math

    def exponent(x):
        return math.frexp(x)[1] - 1

    terms = [(x * y, exponent(x) + exponent(y)) for x, y in zip(a, b) if x * y != 0]
    if c != 0:
        terms.append((c, exponent(c)))
    if not terms:
        return 0.0
    grid = 2.0 ** (max(e for _, e in terms) - F)
    total = sum(math.trunc(p / grid) for p, _ in terms) * grid
    if total == 0:
        return 0.0
    ulp = 2.0 ** (exponent(total) - 13)
    return round(total / ulp) * ulp
"""),
        ('truncates each aligned term toward minus infinity (floor), not toward zero', """
def exercise1(a, b, c, F=13):
    import math

    def exponent(x):
        return math.frexp(x)[1] - 1

    terms = [(x * y, exponent(x) + exponent(y)) for x, y in zip(a, b) if x * y != 0]
    if c != 0:
        terms.append((c, exponent(c)))
    if not terms:
        return 0.0
    grid = 2.0 ** (max(e for _, e in terms) - F)
    total = sum(math.floor(p / grid) for p, _ in terms) * grid
    if total == 0:
        return 0.0
    ulp = 2.0 ** (exponent(total) - 13)
    return math.trunc(total / ulp) * ulp
"""),
        ('never rounds the sum: the truncated terms added exactly are the result', """
def exercise1(a, b, c, F=13):
    import math

    def exponent(x):
        return math.frexp(x)[1] - 1

    terms = [(x * y, exponent(x) + exponent(y)) for x, y in zip(a, b) if x * y != 0]
    if c != 0:
        terms.append((c, exponent(c)))
    if not terms:
        return 0.0
    grid = 2.0 ** (max(e for _, e in terms) - F)
    return sum(math.trunc(p / grid) for p, _ in terms) * grid
"""),
        ('rounds the sum down (floor, toward minus infinity) at 13 bits, not toward zero', """
def exercise1(a, b, c, F=13):
    import math

    def exponent(x):
        return math.frexp(x)[1] - 1

    terms = [(x * y, exponent(x) + exponent(y)) for x, y in zip(a, b) if x * y != 0]
    if c != 0:
        terms.append((c, exponent(c)))
    if not terms:
        return 0.0
    grid = 2.0 ** (max(e for _, e in terms) - F)
    total = sum(math.trunc(p / grid) for p, _ in terms) * grid
    if total == 0:
        return 0.0
    ulp = 2.0 ** (exponent(total) - 13)
    return math.floor(total / ulp) * ulp
"""),
        ('truncates the products but adds c exactly, unaligned', """
def exercise1(a, b, c, F=13):
    import math

    def exponent(x):
        return math.frexp(x)[1] - 1

    terms = [(x * y, exponent(x) + exponent(y)) for x, y in zip(a, b) if x * y != 0]
    if c != 0:
        terms.append((c, exponent(c)))
    if not terms:
        return 0.0
    grid = 2.0 ** (max(e for _, e in terms) - F)
    total = sum(math.trunc(p / grid) for p, _ in terms[:len(terms) - (c != 0)]) * grid + c
    if total == 0:
        return 0.0
    ulp = 2.0 ** (exponent(total) - 13)
    return math.trunc(total / ulp) * ulp
"""),
    ],
    2: [
        ("one rounding at the end: k * p rounded toward zero to 13 bits", '''
def exercise2(p, k, F=13, L=32):
    import math
    total = k * p
    ulp = 2.0 ** (math.frexp(total)[1] - 1 - 13)
    return math.trunc(total / ulp) * ulp
'''),
        ("a float32 accumulator: what fpsim's default matmul does", '''
def exercise2(p, k, F=13, L=32):
    import numpy as np
    return float(np.float32(k) * np.float32(p))
'''),
        ("rounds the aligned products to nearest even in each step", '''
def exercise2(p, k, F=13, L=32):
    import math
    c = 0.0
    for start in range(0, k, L):
        n = min(L, k - start)
        e_c = math.frexp(c)[1] - 1 if c else -999
        e_p = math.frexp(p)[1] - 1
        grid = 2.0 ** (max(e_c, e_p) - F)
        total = math.trunc(c / grid) * grid + n * round(p / grid) * grid
        ulp = 2.0 ** (math.frexp(total)[1] - 1 - 13)
        c = math.trunc(total / ulp) * ulp
    return c
'''),
        ("keeps the float32 width (F = 23) in every step", '''
def exercise2(p, k, F=13, L=32):
    import math
    c = 0.0
    for start in range(0, k, L):
        n = min(L, k - start)
        e_c = math.frexp(c)[1] - 1 if c else -999
        e_p = math.frexp(p)[1] - 1
        grid = 2.0 ** (max(e_c, e_p) - 23)
        total = math.trunc(c / grid) * grid + n * math.trunc(p / grid) * grid
        ulp = 2.0 ** (math.frexp(total)[1] - 1 - 13)
        c = math.trunc(total / ulp) * ulp
    return c
'''),
        ("rounds each step's sum to nearest even at 13 bits, not toward zero", """
def exercise2(p, k, F=13, L=32):
    import math
    c = 0.0
    for start in range(0, k, L):
        n = min(L, k - start)
        e_c = math.frexp(c)[1] - 1 if c else -999
        e_p = math.frexp(p)[1] - 1
        grid = 2.0 ** (max(e_c, e_p) - F)
        total = math.trunc(c / grid) * grid + n * math.trunc(p / grid) * grid
        ulp = 2.0 ** (math.frexp(total)[1] - 1 - 13)
        c = round(total / ulp) * ulp
    return c
"""),
        ("never rounds a step's sum: each step's exact sum of truncated terms carried on", """
def exercise2(p, k, F=13, L=32):
    import math
    c = 0.0
    for start in range(0, k, L):
        n = min(L, k - start)
        e_c = math.frexp(c)[1] - 1 if c else -999
        e_p = math.frexp(p)[1] - 1
        grid = 2.0 ** (max(e_c, e_p) - F)
        total = math.trunc(c / grid) * grid + n * math.trunc(p / grid) * grid
        c = total
    return c
"""),
        ('drops the last, shorter step: k // L steps of L', """
def exercise2(p, k, F=13, L=32):
    import math
    c = 0.0
    for _ in range(k // L):
        e_c = math.frexp(c)[1] - 1 if c else -999
        grid = 2.0 ** (max(e_c, math.frexp(p)[1] - 1) - F)
        total = math.trunc(c / grid) * grid + L * math.trunc(p / grid) * grid
        ulp = 2.0 ** (math.frexp(total)[1] - 1 - 13)
        c = math.trunc(total / ulp) * ulp
    return c
"""),
    ],
}
