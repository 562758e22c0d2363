"""Fast exact conversion kernels: float16 <-> float32 on bit patterns, float32 -> fp8 by table,
fp8 -> float32 by table, and the device rounding algorithm (numpy/cupy arrays, and its CUDA source).

Every kernel here gives bit for bit what the reference rounding in ``round.py`` gives (the tests
check each against it and against numpy / ml_dtypes); they exist because the engine rounds
millions of values per training step and numpy's own float16 cast is slow, ml_dtypes' fp8 cast
slower still.
"""

from __future__ import annotations

import numpy as np

from .table import ELEMENT_FORMATS, Format, get_format

__all__ = ["F16_BITS_MIN_SIZE", "f16_to_f32", "f32_to_f16", "f32_to_fp8", "narrow_cast", "fp8_to_f32", "rne_round",
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

# --------------------------------------------------------------------------------------------
# fp8

_FP8_TABLES: dict = {}  # (format name, saturate) -> uint8 array indexed by a bfloat16 bit pattern


def f32_to_fp8(x: np.ndarray, fmt, saturate: bool = False) -> np.ndarray:
    """float32 -> float8_e4m3fn / float8_e5m2 (or the fp6 / fp4 block elements float6_e2m3fn,
    float6_e3m2fn, float4_e2m1fn), rounded once to nearest even, by table look-up (numpy arrays;
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
    if f.name not in ELEMENT_FORMATS:
        raise ValueError(f"f32_to_fp8: {f.name} is not an fp8 / fp6 / fp4 format ({', '.join(ELEMENT_FORMATS)})")
    if not f.has_nan and np.isnan(x).any():
        raise ValueError(f"{f.name} has no NaN: the input holds NaN")
    return narrow_cast(x, f, saturate)


def narrow_cast(x: np.ndarray, f: Format, saturate: bool) -> np.ndarray:
    """:func:`f32_to_fp8` without its checks: float32 ``x`` (NaN-free for fp6 / fp4), a Format."""
    key = (f.name, bool(saturate))
    table = _FP8_TABLES.get(key)
    if table is None:
        table = _FP8_TABLES[key] = _fp8_table(f, saturate)
    bits = x.view(np.uint32)
    hi = bits >> 16
    hi |= (bits & 0xFFFF) != 0  # round to odd: the sticky bit
    return np.asarray(table.take(hi)).view(f.dtype)


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
    table look-up (ml_dtypes' own cast costs ~20 ns a value)."""
    return widening_table(get_format(codes.dtype).name).take(codes.view(np.uint8))


_WIDENING: dict[str, np.ndarray] = {}


def widening_table(fmt) -> np.ndarray:
    """float32 value of every bit pattern of a one- or two-byte format, indexed by the pattern
    (fp6 / fp4: every byte, the unused high bits as ml_dtypes reads them): the one widening table
    behind float16 / bfloat16 / fp8 / fp6 / fp4 / e8m0 look-ups (built once, exact)."""
    f = get_format(fmt)
    t = _WIDENING.get(f.name)
    if t is None:
        size = f.dtype.itemsize
        uint = np.uint8 if size == 1 else np.uint16
        codes = np.arange(2 ** (8 * size), dtype=np.uint32).astype(uint).view(f.dtype)
        t = _WIDENING[f.name] = codes.astype(np.float32)
    return t


_F16_TABLE = widening_table("float16")  # f16_to_f32's look-up, bound once: it is on the hot path


# --------------------------------------------------------------------------------------------
# the device rounding algorithm


def rne_round(x32, fmt: Format, xp=np):
    """Round float32 values to the nearest value of ``fmt`` (ties to even); float32 in, float32
    out, holding exactly the format's values.  The device kernel's algorithm, written with
    array operations that numpy and cupy both have, so the CPU tests check the algorithm
    itself (against ml_dtypes) and the stand-in backends run it.

    Line by line as ``round._round_exact`` (which does it in float64): ``frexp`` finds the
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
