"""Reference solutions to lab 01, "Anatomy of a float".

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
