"""Reference solutions to lab 01, "Anatomy of a float"."""

from __future__ import annotations

import fpsim


def exercise1(sign, exponent, mantissa, fmt):
    """The value of the fields (sign, exponent, mantissa) of a finite number of ``fmt``."""
    f = fpsim.get_format(fmt)
    s = -1.0 if sign else 1.0
    frac = mantissa / 2**f.mantissa_bits
    if exponent == 0:  # zero or subnormal: no hidden 1, and the power stays at emin
        return s * frac * 2.0**f.emin
    return s * (1.0 + frac) * 2.0 ** (exponent - f.bias)


def exercise2(fmt):
    """The largest N such that every integer 0, 1, ..., N is exactly a number of ``fmt``."""
    f = fpsim.get_format(fmt)
    # With p = mantissa_bits + 1 significant bits every integer up to 2**p fits; 2**p + 1
    # would need p + 1 bits.
    return 2 ** (f.mantissa_bits + 1)


def exercise3(fmt):
    """The largest finite number of ``fmt``, from its exponent and mantissa widths."""
    f = fpsim.get_format(fmt)
    bias = 2 ** (f.exponent_bits - 1) - 1
    if f.name == "float8_e4m3fn":
        # No inf: the all-ones exponent holds numbers too, except mantissa 111 (NaN).
        top = 2**f.exponent_bits - 1 - bias
        return (2.0 - 2 * 2.0**-f.mantissa_bits) * 2.0**top
    top = 2**f.exponent_bits - 2 - bias  # the all-ones exponent is inf / NaN
    return (2.0 - 2.0**-f.mantissa_bits) * 2.0**top
