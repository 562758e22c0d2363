"""Reference solutions for lab 10 (block scaling)."""

from __future__ import annotations


def exercise1(block, elem):
    """The exponent k of an MX block's shared scale X = 2^k (OCP MX, scale rounding "floor"):
    k = floor(log2(amax)) - emax_elem, amax the block's largest magnitude, emax_elem the exponent
    of the element format's largest normal number (2 for e2m1, 8 for e4m3)."""
    import math

    import numpy as np

    import fpsim

    amax = float(np.max(np.abs(np.asarray(block, dtype=np.float64))))
    _, e = math.frexp(amax)  # amax = m * 2^e with 0.5 <= m < 1: floor(log2(amax)) = e - 1, exactly
    return (e - 1) - fpsim.get_format(elem).emax


def exercise2(block):
    """How many non-zero values of one MXFP4 block (scale rounding "floor") become 0: those whose
    scaled magnitude |x| / X is at most 0.25, half of e2m1's smallest subnormal 0.5 (0.25 itself
    is a tie and goes to the even neighbour, 0)."""
    import math

    import numpy as np

    x = np.abs(np.asarray(block, dtype=np.float64))
    _, e = math.frexp(float(x.max()))
    scale = 2.0 ** ((e - 1) - 2)  # e2m1: emax 2
    return int(np.sum((x != 0) & (x / scale <= 0.25)))


def exercise3(fmt, n):
    """Bytes per value of n values (n a multiple of 32) stored in ``fmt``, scales included:
    mxfp8_e4m3 (8-bit elements, one 8-bit scale per 32), mxfp4_e2m1 (4-bit elements, one 8-bit
    scale per 32), nvfp4 (4-bit elements, one 8-bit scale per 16, one float32 scale per tensor)."""
    elem_bits, block, tensor_bytes = {"mxfp8_e4m3": (8, 32, 0), "mxfp4_e2m1": (4, 32, 0), "nvfp4": (4, 16, 4)}[fmt]
    return (n * elem_bits / 8 + n // block + tensor_bytes) / n
