"""Bit-pattern views: the one table from a width to the unsigned integer dtype of its patterns.

Every bit trick reads a float array's patterns through an unsigned integer view of the same size
(float16 and bfloat16 as uint16, fp8 / fp6 / fp4 as uint8, float32 as uint32), and every code point
or k-bit random integer is held in the narrowest unsigned dtype that fits.  Both come from
:data:`UINT_VIEWS` here, so no module keeps a table of its own.
"""

from __future__ import annotations

import numpy as np

from ..checks import check_integer

__all__ = ["UINT_VIEWS", "bits_view", "uint_for_bits"]

# bytes -> the unsigned integer dtype of that size
UINT_VIEWS: dict[int, np.dtype] = {n: np.dtype(f"uint{8 * n}") for n in (1, 2, 4, 8)}


def bits_view(x) -> np.dtype:
    """The unsigned integer dtype to view ``x``'s storage through, bit for bit: ``x`` a dtype (or
    anything ``np.dtype`` takes), an array, or a :class:`~fpsim.formats.Format` (its storage dtype:
    float32 for P3109 and the other formats held in float32; their code points are
    :func:`uint_for_bits` of their width).  ``a.view(bits_view(a))`` gives a's patterns."""
    dt = x if isinstance(x, type | str | np.dtype) else getattr(x, "dtype", x)  # np.float16 has a .dtype too
    try:
        dt = np.dtype(dt)
    except TypeError:
        raise TypeError(f"bits_view: expected a dtype, an array or a Format, got {type(x).__name__}") from None
    view = UINT_VIEWS.get(dt.itemsize)
    if view is None:
        raise ValueError(f"bits_view: no unsigned integer view of {dt.itemsize}-byte dtype {dt} (known sizes: "
                         f"{', '.join(map(str, UINT_VIEWS))} bytes)")
    return view


def uint_for_bits(bits: int) -> np.dtype:
    """The narrowest unsigned integer dtype holding ``bits``-bit patterns (1..64): the code points of
    a format of that width (uint8 up to 8 bits, fp6 / fp4 in the low bits), k random bits."""
    check_integer(bits, "uint_for_bits: bits", 1, 64)
    return next(v for n, v in UINT_VIEWS.items() if bits <= 8 * n)
