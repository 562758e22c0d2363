"""Bit patterns: :func:`encode` rounds values into a format and returns their code points,
:func:`decode` turns code points back into values - for every format, the ml_dtypes ones (their
storage bits), IEEE P3109, ocp_int8 and hand-built formats held in float32 (their codes are
computed here from the layout; a hand-built one is laid out as ml_dtypes lays out its own).

Code points are unsigned integers: uint8 for formats of up to 8 bits (fp6 / fp4 in the low bits,
as ml_dtypes stores them), uint16 and uint32 for the wider ones.  NaN encodes as the format's
NaN pattern (P3109: 100...0 signed, 11...1 unsigned; an ml_dtypes format: the pattern its cast
produced), +-inf as the format's infinities.
"""

from __future__ import annotations

import numpy as np

from .bitviews import bits_view, uint_for_bits
from .round import cast
from .table import Format, get_format

__all__ = ["encode", "decode", "code_dtype"]

_TABLES: dict[Format, np.ndarray] = {}


def code_dtype(fmt) -> np.dtype:
    """The unsigned integer dtype that holds ``fmt``'s code points."""
    return uint_for_bits(get_format(fmt).bits)


def encode(x, fmt, rounding: str = "nearest", *, saturate: bool = False, **sr) -> np.ndarray:
    """The bit patterns (unsigned integers) of ``x`` rounded into ``fmt``, not its values.

    :func:`fpsim.cast` (every argument as there, ``seed`` / ``rng`` / ``sr_bits`` ... included),
    then the code point of each result; :func:`decode` turns them back into values."""
    f = get_format(fmt)
    vals = cast(x, f, rounding, saturate=saturate, **sr)
    if f.is_ml_dtype:
        return np.ascontiguousarray(vals).view(code_dtype(f))
    return _codes_of_values(vals.astype(np.float64), f)


def _codes_of_values(v: np.ndarray, f: Format) -> np.ndarray:
    """Code points of exact values of a format held in float32 (float64 in): P3109, ocp_int8, or
    a hand-built IEEE-style one (:func:`_ieee_codes`)."""
    k, m = f.bits, f.mantissa_bits
    if f.twos_complement:  # i / 64 -> the byte of i
        i = np.where(np.isnan(v), 0, np.rint(np.ldexp(np.nan_to_num(v), m - f.emin))).astype(np.int64)
        return (i & (2**k - 1)).astype(code_dtype(f))
    a = np.abs(v)
    ok = np.isfinite(a) & (a > 0)
    am = np.where(ok, a, 1.0)
    e = np.maximum(np.frexp(am)[1] - 1, f.emin)  # the binade; subnormals in emin's
    sig = np.ldexp(am, m - e).astype(np.int64)  # exact: an integer below 2**(m+1)
    normal = am >= f.tiny
    mag = np.where(normal, ((e + f.bias) << m) | (sig - (1 << m)), sig)
    mag = np.where(ok, mag, 0)
    if f.specials != "p3109":
        return _ieee_codes(v, mag, f)
    if f.signed:
        top = 2 ** (k - 1)
        code = np.where(np.signbit(v) & ok, top, 0) | mag
        if f.has_inf:
            code = np.where(np.isinf(v), np.where(v > 0, top - 1, 2 * top - 1), code)
        code = np.where(np.isnan(v), top, code)
    else:
        code = mag
        if f.has_inf:
            code = np.where(np.isinf(v), 2**k - 2, code)
        code = np.where(np.isnan(v), 2**k - 1, code)
    return code.astype(code_dtype(f))


def _ieee_codes(v: np.ndarray, mag: np.ndarray, f: Format) -> np.ndarray:
    """A hand-built format's codes as ml_dtypes lays its formats out: the sign bit on top (-0
    included), +-inf the all-ones exponent with a zero mantissa (``ieee``), NaN the all-ones
    magnitude (``ieee`` and ``nan``)."""
    k, m = f.bits, f.mantissa_bits
    ones = 2 ** (k - int(f.signed)) - 1
    if f.has_inf:
        mag = np.where(np.isinf(v), ones >> m << m, mag)
    mag = np.where(np.isnan(v), ones, mag)
    sign = np.where(np.signbit(v), 2 ** (k - 1), 0) if f.signed else 0
    return (sign | mag).astype(code_dtype(f))


def _ieee_value_of_code(c: int, f: Format) -> float:
    """One hand-built IEEE-style format's code point's value (the layout of :func:`_ieee_codes`)."""
    k, m = f.bits, f.mantissa_bits
    sign = -1.0 if f.signed and c >> (k - 1) else 1.0
    mag = c & (2 ** (k - int(f.signed)) - 1)
    ones = 2 ** (k - int(f.signed)) - 1
    if f.specials == "ieee" and mag >> m == ones >> m:
        return sign * float("inf") if mag & ((1 << m) - 1) == 0 else float("nan")
    if f.specials == "nan" and mag == ones:
        return float("nan")
    return sign * f.magnitude_of(mag)


def decode(codes, fmt) -> np.ndarray:
    """The values of code points (an integer array, each in [0, 2**bits)) in ``fmt``, exact, as
    float32 - as float64 for float64 and the wide P3109 formats held in float64 (NaN codes give NaN)."""
    f = get_format(fmt)
    c = np.asarray(codes)
    if c.dtype.kind not in "iu" or c.dtype == np.bool_:
        raise TypeError(f"codes must be an array of integers, got dtype {c.dtype}")
    if c.size and (int(c.min()) < 0 or int(c.max()) >= 2**f.bits):
        raise ValueError(f"codes must lie in [0, 2**{f.bits}) for {f.name}, got {int(c.min())} .. {int(c.max())}")
    if f.bits > 16:  # float32, float64: the codes are the carrier's own bits
        return c.astype(code_dtype(f)).view(f.dtype)
    return _table(f).take(c.astype(np.int64))


def _table(f: Format) -> np.ndarray:
    """The value of every code point of a format of at most 16 bits (built once): float32, or the
    format's float64 carrier."""
    t = _TABLES.get(f)  # by the record: two hand-built formats may share a name
    if t is None:
        n = 2**f.bits
        if f.is_ml_dtype:
            t = np.arange(n, dtype=np.uint32).astype(bits_view(f)).view(f.dtype).astype(np.float32)
        else:
            t = np.array([_value_of_code(c, f) for c in range(n)], dtype=np.promote_types(f.dtype, np.float32))
        _TABLES[f] = t
    return t


def _value_of_code(c: int, f: Format) -> float:
    """One P3109 / ocp_int8 code point's value, from the layout (``Format`` docstring)."""
    if f.specials != "p3109" and not f.twos_complement:
        return _ieee_value_of_code(c, f)
    k = f.bits
    if f.twos_complement:
        i = c - 2**k if c >= 2 ** (k - 1) else c
        return float(np.ldexp(i, f.emin - f.mantissa_bits))
    if f.signed:
        top = 2 ** (k - 1)
        if c == top:
            return float("nan")
        sign, mag = (-1.0 if c > top else 1.0), c % top
        if f.has_inf and mag == top - 1:
            return sign * float("inf")
        return sign * f.magnitude_of(mag)
    if c == 2**k - 1:
        return float("nan")
    if f.has_inf and c == 2**k - 2:
        return float("inf")
    return f.magnitude_of(c)
