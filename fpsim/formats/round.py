"""Exact reference rounding: ``cast``, ``round_to``, ``ulp`` and ``classify``.

Rounding is done ONCE, correctly, from float32 and from float64 input.  Where numpy or
ml_dtypes already round correctly we use them (they are fast); where they may not - ml_dtypes
before 0.7 casts float64 to bfloat16/fp8 by way of float32, rounding twice - we first round
float64 to float32 *to odd*, which makes the second rounding correct whichever ml_dtypes runs (Boldo & Melquiond, 2008: rounding
to odd with at least two extra bits of precision is innocuous).  The other modes (``modes.py``
defines them all) run the fast float32 kernels of ``modekernels.py`` where they apply, and one
exact float64 algorithm everywhere else.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from .. import state
from ..checks import check_seed
from ..state import default_rng, manual_seed
from .kernels import f16_to_f32, f32_to_bf16, f32_to_f16, fp8_to_f32, narrow_cast
from .modekernels import cast_path, f64_loop, fused_applies, fused_cast, round_magnitudes_f32, supports
from .modes import ROUNDING_MODES, finish, round_magnitudes
from .names import mode_name
from .sr import SR_VARIANTS, check_sr, draw_bits
from .table import ALL_FORMATS, ELEMENT_FORMATS, Format, get_format

__all__ = ["ROUNDING_MODES", "CATEGORIES", "cast", "round_to", "rounding_mode", "ulp", "classify", "Classification",
           "manual_seed", "default_rng"]

CATEGORIES = ("zero", "subnormal", "normal", "inf", "nan")

# --------------------------------------------------------------------------------------------
# input handling

_EXACT_IN_F32 = {np.dtype(np.float16)} | {f.dtype for f in ALL_FORMATS.values() if f.bits <= 16}


def _ml_dtypes_kind(dt: np.dtype) -> str:
    """``"f"`` for an ml_dtypes float dtype (bfloat16 and every float8 / float6 / float4 variant,
    whether fpsim's table names it or not: float8_e4m3fnuz, float8_e3m4, ...; at most 16 bits, so
    float32 holds each value exactly), ``"i"`` for an ml_dtypes integer (int4, uint2, ...), else ``""``."""
    if getattr(dt.type, "__module__", "") != "ml_dtypes":
        return ""
    for kind, info in (("f", ml_dtypes.finfo), ("i", ml_dtypes.iinfo)):
        try:
            info(dt)
            return kind
        except (TypeError, ValueError):  # not inexact / not an integer
            continue
    return ""


def _as_float_array(x) -> np.ndarray:
    """x as a float32 or float64 array holding exactly the same values.

    Low-precision inputs (float16, bfloat16, fp8 - every ml_dtypes float, float8_e4m3fnuz and
    float8_e3m4 too, and torch's bfloat16 and float8 tensors, which numpy cannot read) widen exactly
    to float32; Python floats and ints (and ml_dtypes' int4 ...) become float64.  Anything
    non-numeric is a TypeError naming what it got; text is not parsed, in a list as alone.
    """
    if isinstance(x, np.ndarray | np.generic):
        arr = np.asarray(x)
    elif isinstance(x, numbers.Real) and not isinstance(x, bool):
        arr = np.asarray(float(x), dtype=np.float64)
    elif isinstance(x, list | tuple):
        arr = _list_array(x)
    elif (wide := _torch_narrow_float(x)) is not None:
        arr = wide
    elif hasattr(x, "__array__") or hasattr(x, "__cuda_array_interface__"):
        arr = np.asarray(x.get() if hasattr(x, "get") else x)
    else:
        raise TypeError(f"expected a number or an array of numbers, got {type(x).__name__}"
                        + (" (text is not parsed: convert it with float() first)" if isinstance(x, str | bytes) else ""))
    dt = arr.dtype
    if dt in (np.float32, np.float64):
        return arr
    if dt == np.float16:
        return f16_to_f32(arr)
    if dt in _EXACT_IN_F32:
        return arr.astype(np.float32)
    if dt.kind in "iu":
        return arr.astype(np.float64)
    kind = _ml_dtypes_kind(dt)
    if kind:  # widened exactly: a float of at most 16 bits into float32, an integer into float64
        return arr.astype(np.float32 if kind == "f" else np.float64)
    if dt == np.bool_ or dt.kind not in "f":
        raise TypeError(f"expected a float or integer array, got dtype {dt}")
    return arr.astype(np.float64)  # e.g. longdouble: one rounding to float64 first


def _list_array(x: list | tuple) -> np.ndarray:
    """A (nested) list or tuple of numbers as float64; one holding text is refused, as a str alone
    is (numpy would parse ``["1.0"]``), and so is a ragged one or one holding other objects."""
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError):  # ragged
        raise TypeError(f"expected numbers, got a {type(x).__name__} holding non-numbers") from None
    if arr.dtype.kind in "USV" or (arr.dtype.kind == "O" and any(isinstance(v, str | bytes) for v in arr.ravel())):
        raise TypeError(f"expected numbers, got a {type(x).__name__} holding text (it is not parsed: convert it "
                        "with float() first)")
    try:
        return arr.astype(np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"expected numbers, got a {type(x).__name__} holding non-numbers") from None


def _torch_narrow_float(x) -> np.ndarray | None:
    """A torch tensor of a float dtype numpy has no twin for (bfloat16, the float8s: two bytes or
    one, not float16) as float32, widened exactly by torch itself (float32 holds every value of a
    float of at most 16 bits); None for anything else.  torch is never imported here."""
    dt = getattr(x, "dtype", None)
    if type(x).__module__.split(".")[0] != "torch" or not getattr(dt, "is_floating_point", False):
        return None
    if getattr(dt, "itemsize", 4) > 2 or str(dt) == "torch.float16":
        return None
    return x.detach().cpu().float().numpy()


# --------------------------------------------------------------------------------------------
# rounding

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


def _check_mode(rounding: str) -> str:
    return mode_name(rounding, ROUNDING_MODES, "rounding mode")


def cast(x, fmt, rounding: str = "nearest", *, saturate: bool = False, seed=None, rng=None, sr_bits=None,
         sr_random=None, sr_variant: str = "rne"):
    """Round ``x`` once, correctly, into scalar format ``fmt``, in its storage dtype (:func:`round_to`: ``x``'s).

    Input: anything numeric (float64 / float32 / int arrays, every numpy and ml_dtypes float or int,
    widened exactly; Python numbers); ``fmt``: any Format (held in float32: rounded onto its grid).
    Rounding modes (:mod:`fpsim.formats.modes` defines each): ``nearest`` (ties to even), ``nearest_away``,
    ``toward_zero``, ``toward_positive``, ``toward_negative``, ``to_odd``, ``stochastic`` - all exact
    from float32 and float64 input (one rounding).

    ``stochastic`` goes up with probability proportional to the distance from the lower
    neighbour; pass ``seed`` or a numpy ``rng`` for reproducibility, otherwise a module generator
    reset by :func:`manual_seed` is used.  ``sr_bits=k`` rounds with k random bits instead, as
    hardware does (:mod:`fpsim.formats.sr`): ``sr_random`` gives them (integers in [0, 2**k),
    broadcast to x's shape: the result is then reproducible bit for bit), else they are drawn
    from the generator; ``sr_variant`` (``rne``, ``rto``, ``fast``, ``fastest``) is how the
    distance is cut to k bits, as gfloat and IEEE P3109 define it.

    Overflow follows IEEE: to nearest (and away, to odd, stochastic) it gives +-inf, or NaN in
    float8_e4m3fn, which has no inf; toward zero it gives +-max, and a directed mode gives +-max on
    the side it rounds away from.  ``saturate=True`` clamps every overflow to +-max, infinite
    inputs included (as the hardware's saturating fp8 conversions do).  -0 stays -0 (where the
    format has one) and NaN stays NaN.

    The block-format element and scale types (OCP MX v1.0, section 5):
    - float6_e2m3fn, float6_e3m2fn, float4_e2m1fn and ocp_int8 have no inf and no NaN: every
      overflow and +-inf becomes +-max whatever ``saturate`` says (as ml_dtypes does; ocp_int8's
      negative max is -2), and a NaN input is a ValueError (nothing is cast; ml_dtypes would
      silently give a zero).
    - float8_e8m0fnu holds only powers of two 2**-127 .. 2**127 and NaN: positive values
      round on that grid (to nearest, a tie such as 3 = 1.5 * 2**1 goes up, to 4: with no
      mantissa bit both neighbours have an odd significand, and ml_dtypes and PyTorch round
      up); values below 2**-127 become 2**-127 in every mode (there is no zero to go to);
      0, negative values and NaN become NaN; overflow is NaN, or 2**127 toward zero or
      with ``saturate``.
    - The IEEE P3109 formats (``p3109_k8p4se`` ...) and ocp_int8 come back as float32 arrays
      holding their values exactly (:func:`fpsim.encode` gives the bit patterns); P3109 has no
      -0 (it becomes +0) and its unsigned formats give NaN for negative input.

    The result is always a numpy array of the input's shape: a 0-d array for a Python number or a
    0-d / numpy scalar input, whatever the rounding mode (``float(...)`` or ``.item()`` gives the number).
    """
    f = get_format(fmt)
    rounding = _check_mode(rounding)
    sr_variant = mode_name(sr_variant, SR_VARIANTS, "sr_variant")
    check_seed(seed)
    if rng is not None and not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy Generator (np.random.default_rng(...)) or None, got {type(rng).__name__}")
    arr = _as_float_array(x)
    fused = (not f.has_nan or sr_random is not None) and fused_applies(arr, f, rounding, saturate, sr_bits)
    rand = check_sr(rounding, sr_bits, sr_random, sr_variant, arr.shape, ranged=not fused)  # else the loop does
    if not f.has_nan and not (fused and (rounding != "stochastic" or rand is not None)):
        _refuse_nan(arr, f)  # else the fused loop counts them, before anything is drawn or returned
    if rounding == "stochastic" and rng is None:
        rng = np.random.default_rng(seed) if seed is not None else state.default_rng()
    if sr_bits is not None and rand is None:
        rand = draw_bits(rng, sr_bits, arr.shape)
    sr = None if sr_bits is None else (int(sr_bits), rand, sr_variant)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow to inf and NaN passing through: results here
        return np.asarray(_cast(arr, f, rounding, saturate, rng, sr))


def _refuse_nan(arr: np.ndarray, f: Format) -> None:
    """A ValueError naming how many NaNs ``arr`` holds where format ``f`` has none; nothing otherwise."""
    n = 0 if f.has_nan else int(np.count_nonzero(np.isnan(arr)))
    if n:
        raise ValueError(f"{f.name} has no NaN: {n} NaN value{'s' * (n > 1)} in the input cannot be cast to it")


def _fused(arr: np.ndarray, f: Format, mode: str, saturate: bool, sr, rng, redo):
    """``modekernels.fused_cast``'s result (None where it does not apply): a given random integer out of
    range refused (``check_sr``'s error), then its NaN inputs (a format without NaN: :func:`_refuse_nan`'s
    error), or their results by ``redo`` (the numpy path)."""
    got = fused_cast(arr, f, mode, saturate, sr, rng, cast_path(f, mode))
    if got is None:
        return None
    out, nan, most = got
    if sr is not None and most >= 2 ** sr[0]:
        check_sr(mode, sr[0], sr[1], sr[2], arr.shape)  # raises: cast left the range test to the loop
    if nan:
        _refuse_nan(arr, f)
        where = np.isnan(arr)
        out[where] = redo(arr[where])
    return out


def _cast(arr: np.ndarray, f: Format, rounding: str, saturate: bool, rng, sr) -> np.ndarray:
    if f.is_ml_dtype and (arr.dtype == f.dtype or (f.name == "float32" and arr.dtype == np.float32)):
        out = arr.astype(f.dtype, copy=True)
        return _saturate(out, arr, f) if saturate else out
    # ml_dtypes rounds float32 -> float8_e8m0fnu wrongly for float32 subnormal inputs: exact path.
    if rounding == "nearest" and f.has_zero and f.is_ml_dtype:
        if (fast := f64_loop(arr, f, rounding)) is not None:  # the numpy path's bits; NaN refused where it is
            return fast(arr, f, saturate, lambda v: _refuse_nan(arr, f) or narrow_cast(v, f, saturate))
        if arr.dtype == np.float64 and f.name == "bfloat16":
            out = _f64_to_bf16(arr)
            return _saturate(out, arr, f) if saturate else out
        if arr.dtype == np.float64 and f.name not in ("float16", "float32"):
            arr = _to_odd_f32(arr)
        # numpy (float16, float32) and ml_dtypes (bfloat16, fp8) round correctly from here; the kernels give
        # their bits, faster (the fp8 / fp6 / fp4 tables are ml_dtypes' cast, saturating or not, NaNs included)
        if f.name in ELEMENT_FORMATS:
            out = _fused(arr, f, "nearest", saturate, None, None, lambda v: narrow_cast(v, f, saturate))
            return narrow_cast(arr, f, saturate) if out is None else out
        out = (f32_to_f16(arr) if f.name == "float16" else f32_to_bf16(arr) if f.name == "bfloat16"
               else arr.astype(f.dtype))
        return _saturate(out, arr, f) if saturate else out
    if rounding == "nearest" and not saturate and arr.dtype == np.float32 and _float32_ranged(f):
        return _nearest_e8(arr, f.mantissa_bits)
    if arr.dtype == np.float32 and supports(f, rounding, sr):
        return _fast_f32(arr, f, rounding, saturate, sr, rng)
    x64 = arr.astype(np.float64)
    return _store(finish(round_magnitudes(x64, f, rounding, rng, sr), x64, f, rounding, saturate), f)


def _float32_ranged(f: Format) -> bool:
    """A format held in float32 with float32's exponent field, subnormals, inf and NaN and fewer
    mantissa bits (the narrow accumulators ``e8m<m>`` of :func:`fpsim.lowp.block.accumulator_format`):
    its values are the float32 patterns whose low 23 - m bits are zero."""
    return (f.dtype == np.float32 and not f.is_ml_dtype and f.exponent_bits == 8 and f.mantissa_bits < 23
            and f.specials == "ieee" and f.signed and f.subnormals and f.bias_override is None)


def _nearest_e8(x32: np.ndarray, m: int) -> np.ndarray:
    """float32 rounded to nearest, ties to even, into a :func:`_float32_ranged` format of ``m``
    mantissa bits, on the bit patterns: the magnitude's low 23 - m bits are cut, adding half an ulp
    less one plus the last kept bit (a carry steps into the next binade, and from the largest
    finite value to inf, as IEEE overflow does); the sign is kept and NaN stays NaN (the cut could
    have made an inf, or with a carry into the sign bit a zero, of a NaN's payload)."""
    drop = 23 - m
    bits = x32.view(np.uint32)
    a = np.bitwise_and(bits, np.uint32(0x7FFFFFFF))
    r = a + (np.uint32((1 << (drop - 1)) - 1) + ((a >> np.uint32(drop)) & np.uint32(1)))
    r &= np.uint32(~((1 << drop) - 1) & 0xFFFFFFFF)
    r |= np.bitwise_and(bits, np.uint32(0x80000000))
    nan = a > np.uint32(0x7F800000)
    if nan.any():
        r[nan] = bits[nan]
    return r.view(np.float32)


_CHUNK = 2**16  # values a pass: the kernel's few temporaries stay in L2 and are not page-faulted in anew


def _fast_f32(arr: np.ndarray, f: Format, mode: str, saturate: bool, sr, rng) -> np.ndarray:
    """The float32 kernel, :func:`finish` and :func:`_store`, a chunk of values at a time (exact
    stochastic rounding draws each chunk's uniforms in turn: the same stream as one draw for all); the
    compiled fused loop in one pass where it applies (a NaN's result does not depend on the mode, the
    draws or saturation: the NaNs are redone here toward zero)."""
    out = _fused(arr, f, mode, saturate, sr, rng, lambda v: _store(finish(round_magnitudes_f32(
        v, f, "toward_zero"), v, f, "toward_zero", saturate), f))
    if out is not None:
        return out
    flat = arr.reshape(-1)
    out = np.empty(flat.shape, f.dtype)
    rand = None if sr is None else np.asarray(sr[1]).reshape(-1)
    for i in range(0, flat.size, _CHUNK):
        xs = flat[i : i + _CHUNK]
        s = None if sr is None else (sr[0], rand[i : i + _CHUNK], sr[2])
        mag = round_magnitudes_f32(xs, f, mode, s, rng)
        out[i : i + _CHUNK] = _store(finish(mag, xs, f, mode, saturate), f)
    return out.reshape(arr.shape)


def _store(vals: np.ndarray, f: Format) -> np.ndarray:
    """Exact values of ``f`` (float32 or float64) in its storage dtype: no rounding happens here
    (numpy's and ml_dtypes' casts are exact on exact values; the fp8 / fp6 / fp4 elements go by
    the table of ``kernels.narrow_cast``, ml_dtypes' own cast of the same values, 20x faster)."""
    if f.name == "float16":
        return f32_to_f16(vals)
    if f.name in ELEMENT_FORMATS:
        return narrow_cast(vals.astype(np.float32, copy=False), f, False)
    return vals.astype(f.dtype, copy=False)


def _saturate(out: np.ndarray, src: np.ndarray, f: Format) -> np.ndarray:
    """Replace overflowed results (and infinite inputs) by +-max; NaN inputs stay NaN."""
    wide = np.promote_types(out.dtype, np.float32)  # float32, float64 for float64 itself
    res = out.astype(wide)
    bad = ~np.isfinite(res) & ~np.isnan(src)
    if np.any(bad):
        with np.errstate(over="ignore"):
            src = src.astype(wide)
        out = np.where(bad, np.copysign(wide.type(f.max), src), res)
        out = out.astype(f.dtype)
    return out


def round_to(x, fmt, rounding: str = "nearest", *, saturate: bool = False, seed=None, rng=None, sr_bits=None,
             sr_random=None, sr_variant: str = "rne"):
    """:func:`cast`'s values (every argument as there), returned in the input's float dtype, not the format's storage.

    float64 and float32 inputs stay float64 / float32; Python numbers come back as float64
    arrays; low-precision inputs (float16, bfloat16, fp8) come back as float32; into a format held in
    float64 (float64 itself, a wide P3109 format) every input comes back as float64 (its values need
    it: 2**128 is one of p3109_k11p3ue's, float64's max what float32's inf saturates to).  Always an
    array, 0-d for a number (as :func:`cast`).
    """
    arr = _as_float_array(x)
    f = get_format(fmt)
    out = cast(arr, f, rounding, saturate=saturate, seed=seed, rng=rng, sr_bits=sr_bits, sr_random=sr_random,
               sr_variant=sr_variant)
    return np.asarray(_widen(out, np.float64 if f.dtype == np.float64 else arr.dtype))


def _widen(out: np.ndarray, dtype) -> np.ndarray:
    """A format's stored values as float32 or float64 ``dtype``, exactly: float16 and the one-byte
    formats by the kernels' widenings (the same bits as numpy's and ml_dtypes' casts, 4 to 40 times
    faster), anything else by its own cast."""
    if out.dtype == np.float16:
        wide = f16_to_f32(out)
    elif out.dtype.itemsize == 1:
        wide = fp8_to_f32(out)
    else:
        return out.astype(dtype)
    return wide if dtype == np.float32 else wide.astype(dtype)


def rounding_mode(mode: str = "nearest", *, sr_bits=None, sr_variant: str = "rne", seed=None, rng=None):
    """A context manager: inside it the engine rounds every op's result, gradient and update in
    ``mode`` (any of :data:`ROUNDING_MODES`; ``stochastic`` with ``sr_bits`` / ``sr_variant`` as
    in :func:`cast`, drawing from ``seed``'s or ``rng``'s generator, else the one
    :func:`manual_seed` resets) - wherever an op does not ask for a rounding of its own (the
    optimizers' ``update_rounding="stochastic"`` keeps its own).  Outside, and by default, the
    engine rounds to nearest, ties to even, at the cost of one truth test::

        with fpsim.rounding_mode("toward_zero"):
            loss = model(x).mean()   # every rounding inside truncates

    Nested blocks: the innermost wins.  Arguments are checked here, before anything runs.
    """
    mode = _check_mode(mode)  # "NEAREST" as format names are
    sr_variant = mode_name(sr_variant, SR_VARIANTS, "sr_variant")
    check_sr(mode, sr_bits, None, sr_variant, ())
    check_seed(seed)
    if rng is not None and not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy Generator (np.random.default_rng(...)) or None, got {type(rng).__name__}")
    if seed is not None:
        rng = np.random.default_rng(seed)
    return state.rounding_as(state.EngineRounding(mode, None if sr_bits is None else int(sr_bits), sr_variant, rng))


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
    out = np.where(np.isinf(a) | ((a > 0) & (e2 - 1 > f.emax)), np.inf, out)  # at or beyond 2**(emax + 1)
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
    """Round ``x`` into ``fmt`` (as :func:`cast` does) and say what became of each element.

    In a format without inf and NaN (fp6, fp4) every overflow is clamped to max, so
    ``overflow`` marks those clamped values whether or not ``saturate`` was asked for.
    """
    f = get_format(fmt)
    arr = _as_float_array(x)
    stored = cast(arr, f, rounding, saturate=saturate)
    r = stored.astype(np.float32 if f.dtype.itemsize <= 4 else np.float64)  # float64 carriers keep their values
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
        beyond = np.abs(v) > f.max  # not e8m0's 0 or negatives: NaN there is no overflow
        overflow = v_finite & beyond & (inf | nan | _clamped(v, a, f, saturate or f.saturates))
        inexact = (r.astype(np.float64) != v.astype(np.float64)) & ~(np.isnan(v) & nan)
    return Classification(f, v, stored, category, underflow, sub, overflow, nan, inexact)


def _clamped(v, a, f: Format, saturate: bool):
    """Finite values that saturation clamped to max: those whose rounding, with the exponent
    range unbounded, lands beyond max (for e4m3fn 464 is a tie that rounds to 448: no overflow)."""
    if not saturate:
        return np.zeros(np.shape(v), dtype=bool)
    v64 = np.asarray(v, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        return (a == f.max) & (round_magnitudes(v64, f, "nearest") > f.max)
