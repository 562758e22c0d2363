"""Reference solutions to lab 01, "Anatomy of a float", and wrong answers the self-checks must
reject (``WRONG``: exercise -> [(the mistake, code), ...]).

The exercises take a format by its field widths, not by name, so that they hold for formats no
library ships (the checks try e6m9 and e3m4 next to the real ones)."""

from __future__ import annotations


def exercise1(sign, exponent, mantissa, exponent_bits, mantissa_bits):
    """The value of the raw fields (sign, exponent, mantissa) of a finite number of a binary
    format with ``exponent_bits`` and ``mantissa_bits``."""
    bias = 2 ** (exponent_bits - 1) - 1
    s = -1.0 if sign else 1.0
    frac = mantissa / 2**mantissa_bits
    if exponent == 0:  # zero or subnormal: no hidden 1, and the power stays at emin = 1 - bias
        return s * frac * 2.0 ** (1 - bias)
    return s * (1.0 + frac) * 2.0 ** (exponent - bias)


def exercise2(mantissa_bits):
    """The largest N such that every integer 0, 1, ..., N is exactly a number of a format with
    ``mantissa_bits`` stored mantissa bits (and exponents enough)."""
    # With p = mantissa_bits + 1 significant bits every integer up to 2**p fits; 2**p + 1
    # would need p + 1 bits.
    return 2 ** (mantissa_bits + 1)


def exercise3(exponent_bits, mantissa_bits, has_inf=True):
    """The largest finite number of a binary format with these field widths.  ``has_inf``:
    IEEE style, the all-ones exponent holds inf and NaN; otherwise ("fn", like float8_e4m3fn)
    it holds numbers too, except the all-ones mantissa, which is NaN."""
    bias = 2 ** (exponent_bits - 1) - 1
    if not has_inf:
        top = 2**exponent_bits - 1 - bias
        return (2.0 - 2 * 2.0**-mantissa_bits) * 2.0**top
    top = 2**exponent_bits - 2 - bias  # the all-ones exponent is inf / NaN
    return (2.0 - 2.0**-mantissa_bits) * 2.0**top


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
