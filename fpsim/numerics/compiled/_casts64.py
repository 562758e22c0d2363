"""The compiled roundings from float64 (the loop of ``_round64.py``) as the float64 branches of
``fpsim/formats/round.py``'s cast to nearest: flatten the input, allocate the result, run the loop
with the format's constants, and hand the few NaNs, whose payload bits a library cast decides, to
the casts the numpy path runs on them - so each returns what the numpy path returns, bit for bit,
in the same dtype and shape (C-ordered).  The element formats' codes for overflow and -0 are read
from the numpy path's own narrowing (``kernels.narrow_cast``), passed in by the caller.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from . import _round64

__all__ = ["ROUNDINGS64"]

_U64 = np.uint64


def _rne(x: np.ndarray, dtype, man: int, emin: int, emax: int, codes: tuple[int, int]) -> tuple[np.ndarray, bool]:
    """(float64 x rounded to nearest even onto the format of ``man`` mantissa bits and normal binades
    2**emin .. 2**emax, as ``dtype``, whether x holds a NaN); ``codes``: (the one overflow gives,
    -0's), as ``_round64.rne_bits64`` takes them."""
    out = np.empty(x.shape, dtype)
    dst = out.reshape(-1).view(np.uint16 if out.itemsize == 2 else np.uint8)
    src = np.ascontiguousarray(x).reshape(-1).view(_U64)  # a copy only where x is not contiguous
    nan = _round64.rne_bits64(src, dst, _U64((1023 + emin) << 52), _U64((1024 + emax) << 52), _U64(man),
                              _U64((emin + 1075 - man) << man), *map(_U64, codes))
    return out, bool(nan)


def f64_to_f16(x: np.ndarray, saturate: bool = False) -> np.ndarray:
    """float64 -> float16, to nearest even (numpy's float64 -> float16 cast, which ``kernels.f32_to_f16``
    runs on float64); ``saturate``: overflow and +-inf to +-65504, as ``round._saturate`` makes them.
    NaNs by numpy's cast (their payload bits), as the numpy path does."""
    out, nan = _rne(x, np.float16, 10, -14, 15, (0x7BFF if saturate else 0x7C00, 0x8000))
    if nan:
        where = np.isnan(x)
        out[where] = x[where].astype(np.float16)
    return out


def f64_to_bf16(x: np.ndarray, saturate: bool = False) -> np.ndarray:
    """float64 -> bfloat16, rounded once to nearest even (``round._f64_to_bf16``); overflow to +-inf,
    or with ``saturate`` to +-max (+-inf inputs too), as ``round._saturate`` makes them.  NaNs as
    there: numpy's cast to float32, then ml_dtypes' to bfloat16 (``_saturate`` widens those to
    float32 and narrows them back where it replaces anything: the same NaNs, ml_dtypes' quiet ones)."""
    out, nan = _rne(x, ml_dtypes.bfloat16, 7, -126, 127, (0x7F7F if saturate else 0x7F80, 0x8000))
    if nan:
        where = np.isnan(x)
        out[where] = x[where].astype(np.float32).astype(ml_dtypes.bfloat16)
    return out


def f64_narrow(x: np.ndarray, f, saturate: bool, narrow) -> np.ndarray:
    """float64 -> a one-byte element format ``f`` (fp8 / fp6 / fp4; the Format, read for its mantissa
    bits, emin, emax and max), to nearest even, in f's dtype: ``round._to_odd_f32`` then
    ``narrow(float32 values)``, the numpy path's ``kernels.narrow_cast`` for f and ``saturate``,
    whose codes for +inf (what overflow gives: inf, NaN or the largest value; it must be the largest
    value's code or the next) and -0 (the sign bit) are the codes used.  NaNs as there: numpy's cast
    to float32 (to odd leaves a NaN alone), then ``narrow``."""
    codes = _CODES.get((f, bool(saturate)))
    if codes is None:
        over, zero, top = (int(c) for c in narrow(np.float32([np.inf, -0.0, f.max])).view(np.uint8))
        if over not in (top, top + 1):  # the kernel's overflow is a clamp of the codes
            raise ValueError(f"{f.name}: overflow gives code {over:#x}, not the largest value's {top:#x} or the next")
        codes = _CODES[(f, bool(saturate))] = (over, zero)
    out, nan = _rne(x, np.uint8, f.mantissa_bits, f.emin, f.emax, codes)
    out = out.view(f.dtype)
    if nan:
        where = np.isnan(x)
        out[where] = narrow(x[where].astype(np.float32))
    return out


_CODES: dict = {}  # (format, saturate) -> (the overflow's code, -0's)


def f64_nearest(x: np.ndarray, f, saturate: bool, narrow) -> np.ndarray:
    """float64 ``x`` rounded once to nearest even into float16, bfloat16 or a one-byte element format
    (``f``: the Format), in f's storage dtype, the numpy path's bits (``round._cast``'s float64 branch
    to nearest; ``saturate`` as :func:`fpsim.cast` says): :func:`f64_to_f16`, :func:`f64_to_bf16` or
    :func:`f64_narrow` (``narrow``: as there)."""
    if f.name == "float16":
        return f64_to_f16(x, saturate)
    if f.name == "bfloat16":
        return f64_to_bf16(x, saturate)
    return f64_narrow(x, f, saturate, narrow)


# name -> function, the names :func:`fpsim.numerics.compiled.rounding` is asked for
ROUNDINGS64 = {f.__name__: f for f in (f64_to_f16, f64_nearest)}
