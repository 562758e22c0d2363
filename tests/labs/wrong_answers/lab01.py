"""Wrong answers to lab 01's exercises ("Anatomy of a float"): the self-checks must reject each one.

``WRONG``: exercise number -> [(the mistake, the code of a wrong ``exerciseN``), ...].  tests/labs/
test_labs.py runs each code string in the notebook's kernel in place of the exercise cell (so it
may use the names the notebook has imported) and expects the check cell after it to fail,
saying what it expected.  The reference solutions are fpsim.labs.solutions.lab01.
"""

WRONG = {
    1: [
        ("a hidden 1 for subnormals too", """
def exercise1(sign, exponent, mantissa, exponent_bits, mantissa_bits):
    bias = 2 ** (exponent_bits - 1) - 1
    s = -1.0 if sign else 1.0
    e = exponent if exponent else 1
    return s * (1 + mantissa / 2**mantissa_bits) * 2.0 ** (e - bias)
"""),
        ("subnormals at 2**(0 - bias), one binade too low", """
def exercise1(sign, exponent, mantissa, exponent_bits, mantissa_bits):
    bias = 2 ** (exponent_bits - 1) - 1
    s = -1.0 if sign else 1.0
    if exponent == 0:
        return s * mantissa / 2**mantissa_bits * 2.0 ** (-bias)
    return s * (1 + mantissa / 2**mantissa_bits) * 2.0 ** (exponent - bias)
"""),
        ("the bias taken as 2**(e-1) instead of 2**(e-1) - 1", """
def exercise1(sign, exponent, mantissa, exponent_bits, mantissa_bits):
    bias = 2 ** (exponent_bits - 1)
    s = -1.0 if sign else 1.0
    if exponent == 0:
        return s * mantissa / 2**mantissa_bits * 2.0 ** (1 - bias)
    return s * (1 + mantissa / 2**mantissa_bits) * 2.0 ** (exponent - bias)
"""),
        ("forgets the sign", """
def exercise1(sign, exponent, mantissa, exponent_bits, mantissa_bits):
    bias = 2 ** (exponent_bits - 1) - 1
    if exponent == 0:
        return mantissa / 2**mantissa_bits * 2.0 ** (1 - bias)
    return (1 + mantissa / 2**mantissa_bits) * 2.0 ** (exponent - bias)
"""),
        ("lets numpy / ml_dtypes decode the pattern of a known format", """
def exercise1(sign, exponent, mantissa, exponent_bits, mantissa_bits):
    name = {(8, 23): "float32", (5, 10): "float16", (8, 7): "bfloat16", (4, 3): "float8_e4m3fn",
            (5, 2): "float8_e5m2"}[(exponent_bits, mantissa_bits)]
    return bits.from_fields(sign, exponent, mantissa, name)
"""),
    ],
    2: [
        ("forgets the hidden bit: 2**mantissa_bits", """
def exercise2(mantissa_bits):
    return 2**mantissa_bits
"""),
        ("one short: 2**(mantissa_bits + 1) - 1", """
def exercise2(mantissa_bits):
    return 2 ** (mantissa_bits + 1) - 1
"""),
        ("one too far: 2**(mantissa_bits + 1) + 1", """
def exercise2(mantissa_bits):
    return 2 ** (mantissa_bits + 1) + 1
"""),
        ("counts with a known format instead of reasoning", """
def exercise2(mantissa_bits):
    name = {23: "float32", 10: "float16", 7: "bfloat16", 3: "float8_e4m3fn", 2: "float8_e5m2"}[mantissa_bits]
    ints = np.arange(5000.0)
    kept = ints.astype(fpsim.get_format(name).dtype).astype(np.float64) == ints
    return int(np.argmin(kept)) - 1
"""),
    ],
    3: [
        ("forgets that the all-ones exponent is reserved for inf and NaN", """
def exercise3(exponent_bits, mantissa_bits, has_inf=True):
    bias = 2 ** (exponent_bits - 1) - 1
    return (2.0 - 2.0**-mantissa_bits) * 2.0 ** (2**exponent_bits - 1 - bias)
"""),
        ("ignores has_inf: e4m3fn treated like an IEEE format (240)", """
def exercise3(exponent_bits, mantissa_bits, has_inf=True):
    bias = 2 ** (exponent_bits - 1) - 1
    return (2.0 - 2.0**-mantissa_bits) * 2.0 ** (2**exponent_bits - 2 - bias)
"""),
        ("without inf, forgets the NaN pattern: e4m3fn's max taken as 480", """
def exercise3(exponent_bits, mantissa_bits, has_inf=True):
    bias = 2 ** (exponent_bits - 1) - 1
    top = 2**exponent_bits - (2 if has_inf else 1) - bias
    return (2.0 - 2.0**-mantissa_bits) * 2.0**top
"""),
        ("the top power of two alone, without the mantissa", """
def exercise3(exponent_bits, mantissa_bits, has_inf=True):
    bias = 2 ** (exponent_bits - 1) - 1
    return 2.0 ** (2**exponent_bits - (2 if has_inf else 1) - bias)
"""),
        ("reads it from ml_dtypes.finfo for the formats it knows", """
def exercise3(exponent_bits, mantissa_bits, has_inf=True):
    import ml_dtypes
    name = {(8, 23): np.float32, (5, 10): np.float16, (8, 7): ml_dtypes.bfloat16, (4, 3): ml_dtypes.float8_e4m3fn,
            (5, 2): ml_dtypes.float8_e5m2}[(exponent_bits, mantissa_bits)]
    return float(ml_dtypes.finfo(name).max)
"""),
    ],
}
