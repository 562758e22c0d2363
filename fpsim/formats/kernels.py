"""Fast exact conversion kernels: float16 <-> float32 on bit patterns, float32 -> fp8 by table,
fp8 -> float32 by table, and the device rounding algorithm (numpy/cupy arrays, and its CUDA source).

Every kernel here gives bit for bit what the reference rounding in ``round.py`` gives (the tests
check each against it and against numpy / ml_dtypes); they exist because the engine rounds
millions of values per training step and numpy's own float16 cast is slow, ml_dtypes' fp8 cast
slower still.
"""

from __future__ import annotations

import threading

import ml_dtypes
import numpy as np

from ..numerics import compiled
from .bitviews import bits_view
from .table import ALL_FORMATS, ELEMENT_FORMATS, Format, get_format

__all__ = ["F16_BITS_MIN_SIZE", "f16_to_f32", "f16_to_f32_scaled", "f32_to_f16", "snap_f16", "f32_to_bf16", "f32_to_fp8", "narrow_cast", "bf16_odd_patterns", "fp8_to_f32", "rne_round",
           "RNE_KERNEL_SRC", "widening_table"]

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
    at least 2**16 in magnitude; those few are redone by the table.  Any other dtype is a
    TypeError (its bits would be read as float16's).
    """
    _check_f16(x, "f16_to_f32")
    if (fast := compiled.rounding("f16_to_f32", x)) is not None:
        return fast(x, _F16_TABLE)
    if x.size < _F16_BITS_TO_F32_MIN_SIZE:
        return _F16_TABLE.take(x.view(np.uint16))
    return _widen_bits(x, _F16_SCALE, None)[0]


def f16_to_f32_scaled(x: np.ndarray, scale) -> tuple[np.ndarray, bool]:
    """(float32(x) * float32 ``scale``, whether x holds an inf or NaN): the product rounded once
    to float32, bit for bit what widening and then multiplying gives (GradScaler's unscaling),
    in the widening's four passes where ``2**112 * scale`` is a float32 number (exact: a power
    of two times a float32), by multiplying with that instead of 2**112 - the product of the
    exact value x * 2**-112 and 2**112 * scale is the exact x * scale, rounded once.  The
    inf / NaN test reads the float16 patterns (two reductions over half the bytes), not the
    float32 values.  Where the fold is not exact (a scale of 2**16 or more, or 0) or the array is
    small: widened, then multiplied."""
    _check_f16(x, "f16_to_f32_scaled")
    scale = np.float32(scale)
    if (fast := compiled.rounding("f16_to_f32_scaled", x)) is not None:
        return fast(x, scale, _F16_TABLE)
    k64 = 2.0**112 * float(scale)
    with np.errstate(over="ignore"):
        k = np.float32(k64)
    special = _has_f16_special(x)
    if x.size < _F16_BITS_TO_F32_MIN_SIZE or not (np.isfinite(k) and float(k) == k64 and k64 != 0):
        with np.errstate(over="ignore", invalid="ignore"):
            return f16_to_f32(x) * scale, special
    return _widen_bits(x, k, scale, special)[0], special


def _check_f16(x, name: str) -> None:
    if getattr(x, "dtype", None) != np.float16:
        raise TypeError(f"{name} takes a float16 numpy array, got {_what(x)}")


def _has_f16_special(x: np.ndarray) -> bool:
    """Whether float16 x holds an inf or NaN (exponent 31): a positive one is an int16 pattern
    >= 0x7C00, a negative one a uint16 pattern >= 0xFC00 - two reductions over the 16-bit input."""
    if x.size == 0:
        return False
    return bool(np.maximum.reduce(x.view(np.uint16), axis=None) >= 0xFC00
                or np.maximum.reduce(x.view(np.int16), axis=None) >= 0x7C00)


def _widen_bits(x: np.ndarray, k: np.float32, scale, special=None):
    """float16 x's exact values times ``k / 2**112`` (k = 2**112 * scale, exact), rounded once,
    by the bit-pattern widening; its inf / NaN (``special``: found already, or None) widened by
    the table and multiplied by ``scale`` (None: 1)."""
    o = x.view(np.int16).astype(np.int32)
    o <<= 13
    o &= np.int32(-0x70000001)  # 0x8FFFFFFF
    f = o.view(np.float32)
    with np.errstate(over="ignore", under="ignore"):
        f *= k
    if special is None:
        special = _has_f16_special(x)
    if special:
        u = x.view(np.uint16)
        where = (u & np.uint16(0x7C00)) == np.uint16(0x7C00)
        vals = _F16_TABLE.take(u[where])
        if scale is not None:
            with np.errstate(over="ignore", invalid="ignore"):
                vals = vals * np.float32(scale)
        f[where] = vals
    return f, special


def f32_to_f16(x: np.ndarray) -> np.ndarray:
    """float32 or float64 -> float16, rounded once to nearest even (bit-identical to numpy's
    cast, which is correct but slow: ~2.5 ns a value, and ~25x that on results in float16's
    subnormal range, where it raises the underflow flag value by value).

    float32 input is rounded on its bit pattern (:func:`_f32_to_f16_bits`), a few vectorised
    integer passes.  float64 input: those values that land in float16's subnormal range are
    first rounded onto the subnormal grid (multiples of 2**-24) ourselves - adding and
    subtracting C, where C's ulp is 2**-24, rounds to that grid with ties to even - and numpy
    then casts exact values quickly.  The compiled path rounds float32 and float64 input in one loop
    (the same bits, NaN payloads by numpy's cast).
    """
    x = np.asarray(x)
    if (fast := compiled.rounding("f32_to_f16", x, np.float32)) is not None:
        return fast(x)
    if (fast := compiled.rounding("f64_to_f16", x, np.float64)) is not None:
        return fast(x)
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
# Added to the exponent bits of c = clip(|x|, 2**-14, 2**16): makes the float32 2**(e + 13), whose
# ulp is float16's ulp in x's binade e, plus 0x800 of those ulps (even: ties still go to even),
# which is the constant that turns the two halves' sum into the float16 bits (see below).
_BIAS_ADD = _U32((13 << 23) + 0x800)
_F16_TINY_BITS = _U32(0x38800000)  # 2**-14's float32 pattern
_F16_INF_BITS = _U32(0x47800000)  # 2**16's
F16_BITS_MIN_SIZE = 1024  # below this numpy's per-call overhead outweighs the per-value saving
_F16_CHUNK = 2**16  # values per pass: three float32 scratch buffers of this size stay in L2
_SCRATCH = threading.local()  # per thread: the scratch buffers are written by every call


def _scratch():
    bufs = getattr(_SCRATCH, "bufs", None)
    if bufs is None:
        bufs = _SCRATCH.bufs = (np.empty(_F16_CHUNK, np.float32), np.empty(_F16_CHUNK, np.float32),
                                np.empty(_F16_CHUNK, _U32))
    return bufs


def _f32_to_f16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> float16, round to nearest even, on the bit patterns: every result, normal,
    subnormal or inf, is exactly numpy's cast's (NaNs are handed to numpy's cast, which keeps
    their payload bits).  In 12 vectorised passes over chunks of 2**16 values that run in three
    preallocated scratch buffers (no temporary arrays: fresh large ones cost page faults); the
    clamps are integer ones on the magnitudes' patterns (for non-negative floats the pattern
    order is the value order; numpy's float clip is ~2x slower, as it orders NaNs).

    The floating-point adder does the rounding (the idea of M. Dukhan's FP16 library's
    ``fp16_ieee_from_fp32_value``): with a = min(|x|, 2**16) and e the exponent of
    c = clip(|x|, 2**-14, 2**16), the float32 sum s = 2**(e + 13) + a has the ulp 2**(e - 10),
    float16's ulp in that binade (for |x| < 2**-14, e = -14: the subnormal spacing 2**-24), so
    the one float32 addition rounds |x| to float16's grid with ties to even.  s's mantissa field
    then holds 2**10 + the float16 mantissa (2**11 when the rounding carried into the next
    binade), and the float16 bits are that plus (e + 14) << 10, taken mod 2**16 - which is
    (c's exponent field + 13) << 10 plus a constant 0x800: the bias carries those 0x800 ulps
    (an even count, so ties still go to even), and the two terms are added as integers.  For
    |x| >= 65520 the rounding carries into e = 16: 0x7C00, inf.  The sign is or-ed in last.
    """
    if x.ndim == 0:  # numpy returns scalars, not arrays, from ufuncs on 0-d input
        return _f32_to_f16_bits(x.reshape(1)).reshape(())
    flat = x.reshape(-1).view(_U32)
    out = np.empty(x.shape, np.float16)
    dst = out.reshape(-1).view(np.uint16)
    has_nan = False
    buf_a, buf_c, buf_m = _scratch()
    # no NaN reaches the arithmetic (the integer clamps make it 2**16), so no floating-point flag is raised
    for i in range(0, flat.size, _F16_CHUNK):
        xs = flat[i : i + _F16_CHUNK]
        k = xs.size
        ab, cb, m = buf_a[:k].view(_U32), buf_c[:k].view(_U32), buf_m[:k]
        np.bitwise_and(xs, _ABS_MASK, out=ab)
        has_nan = has_nan or bool(np.maximum.reduce(ab) > _EXP_MASK)
        _clip(ab, _F16_TINY_BITS, _F16_INF_BITS, out=cb)  # c = clip(|x|, 2**-14, 2**16)
        _clip(ab, _U32(0), _F16_INF_BITS, out=ab)  # a = min(|x|, 2**16)
        cb &= _EXP_MASK
        cb += _BIAS_ADD
        af, cf = ab.view(np.float32), cb.view(np.float32)
        af += cf  # THE rounding: onto float16's grid, ties to even
        np.right_shift(cb, _U32(13), out=m)
        m += ab
        np.right_shift(xs, _U32(16), out=cb)  # the sign, to bit 15
        cb &= _U32(0x8000)
        m |= cb
        np.copyto(dst[i : i + k], m, casting="unsafe")  # keeps the low 16 bits, as astype does
    if has_nan:
        nan = np.isnan(x)
        out[nan] = x[nan].astype(np.float16)
    return out


_EXP_MASK = _U32(0x7F800000)
_ABS_MASK = _U32(0x7FFFFFFF)
_SIGN_MASK = _U32(0x80000000)
_SNAP_LO = _U32(113 << 23)  # the exponent field of 2**-14, float16's smallest normal
_SNAP_HI = _U32(143 << 23)  # ... of 2**16, beyond float16's largest finite value
_SNAP_BIG = _U32(142 << 23)  # ... of 2**15: only a binade from here up can round past 65504
_SNAP_BIAS = _U32(13 << 23)  # times 2**13
_OVER_UP = np.float32(2.0**112)
_OVER_DOWN = np.float32(2.0**-112)


def snap_f16(x: np.ndarray) -> np.ndarray:
    """float32 -> float32 on float16's grid: the value numpy's float32 -> float16 cast gives,
    kept in a float32 array (the ``numpy-f32`` backend's rounding).  Round to nearest even,
    subnormals, overflow to inf, -0 kept, NaN stays NaN.  Eight vectorised passes and a
    reduction, no bit assembly, against :func:`_f32_to_f16_bits`' twelve plus the widening back;
    over chunks of 2**16 values, so that the passes run in L2 and only the result is allocated
    (a 10**6-value array: ~3x faster than whole-array passes with their temporaries).

    With a = |x| and b = 2**(e + 13), e the exponent of clip(|x|, 2**-14, 2**16), the float32
    sum a + b lies in [2**(e + 13), 2**(e + 14)], where float32's ulp is 2**(e - 10): float16's
    ulp in x's binade (for |x| < 2**-14, e = -14: the subnormal spacing 2**-24).  So the one
    addition rounds a onto float16's grid with ties to even (b is an even number of those ulps),
    and subtracting b is exact.  Only if some |x| >= 2**15 can a result reach 2**16, an
    overflow: then times 2**112 it overflows float32 to inf (65504 * 2**112 does not), and
    times 2**-112 is exact.  The sign bits are or-ed back last (an integer pass: numpy's
    ``copysign`` costs ~5 of the others), so -0 and the negative values that round to zero keep it.
    """
    x = np.asarray(x)
    if (fast := compiled.rounding("snap_f16", x, np.float32)) is not None:
        return fast(x)
    out = np.empty(x.shape, np.float32)
    flat_out = out.reshape(-1).view(_U32)
    flat = x.reshape(-1).view(_U32)  # a copy only if x is not contiguous
    scratch = _snap_scratch()
    with np.errstate(over="ignore", invalid="ignore"):  # NaN stays NaN; the overflow is the point
        for i in range(0, flat.size, _SNAP_CHUNK):
            bits, a = flat[i : i + _SNAP_CHUNK], flat_out[i : i + _SNAP_CHUNK]
            b = scratch[: bits.size]
            np.bitwise_and(bits, _ABS_MASK, out=a)
            np.bitwise_and(bits, _EXP_MASK, out=b)
            _clip(b, _SNAP_LO, _SNAP_HI, out=b)
            big = np.maximum.reduce(b) >= _SNAP_BIG
            b += _SNAP_BIAS
            af, bf = a.view(np.float32), b.view(np.float32)
            af += bf  # THE rounding
            af -= bf
            if big:
                af *= _OVER_UP
                af *= _OVER_DOWN
            np.bitwise_and(bits, _SIGN_MASK, out=b)
            a |= b
    return out


_SNAP_CHUNK = 2**16  # x, the result and one scratch buffer: 768 KB, in L2 (1 MB here)


def _snap_scratch() -> np.ndarray:
    buf = getattr(_SCRATCH, "snap", None)
    if buf is None:
        buf = _SCRATCH.snap = np.empty(_SNAP_CHUNK, _U32)
    return buf


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16, to nearest even: ml_dtypes' cast (one pass, about 0.5 ns a value), or
    the compiled path's rounding on the bit patterns, the same bits (NaNs by ml_dtypes' cast)."""
    if (fast := compiled.rounding("f32_to_bf16", x, np.float32)) is not None:
        return fast(x)
    return x.astype(_BF16)


_BF16 = get_format("bfloat16").dtype


# --------------------------------------------------------------------------------------------
# fp8

_FP8_TABLES: dict = {}  # (format, saturate) -> uint8 array indexed by a bfloat16 bit pattern


def f32_to_fp8(x: np.ndarray, fmt, saturate: bool = False) -> np.ndarray:
    """:func:`fpsim.cast`'s fp8 / fp6 / fp4 result for float32 input to nearest, by table look-up: the fast kernel.

    float32 -> float8_e4m3fn / float8_e5m2 (or the fp6 / fp4 block elements float6_e2m3fn,
    float6_e3m2fn, float4_e2m1fn), rounded once to nearest even, unscaled (numpy arrays;
    the engine's saturating fp8 casts on the numpy backend and the block formats use it).

    ml_dtypes' own cast costs about 20 ns a value.  Here each float32 is first rounded *to odd*
    onto bfloat16's 8 significant bits (keep the top 16 bits; set the last kept bit if any
    dropped bit was 1).  bfloat16 has float32's exponent range and at least two more significant
    bits than any of these formats has anywhere, so the second rounding is correct (Boldo &
    Melquiond, 2008); it is a 65536-entry table built once with ml_dtypes from exact bfloat16
    values.  ``saturate=True`` uses a table that clamps overflow and +-inf to +-max, as
    ``fpsim.cast(..., saturate=True)`` does (fp6 and fp4 always saturate).  NaN stays NaN; a NaN
    into fp6 / fp4, which have none, is a ValueError, as in ``fpsim.cast``.
    """
    f = get_format(fmt)
    x = np.asarray(x)
    if x.dtype != np.float32:
        raise TypeError(f"f32_to_fp8 takes a float32 array, got dtype {x.dtype}")
    if f.name not in ELEMENT_FORMATS and not (f.is_ml_dtype and f.mantissa_bits <= 5 and _one_byte_float(f.dtype)):
        raise ValueError(f"f32_to_fp8: {f.name} is not an fp8 / fp6 / fp4 format ({', '.join(ELEMENT_FORMATS)}, "
                         f"or another one-byte ml_dtypes format of at most 5 mantissa bits)")
    if not f.has_nan and np.isnan(x).any():
        raise ValueError(f"{f.name} has no NaN: the input holds NaN")
    return narrow_cast(x, f, saturate)


def narrow_cast(x: np.ndarray, f: Format, saturate: bool) -> np.ndarray:
    """:func:`f32_to_fp8` without its checks: float32 ``x`` (NaN-free for fp6 / fp4), a Format."""
    key = (f, bool(saturate))
    table = _FP8_TABLES.get(key)
    if table is None:
        table = _FP8_TABLES[key] = _fp8_table(f, saturate)
    if (fast := compiled.rounding("narrow", x, np.float32)) is not None:
        return fast(x, table).view(f.dtype)
    return np.asarray(table.take(bf16_odd_patterns(x))).view(f.dtype)


def bf16_odd_patterns(x32: np.ndarray) -> np.ndarray:
    """The top 16 bits of each float32 pattern (uint32), the lowest of them or-ed with the 16 cut
    off (a sticky bit): x rounded to odd at bfloat16's precision, as a bfloat16 bit pattern - the
    index into the narrowing tables of :func:`narrow_cast` and ``blockfast``."""
    if (fast := compiled.rounding("bf16_odd", x32, np.float32)) is not None:
        return fast(x32)
    bits = np.asarray(x32).view(np.uint32)
    low = np.bitwise_and(bits, np.uint32(0xFFFF), out=np.empty_like(bits))  # out=: a 0-d input stays an array
    np.minimum(low, np.uint32(1), out=low)  # the sticky bit
    hi = np.right_shift(bits, np.uint32(16), out=np.empty_like(bits))
    np.bitwise_or(hi, low, out=hi)
    return hi


def _fp8_table(f: Format, saturate: bool) -> np.ndarray:
    """fp8 bytes for every bfloat16 bit pattern: ml_dtypes' correct float32 -> fp8 cast of exact
    values; saturating, every overflow (and +-inf) becomes +-max and NaN stays NaN."""
    vals = widening_table("bfloat16")
    with np.errstate(over="ignore", invalid="ignore"):
        out = vals.astype(f.dtype)
    if saturate:
        o32 = out.astype(np.float32)
        bad = ~np.isfinite(o32) & ~np.isnan(vals)
        out = np.where(bad, np.copysign(np.float32(f.max), vals), o32).astype(f.dtype)
    return out.view(np.uint8)


def fp8_to_f32(codes: np.ndarray) -> np.ndarray:
    """fp8 / fp6 / fp4 / e8m0 (numpy array in its storage dtype) -> float32, exact, by a 256-entry
    table look-up (ml_dtypes' own cast costs ~20 ns a value).  Any other dtype is a TypeError
    naming it (its bytes would be read as another format's)."""
    dt = getattr(codes, "dtype", None)
    name = dt if isinstance(dt, np.dtype) and (dt in _ONE_BYTE or _one_byte_float(dt)) else None
    if name is None or not isinstance(codes, np.ndarray | np.generic):  # a 0-d result may be a numpy scalar
        raise TypeError(f"fp8_to_f32 takes a numpy array in a one-byte float format ({', '.join(_ONE_BYTE.values())}), "
                        f"got {_what(codes)}")
    if (fast := compiled.rounding("fp8_to_f32", codes)) is not None:
        return fast(codes, widening_table(name))
    return widening_table(name).take(codes.view(np.uint8))


_ONE_BYTE = {f.dtype: f.name for f in map(get_format, ALL_FORMATS) if f.dtype.itemsize == 1}


def _one_byte_float(dt: np.dtype) -> bool:
    """An ml_dtypes float dtype of one byte, fpsim's table names it or not (float8_e3m4, ...)."""
    if dt.itemsize != 1 or getattr(dt.type, "__module__", "") != "ml_dtypes":
        return False
    try:
        ml_dtypes.finfo(dt)
    except (TypeError, ValueError):  # int4, uint2, ...: integers
        return False
    return True


def _what(x) -> str:
    dt = getattr(x, "dtype", None)
    return f"dtype {dt}" if dt is not None else type(x).__name__


_WIDENING: dict[np.dtype, np.ndarray] = {}


def widening_table(fmt) -> np.ndarray:
    """float32 value of every bit pattern of a one- or two-byte format, indexed by the pattern
    (fp6 / fp4: every byte, the unused high bits as ml_dtypes reads them): the one widening table
    behind float16 / bfloat16 / fp8 / fp6 / fp4 / e8m0 look-ups (built once per storage dtype, exact).
    ``fmt``: a format, or an ml_dtypes storage dtype the table does not name (float8_e3m4, ...)."""
    dt = fmt if isinstance(fmt, np.dtype) else get_format(fmt).dtype
    t = _WIDENING.get(dt)
    if t is None:
        codes = np.arange(2 ** (8 * dt.itemsize), dtype=np.uint32).astype(bits_view(dt)).view(dt)
        t = _WIDENING[dt] = codes.astype(np.float32)
    return t


_F16_TABLE = widening_table("float16")  # f16_to_f32's look-up, bound once: it is on the hot path


# --------------------------------------------------------------------------------------------
# the device rounding algorithm


def rne_round(x32, fmt: Format, xp=np):
    """Round float32 to nearest in ``fmt`` with array operations numpy and cupy share: the device kernel's algorithm.

    Float32 in, float32 out, holding exactly the format's values (ties to even); numpy and cupy
    arrays alike, so the CPU tests check the algorithm itself (against ml_dtypes) and the
    stand-in backends run it.  :func:`fpsim.round_to` is the reference rounding.

    Line by line as ``modes.round_magnitudes`` (which does it in float64): ``frexp`` finds the
    binade, clamped below at ``emin`` so subnormals share the smallest normal binade's ulp;
    ``ldexp`` scales one ulp to the units place, where ``rint`` rounds to nearest even; ``ldexp``
    scales back.  Both scalings are exact in float32: the scaled value is below 2**(man+1), and
    every format's smallest subnormal (>= 2**-133) is a float32 normal-or-subnormal number.
    Above ``max`` (the rounding with an unbounded exponent went past it) the result is inf, or
    NaN in a format without inf (e4m3fn: 464 ties to 448, 465 goes to NaN).  inf stays inf
    (NaN without inf), NaN stays NaN, -0 stays -0.
    """
    man, emin = fmt.mantissa_bits, fmt.emin
    with np.errstate(all="ignore"):  # overflow in the scaling back is an inf that the test below replaces
        a = xp.abs(x32)
        _, e = xp.frexp(a)  # a = m * 2**e, m in [0.5, 1); e = 0 for 0, inf, NaN (replaced below)
        k = xp.maximum(e - 1, emin)  # exponent of a's binade, clamped to the format's subnormal range
        r = xp.ldexp(xp.rint(xp.ldexp(a, man - k)), k - man)
        over = xp.float32(np.inf) if fmt.has_inf else xp.float32(np.nan)
        r = xp.where(r > xp.float32(fmt.max), over, r)
        r = xp.copysign(r, x32)
        r = xp.where(xp.isinf(x32), x32 if fmt.has_inf else xp.float32(np.nan), r)
        return xp.where(xp.isnan(x32), x32, r).astype(xp.float32, copy=False)


# The same algorithm as rne_round, as one CUDA elementwise kernel (one pass over memory).
# ldexpf / frexpf / rintf / copysignf are exact in CUDA (0 ulp); the kernel is compiled with
# --ftz=false so float32 subnormals (inputs such as 2**-140, results of e.g. bfloat16
# subnormals) are kept, and --fmad=false (there is no a*b+c here, but nothing may be fused).
RNE_KERNEL_SRC = r"""
if (isnan(x)) {
    y = x;
} else if (isinf(x)) {
    y = has_inf ? x : __int_as_float(0x7fc00000);      // e4m3fn has no inf: NaN
} else {
    float a = fabsf(x);
    int e;
    frexpf(a, &e);                                        // a = m * 2^e, m in [0.5, 1); e = 0 for 0
    int k = (e - 1 > emin) ? e - 1 : emin;                // binade exponent, clamped to the subnormal range
    float r = ldexpf(rintf(ldexpf(a, man - k)), k - man); // exact scalings around one rintf (ties to even)
    if (r > maxval) r = has_inf ? __int_as_float(0x7f800000) : __int_as_float(0x7fc00000);
    y = copysignf(r, x);
}
"""
