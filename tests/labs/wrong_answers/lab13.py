"""Wrong answers to lab 13's exercises ("Rounding modes"): the self-checks must reject each one.

``WRONG``: exercise number -> [(the mistake, the code of a wrong ``exerciseN``), ...].  tests/labs/
test_labs.py runs each code string in the notebook's kernel in place of the exercise cell (so it
may use the names the notebook has imported) and expects the check cell after it to fail,
saying what it expected.  The reference solutions are fpsim.labs.solutions.lab13.
"""

_GRID = '''
    import math
    f = fpsim.get_format(fmt)
    a = abs(x)
    _, e = math.frexp(a)
    ulp = 2.0 ** (max(e - 1, f.emin) - f.mantissa_bits)
'''

WRONG = {
    1: [
        ("rounds to nearest (ties to even) instead of toward zero", """
def exercise1(x, fmt):""" + _GRID + """
    return math.copysign(min(round(a / ulp) * ulp, f.max), x)
"""),
        ("floor of the signed value: rounds toward minus infinity, not toward zero", """
def exercise1(x, fmt):""" + _GRID + """
    return max(min(math.floor(x / ulp) * ulp, f.max), -f.max)
"""),
        ("no clamp at the largest number: beyond max it keeps cutting on a grid the format does not have", """
def exercise1(x, fmt):""" + _GRID + """
    return math.copysign(math.floor(a / ulp) * ulp, x)
"""),
        ("no floor at emin: below the smallest normal the gap keeps shrinking", """
def exercise1(x, fmt):
    import math
    f = fpsim.get_format(fmt)
    a = abs(x)
    _, e = math.frexp(a)
    ulp = 2.0 ** (e - 1 - f.mantissa_bits)
    return math.copysign(min(math.floor(a / ulp) * ulp, f.max), x)
"""),
        ("off by one binade: frexp's exponent taken as the binade, so the gap is twice too wide", """
def exercise1(x, fmt):
    import math
    f = fpsim.get_format(fmt)
    a = abs(x)
    _, e = math.frexp(a)
    ulp = 2.0 ** (max(e, f.emin) - f.mantissa_bits)
    return math.copysign(min(math.floor(a / ulp) * ulp, f.max), x)
"""),
        ("rounds x to float32 first (to nearest), then cuts: two roundings", """
def exercise1(x, fmt):
    x = float(np.float32(x))""" + _GRID + """
    return math.copysign(min(math.floor(a / ulp) * ulp, f.max), x)
"""),
        ("always float16's grid, whatever the format", """
def exercise1(x, fmt):
    import math
    a = abs(x)
    _, e = math.frexp(a)
    ulp = 2.0 ** (max(e - 1, -14) - 10)
    return math.copysign(min(math.floor(a / ulp) * ulp, 65504.0), x)
"""),
        ('clamps only at the top: min(result, max) lets a negative x fall below -max', """
def exercise1(x, fmt):
    import math
    f = fpsim.get_format(fmt)
    a = abs(x)
    _, e = math.frexp(a)
    ulp = 2.0 ** (max(e - 1, f.emin) - f.mantissa_bits)
    return min(math.copysign(math.floor(a / ulp) * ulp, x), f.max)
"""),
        ('the subnormal gap one binade too fine: emin - 1', """
def exercise1(x, fmt):
    import math
    f = fpsim.get_format(fmt)
    a = abs(x)
    _, e = math.frexp(a)
    ulp = 2.0 ** (max(e - 1, f.emin - 1) - f.mantissa_bits)
    return math.copysign(min(math.floor(a / ulp) * ulp, f.max), x)
"""),
        ('flushes below the smallest normal: no subnormals', """
def exercise1(x, fmt):
    import math
    f = fpsim.get_format(fmt)
    a = abs(x)
    _, e = math.frexp(a)
    ulp = 2.0 ** (max(e - 1, f.emin) - f.mantissa_bits)
    if a < f.tiny:
        return math.copysign(0.0, x)
    return math.copysign(min(math.floor(a / ulp) * ulp, f.max), x)
"""),
    ],
    2: [
        ("rounds to nearest (ties to even): the neighbour it picks is often even", """
def exercise2(x, fmt):""" + _GRID + """
    return math.copysign(round(a / ulp) * ulp, x)
"""),
        ("truncates and never sets the last bit: that is toward zero", """
def exercise2(x, fmt):""" + _GRID + """
    return math.copysign(math.floor(a / ulp) * ulp, x)
"""),
        ("makes every result odd, also an x the format holds exactly", """
def exercise2(x, fmt):""" + _GRID + """
    n = math.floor(a / ulp)
    return math.copysign((n if n % 2 else n + 1) * ulp, x)
"""),
        ("rounds away from zero when inexact, odd or not", """
def exercise2(x, fmt):""" + _GRID + """
    return math.copysign(math.ceil(a / ulp) * ulp, x)
"""),
        ("to nearest, then the last bit set: can land outside the two neighbours", """
def exercise2(x, fmt):""" + _GRID + """
    n = round(a / ulp)
    return math.copysign((n | 1 if n != a / ulp else n) * ulp, x)
"""),
        ("rounds x to float32 first (to nearest), then to odd: two roundings", """
def exercise2(x, fmt):
    x = float(np.float32(x))""" + _GRID + """
    n = math.floor(a / ulp)
    if n != a / ulp and n % 2 == 0:
        n += 1
    return math.copysign(n * ulp, x)
"""),
    ],
    3: [
        ("zero: stochastic rounding is unbiased - but only with exact probabilities", """
def exercise3(v, fmt, k):
    return 0.0
"""),
        ("delta rounded to k bits (the 'rne' variant), not truncated", """
def exercise3(v, fmt, k):
    import math
    f = fpsim.get_format(fmt)
    _, e = math.frexp(abs(v))
    units = math.ldexp(abs(v), f.mantissa_bits - max(e - 1, f.emin))
    delta = units - math.floor(units)
    b = round(delta * 2**k) / 2**k - delta
    return -b if v < 0 else b
"""),
        ("off by one bit: delta cut to k + 1 bits", """
def exercise3(v, fmt, k):
    import math
    f = fpsim.get_format(fmt)
    _, e = math.frexp(abs(v))
    units = math.ldexp(abs(v), f.mantissa_bits - max(e - 1, f.emin))
    delta = units - math.floor(units)
    b = math.floor(delta * 2 ** (k + 1)) / 2 ** (k + 1) - delta
    return -b if v < 0 else b
"""),
        ("the sign turned round: v - E[round(v)]", """
def exercise3(v, fmt, k):
    import math
    f = fpsim.get_format(fmt)
    _, e = math.frexp(abs(v))
    units = math.ldexp(abs(v), f.mantissa_bits - max(e - 1, f.emin))
    delta = units - math.floor(units)
    b = delta - math.floor(delta * 2**k) / 2**k
    return -b if v < 0 else b
"""),
        ("in units of the value, not in ulps", """
def exercise3(v, fmt, k):
    import math
    f = fpsim.get_format(fmt)
    _, e = math.frexp(abs(v))
    ulp_exp = max(e - 1, f.emin) - f.mantissa_bits
    units = math.ldexp(abs(v), -ulp_exp)
    delta = units - math.floor(units)
    b = (math.floor(delta * 2**k) / 2**k - delta) * 2.0**ulp_exp
    return -b if v < 0 else b
"""),
        ("ignores the sign: a negative v's magnitude is rounded, so its bias points up", """
def exercise3(v, fmt, k):
    import math
    f = fpsim.get_format(fmt)
    _, e = math.frexp(abs(v))
    units = math.ldexp(abs(v), f.mantissa_bits - max(e - 1, f.emin))
    delta = units - math.floor(units)
    return math.floor(delta * 2**k) / 2**k - delta
"""),
        ("always bfloat16's 7 mantissa bits, whatever the format", """
def exercise3(v, fmt, k):
    import math
    _, e = math.frexp(abs(v))
    units = math.ldexp(abs(v), 7 - max(e - 1, -126))
    delta = units - math.floor(units)
    b = math.floor(delta * 2**k) / 2**k - delta
    return -b if v < 0 else b
"""),
        ('no floor at emin: a subnormal v measured in gaps that keep shrinking', """
def exercise3(v, fmt, k):
    import math
    f = fpsim.get_format(fmt)
    _, e = math.frexp(abs(v))
    units = math.ldexp(abs(v), f.mantissa_bits - (e - 1))
    delta = units - math.floor(units)
    b = math.floor(delta * 2**k) / 2**k - delta
    return -b if v < 0 else b
"""),
        ('the subnormal gap one binade too fine: emin - 1', """
def exercise3(v, fmt, k):
    import math
    f = fpsim.get_format(fmt)
    _, e = math.frexp(abs(v))
    units = math.ldexp(abs(v), f.mantissa_bits - max(e - 1, f.emin - 1))
    delta = units - math.floor(units)
    b = math.floor(delta * 2**k) / 2**k - delta
    return -b if v < 0 else b
"""),
        ('the bias always negative: -|bias| whatever the sign of v', """
def exercise3(v, fmt, k):
    import math
    f = fpsim.get_format(fmt)
    _, e = math.frexp(abs(v))
    units = math.ldexp(abs(v), f.mantissa_bits - max(e - 1, f.emin))
    delta = units - math.floor(units)
    return -abs(math.floor(delta * 2**k) / 2**k - delta)
"""),
    ],
}
