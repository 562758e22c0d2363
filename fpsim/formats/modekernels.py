"""Every rounding mode from float32 input, fast: float32 arithmetic and bit operations, a few
vectorised passes, exactly the values of the float64 reference (``modes.round_magnitudes``, which
the tests hold it against bit for bit, and both against gfloat).

For |x| in a binade 2**e (e clamped below at the format's emin, so that subnormals share the
smallest binade's spacing) the format's ulp is q = 2**(e - mantissa_bits).  q and 1/q are built
as float32 bit patterns from x's exponent field, so v = |x| * (1/q) is exact: its integer part is
the significand below |x| and its fraction the distance to the next one, in ulps.  floor / ceil /
rint act exactly on it, and the result times q is exact again.  This needs q to be a normal
float32 (every format here but bfloat16, float8_e8m0fnu and p3109_k8p1u*, whose smallest steps are
float32 subnormals) and at least one mantissa bit (with none, "odd" is the exponent's last bit);
:func:`supports` says which formats and modes, and the others take the float64 path.

:func:`fused_cast` does all of it, ``modes.finish`` and the store too, in one compiled loop where
numba is there (``numerics.compiled._fused_modes``).

bfloat16 has float32's exponent range, so its numbers are the float32 bit patterns whose low 16
bits are zero, subnormals included: there every mode is integer arithmetic on the patterns
(:func:`_bf16`), where a carry out of the mantissa steps into the next binade, and to inf.
"""

from __future__ import annotations

import numpy as np

from ..numerics import compiled
from .bitviews import bits_view
from .kernels import f32_to_f16, narrow_cast
from .table import ELEMENT_FORMATS, Format

__all__ = ["supports", "round_magnitudes_f32", "fused_params", "fused_cast", "fused_applies", "cast_path", "f64_loop"]

_U32 = np.uint32
_F32 = np.float32
_ABS = _U32(0x7FFFFFFF)
_EXP = _U32(0x7F800000)
_INV = _U32(254 << 23)  # the bits of 2**-E are (254 << 23) minus those of 2**E
_SR_FAST_BITS = 24  # few-bit SR in float32: delta * 2**k and 2**k - R exact for k <= 24


def supports(f: Format, mode: str, sr) -> bool:
    """Whether :func:`round_magnitudes_f32` rounds float32 input into ``f`` in ``mode``."""
    if f.name != "bfloat16" and (f.mantissa_bits == 0 or f.mantissa_bits > 20 or f.emin - f.mantissa_bits < -126
                                 or f.emax > 120):
        return False
    return mode != "stochastic" or sr is None or sr[0] <= _SR_FAST_BITS


def fused_cast(x32: np.ndarray, f: Format, mode: str, saturate: bool, sr=None, rng=None, path: str = "modes"):
    """(float32 ``x32`` rounded into ``f`` in ``mode`` and finished, in f's storage dtype; whether x32
    holds NaN; the largest of few-bit SR's given integers ``sr[1]``, 2**64 if one is negative, or 0) by
    the compiled fused loop, or None where it does not apply (the compiled path off, a small array, a
    format or mode :func:`fused_params` refuses, a few-bit SR of more than 24 bits).  The result is
    what ``round._store(modes.finish(...))`` gives (``path`` "nearest": ``kernels.narrow_cast``) for
    every input that is not a NaN; the NaNs' results are not written (the caller redoes them, or
    refuses them in a format without NaN), nor is the range of the given integers checked (the
    caller does, from the third value).  Exact SR draws ``rng.random``, one float64 a value in order,
    as the numpy path does; few-bit SR takes its integers given (``sr[1]``: ``sr.draw_bits``' where the
    caller drew them)."""
    kernel = compiled.rounding("modes_cast", x32, np.float32)
    if kernel is None or not supports(f, mode, sr):
        return None
    params = fused_params(f, mode, saturate, path)
    if params is None:
        return None
    return kernel(x32, f.dtype, params, mode, sr, rng)


def cast_path(f: Format, rounding: str) -> str:
    """Which numpy path ``round._cast`` takes for float32 input, as :func:`fused_cast` names it:
    ``"nearest"`` (the narrowing table) for nearest into an element format, else ``"modes"``."""
    return "nearest" if rounding == "nearest" and f.name in ELEMENT_FORMATS else "modes"


def fused_applies(x: np.ndarray, f: Format, mode: str, saturate: bool, sr_bits=None, path: str | None = None) -> bool:
    """Whether a compiled loop rounds ``x`` into ``f`` and finds its NaNs itself: :func:`fused_cast` for
    float32 (k = ``sr_bits`` random bits; ``path``: None for :func:`cast_path`'s), :func:`f64_loop` for
    float64."""
    if x.dtype == np.float64:
        return sr_bits is None and f64_loop(x, f, mode) is not None
    return (x.dtype == np.float32 and compiled.rounding("modes_cast", x, np.float32) is not None
            and supports(f, mode, None if sr_bits is None else (int(sr_bits),))
            and fused_params(f, mode, saturate, cast_path(f, mode) if path is None else path) is not None)


def f64_loop(x: np.ndarray, f: Format, mode: str):
    """The compiled rounding of float64 ``x`` to nearest into float16, bfloat16 or an element format
    (``numerics.compiled._casts64.f64_nearest``), or None."""
    ok = mode == "nearest" and x.dtype == np.float64 and f.name in ("float16", "bfloat16", *ELEMENT_FORMATS)
    return compiled.rounding("f64_nearest", x) if ok else None


_FUSED: dict = {}  # (format, mode, saturate, path) -> fused_params


def fused_params(f: Format, mode: str, saturate: bool, path: str = "modes"):
    """What the compiled fused cast (``numerics.compiled._fused_modes``) needs to round float32 into
    ``f`` in ``mode`` and return what the numpy path returns, or None where it does not apply (a format
    :func:`supports` does not take, bfloat16, no zero, two's complement, an ml_dtypes format other
    than float16 and the element formats).  ``path``: ``"modes"`` - the result of ``round._store``
    after ``modes.finish``; ``"nearest"`` - the element formats' nearest cast, ``kernels.narrow_cast``
    (``mode`` "nearest").  (True, grid, enc) for a format stored in codes: max's code and the
    overflow's (inf, or finish's NaN) are the numpy path's own cast of those values, and -max's and
    the negative overflow's must be the same codes with the sign bit set (else None); (False, grid,
    fin) for a format held in float32.  Cached per format, mode, saturation and path."""
    key = (f, mode, bool(saturate), path)
    if key not in _FUSED:
        _FUSED[key] = _fused_params(f, mode, bool(saturate), path)
    return _FUSED[key]


def _fused_params(f: Format, mode: str, saturate: bool, path: str):
    if (f.name == "bfloat16" or not f.has_zero or f.twos_complement or not supports(f, mode, None)
            or (f.is_ml_dtype and f.name != "float16" and f.name not in ELEMENT_FORMATS)):
        return None
    grid = (_F32(2.0 ** (f.emax + 2)), _U32((f.emin + 127) << 23), _U32(f.mantissa_bits << 23))
    sat = saturate or f.saturates
    max_pos, max_neg = mode in ("toward_zero", "toward_negative"), mode in ("toward_zero", "toward_positive")
    ovf = np.float32(np.inf if f.has_inf else np.nan)
    if not f.is_ml_dtype:
        return False, grid, (_F32(f.max), sat, max_pos, max_neg, ovf.view(_U32), f.signed, not f.has_nz)
    if path == "nearest":
        store, probes = (lambda v: narrow_cast(v, f, saturate)), [f.max, np.inf, 2 * f.max]
    else:
        store = f32_to_f16 if f.name == "float16" else (lambda v: narrow_cast(v, f, False))
        probes = [f.max, ovf]
    if sat:  # every overflow is max: no overflow code to find
        probes = [f.max, f.max]
    with np.errstate(over="ignore", invalid="ignore"):
        v = np.float32(probes)
        pos, neg = (r.view(bits_view(r)).astype(_U32) for r in (store(v), store(-v)))
    sign = _U32(1 << (f.bits - 1))
    if np.any(neg != pos | sign) or np.any(pos[2:] != pos[1]):
        return None
    q0 = _U32(((f.emin + 127) << 23) - (f.mantissa_bits << 23))
    return True, grid, (q0, _U32(23 - f.mantissa_bits), pos[0], pos[1], sign, sat, max_pos, max_neg)


def round_magnitudes_f32(x32: np.ndarray, f: Format, mode: str, sr=None, rng=None) -> np.ndarray:
    """|x| rounded onto ``f``'s grid in ``mode`` (float32 in, float32 magnitudes out, the exponent
    range unbounded above as in ``modes.round_magnitudes``; NaN stays NaN, inf stays inf).

    Exact stochastic rounding (``mode="stochastic"``, ``sr=None``) draws ``rng.random(x32.size)``,
    one float64 uniform per value in order, as the float64 path does, and goes up where the draw
    is below the fraction (exact in float32, compared exactly): the same draws, the same results."""
    if (fast := compiled.rounding("magnitudes", x32, np.float32)) is not None:
        return fast(x32, f, mode, sr, rng)
    if f.name == "bfloat16":
        return _bf16(x32, mode, sr, rng)
    bits = x32.reshape(-1).view(_U32)
    a = np.bitwise_and(bits, _ABS).view(_F32)
    # Anything from 2**(emax + 2) up overflows in every mode: clamping it there keeps v below 2**31
    # and changes no result (NaN passes np.minimum; the caller tells inf from finite by x itself).
    np.minimum(a, _F32(2.0 ** (f.emax + 2)), out=a)
    q = np.bitwise_and(a.view(_U32), _EXP)
    np.maximum(q, _U32((f.emin + 127) << 23), out=q)
    q -= _U32(f.mantissa_bits << 23)  # q = 2**(e - mantissa_bits): one ulp
    inv = _INV - q
    v = a
    v *= inv.view(_F32)  # exact: a power of two
    neg = None if mode not in ("toward_positive", "toward_negative") else np.signbit(x32.reshape(-1))
    r = _pick(v, mode, neg, sr, rng)
    r *= q.view(_F32)
    return r.reshape(x32.shape)


def _pick(v: np.ndarray, mode: str, neg, sr, rng) -> np.ndarray:
    """v (>= 0, float32, exact) rounded to an integer in ``mode``."""
    if mode == "toward_zero":
        return np.floor(v, out=v)
    if mode == "nearest":
        return np.rint(v, out=v)  # ties to even: the significand's last bit is the pattern's
    if mode == "nearest_away":  # (not floor(v + 1/2): v below 1 can have bits that sum would lose)
        r = np.floor(v)
        half = r + _F32(0.5)  # exact: r is an integer below 2**23
        r += v >= half
        return r
    if mode in ("toward_positive", "toward_negative"):
        r = np.floor(v)
        up = v > r
        up &= ~neg if mode == "toward_positive" else neg
        r += up
        return r
    if mode == "to_odd":
        r = np.floor(v)
        up = v > r
        up &= (r.astype(np.int32) & 1) == 0
        r += up
        return r
    if sr is None:  # exact SR: up with probability equal to the fraction (float64 draws, exact compare)
        r = np.floor(v)
        v -= r
        r += rng.random(v.shape) < v
        return r
    return _stochastic(v, *sr)


def _stochastic(v: np.ndarray, k: int, rand: np.ndarray, variant: str) -> np.ndarray:
    """Few-bit SR (``sr.round_up_fewbit``'s rules) in float32: with D = delta * 2**k and
    N = 2**k - R (integers and D exact in float32 for k <= 24), floor(D) + R >= 2**k is D >= N,
    floor(2D) + 2R + 1 >= 2**(k+1) is D >= N - 1/2, and a rounding of D to nearest is >= N when D
    is beyond N - 1/2, or on it and the tie goes up (to even: N even; to odd: N odd)."""
    r = np.floor(v)
    d = v
    d -= r
    d *= _F32(2.0**k)
    rand = np.asarray(rand).reshape(-1)
    n = np.subtract(_F32(2.0**k), rand, dtype=_F32)  # exact: integers up to 2**24
    if variant == "fastest":
        up = d >= n
    else:
        n -= _F32(0.5)
        if variant == "fast":
            up = d >= n
        else:
            up = d > n
            tie = d == n
            if tie.any():
                n_odd = (rand & 1) == 1  # N = 2**k - R is odd when R is
                up |= tie & (n_odd if variant == "rto" else ~n_odd)
    r += up
    return r


def _bf16(x32: np.ndarray, mode: str, sr, rng) -> np.ndarray:
    """|x| rounded onto bfloat16's grid, on the float32 bit patterns: the low 16 bits are the
    fraction below the last kept bit (``rem``, delta = rem / 2**16)."""
    bits = x32.reshape(-1).view(_U32)
    a = np.bitwise_and(bits, _ABS)
    rem = np.bitwise_and(a, _U32(0xFFFF))
    r = a - rem  # toward zero
    if mode == "nearest":
        up = rem > 0x8000
        up |= (rem == 0x8000) & ((a & 0x10000) != 0)
    elif mode == "nearest_away":
        up = rem >= 0x8000
    elif mode in ("toward_positive", "toward_negative"):
        up = rem != 0
        up &= ~np.signbit(x32.reshape(-1)) if mode == "toward_positive" else np.signbit(x32.reshape(-1))
    elif mode == "to_odd":
        up = (rem != 0) & ((a & 0x10000) == 0)
    elif mode == "stochastic" and sr is None:  # exact SR: draw < rem / 2**16, scaled exactly by 2**16
        up = rng.random(rem.shape) * 65536.0 < rem
    elif mode == "stochastic":
        up = _bf16_fewbit(rem, *sr)
    else:
        up = None  # toward_zero
    if up is not None:
        r += up.astype(_U32) << 16
    if np.max(a) > _EXP:  # NaN somewhere: cutting its payload may have left an inf pattern
        nan = a > _EXP
        r[nan] = a[nan]
    return r.view(_F32).reshape(x32.shape)


def _bf16_fewbit(rem: np.ndarray, k: int, rand: np.ndarray, variant: str) -> np.ndarray:
    """``sr.round_up_fewbit`` on integers: D = rem * 2**(k - 16), cut to an integer as the variant
    says, and D + R >= 2**k (uint32 throughout: rem < 2**16, R < 2**24)."""
    rand = np.asarray(rand).reshape(-1).astype(_U32)
    if variant == "fast":  # floor(2D) + 2R + 1 >= 2**(k+1)
        cut2 = rem >> (15 - k) if k <= 15 else rem << (k - 15)
        return cut2 + 2 * rand + 1 >= 2 ** (k + 1)
    if k >= 16:
        cut = rem << (k - 16)  # exact: nothing to cut
    elif variant == "fastest":
        cut = rem >> (16 - k)
    else:
        s = 16 - k
        cut = rem >> s
        low = rem & ((1 << s) - 1)
        half = 1 << (s - 1)
        odd = (cut & 1) == 1
        cut += (low > half) | ((low == half) & (odd if variant == "rne" else ~odd))
    return cut + rand >= 2**k
