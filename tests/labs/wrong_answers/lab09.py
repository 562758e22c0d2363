"""Wrong answers to lab 09's exercises ("Where half precision overflows"): the self-checks must reject each one.

``WRONG``: exercise number -> [(the mistake, the code of a wrong ``exerciseN``), ...].  tests/labs/
test_labs.py runs each code string in the notebook's kernel in place of the exercise cell (so it
may use the names the notebook has imported) and expects the check cell after it to fail,
saying what it expected.  The reference solutions are fpsim.labs.solutions.lab09.
"""

WRONG = {
    1: [
        ("forgets the row's sum: only exp(s) must be finite", """
def exercise1(fmt, n):
    import math
    return int(math.log(fpsim.get_format(fmt).max))
"""),
        ("uses float32's range whatever the format (what autocast would give)", """
def exercise1(fmt, n):
    import math
    return int(math.log(3.4028234663852886e38 / n))
"""),
        ("rounds log(max / n) to the nearest integer instead of taking the floor", """
def exercise1(fmt, n):
    import math
    return round(math.log(fpsim.get_format(fmt).max / n))
"""),
        ("the closed form floor(log(max / n)): ignores that exp(s) and the sum are rounded", """
def exercise1(fmt, n):
    import math
    return math.floor(math.log(fpsim.get_format(fmt).max / n))
"""),
        ("rounds exp(s) but requires the exact sum n * exp(s) to stay <= max (it may round down to max)", """
def exercise1(fmt, n):
    f = fpsim.get_format(fmt)
    s = 0
    while True:
        e = float(fpsim.round_to(np.exp(np.float32(s + 1)), fmt))
        if not np.isfinite(e) or n * e > f.max:
            return s
        s += 1
"""),
        ("returns the first score that breaks, not the last that works", """
def exercise1(fmt, n):
    s = 0
    with np.errstate(over="ignore"):
        while True:
            e = fpsim.round_to(np.exp(np.float32(s)), fmt)
            total = fpsim.round_to(np.float32(n) * np.float32(e), fmt)
            if not (np.isfinite(e) and np.isfinite(total)):
                return s
            s += 1
"""),
    ],
    2: [
        ("a whole ulp at max: -inf indeed, but half of it already is", """
def exercise2(fmt):
    f = fpsim.get_format(fmt)
    return float(fpsim.ulp(f.max, fmt))
"""),
        ("believes any negative score pushes finfo.min over the edge", """
def exercise2(fmt):
    return float(fpsim.get_format(fmt).smallest_subnormal)
"""),
        ("takes bfloat16's max whatever the format", """
def exercise2(fmt):
    return float(fpsim.ulp(fpsim.get_format("bfloat16").max, "bfloat16")) / 2
"""),
        ("float16's edge, 16, for every format", """
def exercise2(fmt):
    return 16.0
"""),
        ("believes the tie at half an ulp rounds back to max: takes the next number above it", """
def exercise2(fmt):
    f = fpsim.get_format(fmt)
    half = float(fpsim.ulp(f.max, fmt)) / 2
    return half + float(fpsim.ulp(half, fmt))
"""),
    ],
    3: [
        ("forgets the sum: only a*a must stay below 65504", """
def exercise3(n):
    import math
    return int(math.sqrt(65504.0))
"""),
        ("takes 2**16 for float16's limit", """
def exercise3(n):
    import math
    return int(math.sqrt(2.0**16 / n))
"""),
        ("sums the squares in float32 (what layer_norm does by default, not what the exercise asks)", """
def exercise3(n):
    import math
    return math.isqrt(int(3.4028234663852886e38) // n)
"""),
        ("the closed form floor(sqrt(65504 / n)): ignores the rounding of the squares and the partial sums", """
def exercise3(n):
    import math
    return int(math.sqrt(65504 / n))
"""),
        ("the exact sum n * a*a must round to a finite float16 (forgets that every partial sum rounds)", """
def exercise3(n):
    a = 1
    while np.isfinite(np.float16(n * float(a + 1) ** 2)):
        a += 1
    return a
"""),
        ("knows values up to 65520 round down, but sums exactly: isqrt(65519 // n)", """
def exercise3(n):
    import math
    return math.isqrt(65519 // n)
"""),
    ],
}
