"""The float formats fpsim simulates, and exact rounding into them.

One table describes every format by its bit layout; every limit (``max``, ``tiny``,
``smallest_subnormal``, ``eps``) is *derived* from the layout, and the tests pin each one to
an exact literal.

Rounding is done ONCE, correctly, from float32 and from float64 input.  Where numpy or
ml_dtypes already round correctly we use them (they are fast); where they do not - ml_dtypes
casts float64 to bfloat16/fp8 by way of float32, rounding twice - we first round float64 to
float32 *to odd*, which makes the second rounding correct (Boldo & Melquiond, 2008: rounding
to odd with at least two extra bits of precision is innocuous).  The other modes
(``toward_zero``, ``stochastic``) use one exact float64 algorithm.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

__all__ = [
    "Format",
    "FORMATS",
    "ROUNDING_MODES",
    "CATEGORIES",
    "get_format",
    "format_names",
    "cast",
    "round_to",
    "ulp",
    "classify",
    "Classification",
    "manual_seed",
]

ROUNDING_MODES = ("nearest", "toward_zero", "stochastic")
CATEGORIES = ("zero", "subnormal", "normal", "inf", "nan")


@dataclass(frozen=True)
class Format:
    """A binary floating-point format, described by its bit layout.

    ``ieee_top`` says whether the all-ones exponent is reserved for inf/NaN (IEEE style:
    float16, bfloat16, float32, e5m2).  float8_e4m3fn ("fn" = finite, NaN only) uses that
    exponent for ordinary numbers and gives up only the all-ones mantissa there, for NaN.
    """

    name: str
    dtype: np.dtype
    exponent_bits: int
    mantissa_bits: int
    ieee_top: bool = True
    aliases: tuple[str, ...] = field(default=())

    @property
    def bits(self) -> int:
        return 1 + self.exponent_bits + self.mantissa_bits

    @property
    def bias(self) -> int:
        return 2 ** (self.exponent_bits - 1) - 1

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal binade."""
        return 1 - self.bias

    @property
    def emax(self) -> int:
        """Exponent of the largest finite binade."""
        top = 2**self.exponent_bits - 1 - self.bias
        return top - 1 if self.ieee_top else top

    @property
    def has_inf(self) -> bool:
        return self.ieee_top

    @property
    def max(self) -> float:
        """Largest finite value (e4m3fn: its top mantissa pattern is NaN, so one step less)."""
        frac = 2.0 - 2.0 ** -self.mantissa_bits
        if not self.ieee_top:
            frac -= 2.0 ** -self.mantissa_bits
        return frac * 2.0**self.emax

    @property
    def tiny(self) -> float:
        """Smallest positive normal value."""
        return 2.0**self.emin

    @property
    def smallest_subnormal(self) -> float:
        return 2.0 ** (self.emin - self.mantissa_bits)

    @property
    def eps(self) -> float:
        """The ulp of 1.0."""
        return 2.0 ** -self.mantissa_bits

    @property
    def flush_threshold(self) -> float:
        """|x| at or below this rounds to zero (to nearest): half the smallest subnormal.

        Exactly this value is a tie between 0 and the smallest subnormal and goes to the
        even neighbour, 0.
        """
        return self.smallest_subnormal / 2

    @property
    def overflow_threshold(self) -> float:
        """|x| at or above this overflows when rounding to nearest: max + half an ulp of max."""
        return self.max + 2.0 ** (self.emax - self.mantissa_bits) / 2

    @property
    def precision(self) -> int:
        """Significant bits of a normal number, hidden bit included."""
        return self.mantissa_bits + 1

    def __str__(self) -> str:
        return self.name


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("float32", np.dtype(np.float32), 8, 23, aliases=("fp32", "single")),
        Format("float16", np.dtype(np.float16), 5, 10, aliases=("fp16", "half")),
        Format("bfloat16", np.dtype(ml_dtypes.bfloat16), 8, 7, aliases=("bf16",)),
        Format(
            "float8_e4m3fn",
            np.dtype(ml_dtypes.float8_e4m3fn),
            4,
            3,
            ieee_top=False,
            aliases=("e4m3", "fp8_e4m3"),
        ),
        Format("float8_e5m2", np.dtype(ml_dtypes.float8_e5m2), 5, 2, aliases=("e5m2", "fp8_e5m2")),
    )
}
_ALIASES = {a: f.name for f in FORMATS.values() for a in f.aliases}
_BY_DTYPE = {f.dtype: f for f in FORMATS.values()}


def format_names() -> str:
    """The valid names, as an error message lists them."""
    aliases = ", ".join(_ALIASES)
    return f"{', '.join(FORMATS)} (aliases: {aliases})"


def get_format(fmt) -> Format:
    """Look a format up by name, alias, numpy dtype or Format; raise ValueError if unknown."""
    if isinstance(fmt, Format):
        return fmt
    if isinstance(fmt, str):
        key = fmt.strip().lower()
        key = _ALIASES.get(key, key)
        if key in FORMATS:
            return FORMATS[key]
        raise ValueError(f"unknown format {fmt!r}; known: {format_names()}")
    try:
        dt = np.dtype(fmt)
    except TypeError:
        raise ValueError(f"unknown format {fmt!r}; known: {format_names()}") from None
    if dt in _BY_DTYPE:
        return _BY_DTYPE[dt]
    raise ValueError(f"unknown format {fmt!r} (dtype {dt}); known: {format_names()}")


# --------------------------------------------------------------------------------------------
# input handling

_EXACT_IN_F32 = {np.dtype(np.float16)} | {f.dtype for f in FORMATS.values() if f.bits <= 16}


def _as_float_array(x) -> np.ndarray:
    """x as a float32 or float64 array holding exactly the same values.

    Low-precision inputs (float16, bfloat16, fp8) widen exactly to float32; Python floats
    and ints become float64.  Anything non-numeric is a TypeError naming what it got.
    """
    if isinstance(x, np.ndarray | np.generic):
        arr = np.asarray(x)
    elif isinstance(x, numbers.Real) and not isinstance(x, bool):
        arr = np.asarray(float(x), dtype=np.float64)
    elif isinstance(x, list | tuple):
        try:
            arr = np.asarray(x, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError(f"expected numbers, got a {type(x).__name__} holding non-numbers") from None
    elif hasattr(x, "__array__") or hasattr(x, "__cuda_array_interface__"):
        arr = np.asarray(x.get() if hasattr(x, "get") else x)
    else:
        raise TypeError(f"expected a number or an array of numbers, got {type(x).__name__}")
    dt = arr.dtype
    if dt in (np.float32, np.float64):
        return arr
    if dt == np.float16:
        return f16_to_f32(arr)
    if dt in _EXACT_IN_F32:
        return arr.astype(np.float32)
    if dt.kind in "iu":
        return arr.astype(np.float64)
    if dt == np.bool_ or dt.kind not in "f":
        raise TypeError(f"expected a float or integer array, got dtype {dt}")
    return arr.astype(np.float64)  # e.g. longdouble: one rounding to float64 first


# --------------------------------------------------------------------------------------------
# rounding

_global_rng = np.random.default_rng(0)


def manual_seed(seed: int) -> None:
    """Reset the generator stochastic rounding uses when no ``seed``/``rng`` is passed."""
    global _global_rng
    _global_rng = np.random.default_rng(seed)


def _round_exact(x64: np.ndarray, f: Format, mode: str, rng) -> np.ndarray:
    """Round float64 values onto f's grid, exactly, with an unbounded exponent range above.

    Scaling by a power of two moves the rounding position to the units place, where
    ``rint``/``trunc``/``floor`` act exactly; scaling back is exact too.  Returns float64
    magnitudes (sign applied later); values beyond ``max`` are left for the caller.
    """
    a = np.abs(x64)
    _, e2 = np.frexp(a)  # a = m * 2**e2, m in [0.5, 1)
    shift = f.mantissa_bits - np.maximum(e2 - 1, f.emin)  # units place = one ulp
    y = np.ldexp(a, shift)
    if mode == "nearest":
        r = np.rint(y)  # ties to even
    elif mode == "toward_zero":
        r = np.trunc(y)
    else:
        lo = np.floor(y)
        # Up with probability equal to the distance from the lower neighbour: unbiased.
        r = lo + (rng.random(y.shape) < (y - lo))
    with np.errstate(invalid="ignore"):
        return np.ldexp(r, -shift)


def _to_odd_f32(x64: np.ndarray) -> np.ndarray:
    """float64 -> float32 rounded to odd: truncate, and set the last bit if anything was lost.

    With one float64 temporary (fresh large temporaries cost page faults): y = float32(x) to
    nearest, then p = (float64(y) - x) * x, whose difference is exact.  p > 0: y went away from
    zero, so its bit pattern steps down one (towards zero in sign-magnitude order); p != 0:
    something was lost, so the last bit is set.  (For |x| < 2**-537, p underflows to 0 and the
    sticky bit stays clear; such x give 0 in every format rounded to from here, either way.)
    inf and NaN give p = NaN and are left alone.
    """
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        y = x64.astype(np.float32)
        p = y.astype(np.float64)
        p -= x64
        p *= x64
    bits = y.view(np.uint32)
    np.subtract(bits, p > 0, out=bits, casting="unsafe")
    np.abs(p, out=p)
    np.bitwise_or(bits, p > 0, out=bits, casting="unsafe")
    return y


def _f64_to_bf16(x64: np.ndarray) -> np.ndarray:
    """float64 -> bfloat16 rounded once, to nearest even.

    ml_dtypes rounds float64 -> float32 -> bfloat16.  bfloat16's numbers are the float32 bit
    patterns whose low 16 bits are 0, the same at every exponent, so the two roundings can
    differ from one only where the float32 value lands exactly on a midpoint between two
    bfloat16 numbers (low 16 bits 0x8000): only those values (about one in 65536 for smooth
    data) are rounded to odd first (:func:`_to_odd_f32`).
    """
    with np.errstate(over="ignore", invalid="ignore"):
        y = x64.astype(np.float32)
    low = np.bitwise_and(y.view(np.uint32), np.uint32(0xFFFF))
    mid = low == np.uint32(0x8000)
    if mid.any():
        y[mid] = _to_odd_f32(x64[mid])
    return y.astype(ml_dtypes.bfloat16)


_F16_TABLE = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
_F16_TINY = 2.0**-14


_F16_SCALE = np.float32(2.0**112)  # 2**(127 - 15): float16's exponent bias -> float32's
_F16_BITS_TO_F32_MIN_SIZE = 16384  # below this the table look-up is faster


def f16_to_f32(x: np.ndarray) -> np.ndarray:
    """float16 -> float32, exact, and fast for subnormals too (numpy's own cast takes a slow
    path for every subnormal, at ~1.7 ns a value even for normal ones).

    Small arrays: a 65536-entry table look-up.  Large ones, in four passes and no temporary
    (the look-up's int64 index array costs more than the look-up): the float16 bits, sign-
    extended to 32 bits and shifted left by 13, are a float32 whose sign, exponent and
    mantissa fields hold float16's (the three copies of the sign above the exponent are
    cleared) - a float32 2**112 times too small, subnormals included, as a float32 subnormal.
    One exact multiply by 2**112 rescales it.  inf and NaN (exponent 31) come out finite and
    at least 2**16 in magnitude; those few are redone by the table.
    """
    if x.size < _F16_BITS_TO_F32_MIN_SIZE:
        return _F16_TABLE.take(x.view(np.uint16))
    o = x.view(np.int16).astype(np.int32)
    o <<= 13
    o &= np.int32(-0x70000001)  # 0x8FFFFFFF
    f = o.view(np.float32)
    f *= _F16_SCALE
    hi, lo = f.max(), f.min()
    if not (hi < 65536 and lo > -65536):  # inf or NaN somewhere (a NaN makes both comparisons false)
        special = np.abs(f) >= 65536
        special |= np.isnan(f)
        f[special] = _F16_TABLE.take(x.view(np.uint16)[special])
    return f


def f32_to_f16(x: np.ndarray) -> np.ndarray:
    """float32 or float64 -> float16, rounded once to nearest even (bit-identical to numpy's
    cast, which is correct but slow: ~2.5 ns a value, and ~25x that on results in float16's
    subnormal range, where it raises the underflow flag value by value).

    float32 input is rounded on its bit pattern (:func:`_f32_to_f16_bits`), a few vectorised
    integer passes.  float64 input: those values that land in float16's subnormal range are
    first rounded onto the subnormal grid (multiples of 2**-24) ourselves - adding and
    subtracting C, where C's ulp is 2**-24, rounds to that grid with ties to even - and numpy
    then casts exact values quickly.
    """
    x = np.asarray(x)
    if x.dtype == np.float32:
        return _f32_to_f16_bits(x) if x.size >= F16_BITS_MIN_SIZE else x.astype(np.float16)
    if x.size >= F16_BITS_MIN_SIZE:
        # numpy's float64 -> float16 cast is correct; it is slow only on subnormal results.  If a
        # sample of the values holds few of those, cast directly (the result is the same either way).
        sample = np.abs(x.reshape(-1)[:: x.size // 1024])
        if np.count_nonzero((sample < _F16_TINY) & (sample > 0)) * 32 < sample.size:
            return x.astype(np.float16)
    a = np.abs(x, out=np.empty_like(x))
    tiny = a < _F16_TINY
    if tiny.any():
        c = x.dtype.type(0.5 if x.dtype == np.float32 else 2.0**28)
        a += c  # in place: these arrays are large and this is the emulator's hottest path
        a -= c
        np.copysign(a, x, out=a)
        np.copyto(a, x, where=~tiny)
        x = a
    return x.astype(np.float16)


try:  # the ufunc itself: np.clip adds ~2 us of Python dispatch per call, and this path is hot
    from numpy._core.umath import clip as _clip
except ImportError:  # numpy < 2
    _clip = np.clip
_U32 = np.uint32
_F16_TINY32 = np.float32(2.0**-14)  # float16's smallest normal
_F16_INF32 = np.float32(2.0**16)  # rounds to float16's inf, as does everything from 65520 up
_HALF = np.float32(0.5)  # its ulp is 2**-24, float16's subnormal spacing
# Added to a float32's bits: re-biases the exponent (127 -> 15), adds half a float16 ulp less one
# unit (the kept mantissa's last bit, added too, makes ties go to even), and takes off the 0x400
# that the subnormal half below contributes for every normal value.
_RNE_REBIAS = _U32((((15 - 127) << 23) + 0xFFF - (0x400 << 13)) & 0xFFFFFFFF)
F16_BITS_MIN_SIZE = 1024  # below this numpy's per-call overhead outweighs the per-value saving


def _f32_to_f16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> float16, round to nearest even, on the bit patterns: every result, normal,
    subnormal or inf, is exactly numpy's cast's (NaNs are handed to numpy's cast, which keeps
    their payload bits).  About 1.5-2 ns a value at any magnitude, in 15 vectorised passes.

    Two halves, both run on every value (a masked select costs more than the work):
    - normal results, from c = clip(|x|, 2**-14, 2**16): the float32 bits shifted right by 13
      are the float16 bits once the exponent is re-biased; adding 0xFFF plus the last kept
      bit before the shift rounds to nearest even (F. Giesen's ``float_to_half_fast3_rtne``),
      and a carry out of the mantissa bumps the exponent - up to inf, 0x7C00, which is also
      what the clip's 2**16 gives.  For |x| < 2**-14 this half gives the bits of 2**-14.
    - subnormal results, from clip(|x|, 0, 2**-14) + 0.5 in float32: the addition rounds to a
      multiple of 2**-24 with ties to even (the hardware does it); the sum's bits are 0.5's
      (0x3F000000, which the final cast to 16 bits drops) plus the float16 bits, the bits of
      2**-14 (0x400) for |x| >= 2**-14.
    So the float16 magnitude bits are the low 16 bits of the two halves' sum less 0x400.

    Large arrays go in chunks of 2**17 values: three full-size float32 temporaries alive at
    once (next to a matmul's operands) make the C allocator hand memory back to the kernel
    and fault it in again on the next call, which costs more than the arithmetic.
    """
    if x.ndim == 0:  # numpy returns scalars, not arrays, from ufuncs on 0-d input
        return _f32_to_f16_bits(x.reshape(1)).reshape(())
    with np.errstate(invalid="ignore"):  # signalling NaNs in the arithmetic: they are fixed up below
        if x.size <= _F16_CHUNK:
            n, has_nan = _f16_bits_u32(x)
            out = n.astype(np.uint16).view(np.float16)
        else:
            flat = x.reshape(-1)
            out = np.empty(x.shape, np.float16)
            dst = out.reshape(-1).view(np.uint16)
            has_nan = False
            for i in range(0, flat.size, _F16_CHUNK):
                n, nan_here = _f16_bits_u32(flat[i : i + _F16_CHUNK])
                np.copyto(dst[i : i + _F16_CHUNK], n, casting="unsafe")  # keeps the low 16 bits, as astype does
                has_nan = has_nan or nan_here
    if has_nan:
        nan = np.isnan(x)
        out[nan] = x[nan].astype(np.float16)
    return out


_F16_CHUNK = 2**17


def _f16_bits_u32(x: np.ndarray):
    """The float16 bits of float32 ``x`` in the low 16 bits of a uint32 array (NaNs still to
    be fixed), and whether x held a NaN.  See :func:`_f32_to_f16_bits`."""
    a = np.abs(x)
    c = _clip(a, _F16_TINY32, _F16_INF32)
    has_nan = bool(np.isnan(c.sum()))  # finite unless a NaN came through: every c is <= 2**16
    _clip(a, np.float32(0), _F16_TINY32, out=a)
    a += _HALF
    n = c.view(_U32)
    m = np.right_shift(n, _U32(13))
    m &= _U32(1)
    n += m
    n += _RNE_REBIAS
    n >>= _U32(13)
    n += a.view(_U32)
    np.right_shift(x.view(_U32), _U32(16), out=m)
    m &= _U32(0x8000)
    n |= m
    return n, has_nan


def _check_mode(rounding: str) -> str:
    if rounding not in ROUNDING_MODES:
        raise ValueError(f"unknown rounding mode {rounding!r}; known: {', '.join(ROUNDING_MODES)}")
    return rounding


def cast(x, fmt, rounding: str = "nearest", *, saturate: bool = False, seed=None, rng=None):
    """Round ``x`` once, correctly, into ``fmt`` and return it in the format's storage dtype.

    Input: anything numeric (float64 / float32 / float16 / bfloat16 / fp8 / int arrays,
    Python numbers).  Rounding modes: ``nearest`` (ties to even), ``toward_zero``,
    ``stochastic`` (up with probability proportional to the distance from the lower
    neighbour; pass ``seed`` or a numpy ``rng`` for reproducibility, otherwise a module
    generator reset by :func:`manual_seed` is used).

    Overflow follows IEEE: to nearest (and stochastic) it gives +-inf, or NaN in
    float8_e4m3fn, which has no inf; toward zero it gives +-max.  ``saturate=True`` clamps
    every overflow to +-max, infinite inputs included (as the hardware's saturating fp8
    conversions do).  -0 stays -0 and NaN stays NaN.
    """
    f = get_format(fmt)
    _check_mode(rounding)
    arr = _as_float_array(x)
    # Overflow to inf and NaN passing through are results here, not accidents.
    with np.errstate(over="ignore", invalid="ignore"):
        return _cast(arr, f, rounding, saturate, seed, rng)


def _cast(arr: np.ndarray, f: Format, rounding: str, saturate: bool, seed, rng) -> np.ndarray:
    if arr.dtype == f.dtype or (f.name == "float32" and arr.dtype == np.float32):
        out = arr.astype(f.dtype, copy=True)
        return _saturate(out, arr, f) if saturate else out
    if rounding == "nearest":
        if arr.dtype == np.float64 and f.name == "bfloat16":
            out = _f64_to_bf16(arr)
            return _saturate(out, arr, f) if saturate else out
        if arr.dtype == np.float64 and f.name not in ("float16", "float32"):
            arr = _to_odd_f32(arr)
        # numpy (float16, float32) and ml_dtypes (bfloat16, fp8) round correctly from here.
        out = f32_to_f16(arr) if f.name == "float16" else arr.astype(f.dtype)
        return _saturate(out, arr, f) if saturate else out

    if rounding == "stochastic" and rng is None:
        rng = np.random.default_rng(seed) if seed is not None else _global_rng
    x64 = arr.astype(np.float64)
    mag = _round_exact(x64, f, rounding, rng)
    finite = np.isfinite(x64)
    over = finite & (mag > f.max)
    if saturate or rounding == "toward_zero":
        mag = np.where(over, f.max, mag)
    else:
        mag = np.where(over, np.inf if f.has_inf else np.nan, mag)
    if saturate:
        mag = np.where(np.isinf(x64), f.max, mag)
    elif not f.has_inf:
        mag = np.where(np.isinf(x64), np.nan, mag)
    out = np.copysign(mag, x64)
    with np.errstate(over="ignore", invalid="ignore"):
        return out.astype(f.dtype)


def _saturate(out: np.ndarray, src: np.ndarray, f: Format) -> np.ndarray:
    """Replace overflowed results (and infinite inputs) by +-max; NaN inputs stay NaN."""
    res = out.astype(np.float32)
    bad = ~np.isfinite(res) & ~np.isnan(src)
    if np.any(bad):
        with np.errstate(over="ignore"):
            src = src.astype(np.float32)
        out = np.where(bad, np.copysign(np.float32(f.max), src), res)
        out = out.astype(f.dtype)
    return out


def round_to(x, fmt, rounding: str = "nearest", *, saturate: bool = False, seed=None, rng=None):
    """Like :func:`cast`, but the result comes back in the input's float dtype.

    float64 and float32 inputs stay float64 / float32; Python numbers come back as float64
    arrays; low-precision inputs (float16, bfloat16, fp8) come back as float32.
    """
    arr = _as_float_array(x)
    out = cast(arr, fmt, rounding, saturate=saturate, seed=seed, rng=rng)
    return out.astype(arr.dtype)


def ulp(x, fmt) -> np.ndarray:
    """The spacing of ``fmt``'s numbers at |x| (float64): 2**(e - mantissa_bits) in binade 2**e.

    Below the smallest normal the spacing is the smallest subnormal; at 0 likewise.  Above
    the largest finite binade the format has no numbers and the answer is inf; NaN gives NaN.
    """
    f = get_format(fmt)
    a = np.abs(_as_float_array(x).astype(np.float64))
    _, e2 = np.frexp(a)
    e = np.where(a == 0, f.emin, np.maximum(e2 - 1, f.emin))
    out = np.ldexp(1.0, e - f.mantissa_bits)
    out = np.where(a >= 2.0 ** (f.emax + 1), np.inf, out)
    return np.where(np.isnan(a), np.nan, out)


@dataclass(frozen=True)
class Classification:
    """What rounding into a format did to each element.

    ``category`` holds indexes into :data:`CATEGORIES` for the rounded value; the boolean
    arrays say what happened on the way: ``underflow`` (a non-zero value became 0),
    ``subnormal`` (the result is subnormal), ``overflow`` (a finite value became inf / NaN,
    or was clamped to max), ``nan`` (the result is NaN), ``inexact`` (the value changed).
    """

    format: Format
    value: np.ndarray
    rounded: np.ndarray
    category: np.ndarray
    underflow: np.ndarray
    subnormal: np.ndarray
    overflow: np.ndarray
    nan: np.ndarray
    inexact: np.ndarray

    def names(self) -> np.ndarray:
        """The category of each element as a string array."""
        return np.asarray(CATEGORIES)[self.category]

    def counts(self) -> dict[str, int]:
        """Totals: the result categories and the rounding events."""
        out = {c: int(np.count_nonzero(self.category == i)) for i, c in enumerate(CATEGORIES)}
        for k in ("underflow", "overflow", "inexact"):
            out[k] = int(np.count_nonzero(getattr(self, k)))
        out["total"] = int(self.category.size)
        return out


def classify(x, fmt, rounding: str = "nearest", *, saturate: bool = False) -> Classification:
    """Round ``x`` into ``fmt`` (as :func:`cast` does) and say what became of each element."""
    f = get_format(fmt)
    arr = _as_float_array(x)
    stored = cast(arr, f, rounding, saturate=saturate)
    r = stored.astype(np.float32 if f.bits <= 32 else np.float64)
    v = arr
    a = np.abs(r)
    nan = np.isnan(r)
    inf = np.isinf(r)
    zero = a == 0
    sub = (a > 0) & (a < f.tiny)
    category = np.select([zero, sub, inf, nan], [0, 1, 3, 4], default=2).astype(np.int8)
    with np.errstate(invalid="ignore"):
        v_finite = np.isfinite(v)
        underflow = zero & (v != 0) & v_finite
        overflow = v_finite & (inf | nan | _clamped(v, a, f, saturate))
        inexact = (r.astype(np.float64) != v.astype(np.float64)) & ~(np.isnan(v) & nan)
    return Classification(f, v, stored, category, underflow, sub, overflow, nan, inexact)


def _clamped(v, a, f: Format, saturate: bool):
    """Finite values that saturation clamped to max: those whose rounding, with the exponent
    range unbounded, lands beyond max (for e4m3fn 464 is a tie that rounds to 448: no overflow)."""
    if not saturate:
        return np.zeros(np.shape(v), dtype=bool)
    v64 = np.asarray(v, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        return (a == f.max) & (_round_exact(v64, f, "nearest", None) > f.max)
