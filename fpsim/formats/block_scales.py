"""How each block-scaled format picks its scales and rounds its elements, on blocked float32 arrays.

The arrays come in blocked: ``xb`` has the elements of one block along the block axes (the last
axis for 1-D blocks, axes -3 and -1 for 2-D tiles), and ``amax`` has one value per block.  Each
family returns the stored scales (in their own dtype), the float32 factor the elements are
multiplied by before rounding, and the float32 decode factor per block.

- MX (OCP Microscaling Formats (MX) Specification v1.0, section 6.3): X = 2**E, one e8m0 per
  block, with E from the block's amax by one of four rules (torchao's ScaleCalculationMode names):
  ``floor`` (the spec: floor(log2 amax) - emax_elem), ``ceil`` (ceil(log2 amax) - emax_elem),
  ``even`` (amax first rounded to the element's precision, ties to even, then floor) and ``rceil``
  (NVIDIA's rule, as cuBLAS's block quantization and torchao compute it: d = amax * (1 / max_elem)
  in float32, rounded up to a power of two), and ``bump`` (floor, plus one when the amax lies
  beyond the element's largest significand times 2**floor(log2 amax) - 1.75 for e4m3 - that is,
  exactly when floor would saturate the block's max: the "bump up overflow exponent" of
  arXiv 2506.20752, Hither1/systems-scaling).  E is clamped to e8m0's range [-127, 127].
- NVFP4 (NVIDIA Transformer Engine, "Using FP8 and FP4 with Transformer Engine", NVFP4 recipe;
  arXiv 2509.25149): per tensor S_enc = 448 * 6 / amax; per block the e4m3 decode scale
  s = e4m3(amax_b * (S_enc * (1/6))); elements e2m1(x * (1 / (s * (1 / S_enc)))), saturating;
  every step in float32 in TE's reference order.
- DeepSeek-V3 fp8 blocks (arXiv 2412.19437, section 3.3), as Transformer Engine's
  Float8BlockScaling recipe computes them: e4m3 elements, per 1x128 tile or 128x128 block the
  float32 encode scale S = 448 / amax_b (float32's max if that overflows), with ``pow2_scales``
  rounded down to a power of two (its exponent bits kept); elements e4m3(x * S), saturating; the
  stored float32 decode scale is 1 / S.

Which rule a block format follows is a field of the format (:mod:`.scale_rules`).  A block whose
amax is inf or NaN gets a NaN scale and dequantizes to NaN (the MX spec leaves Inf
and NaN inputs to the implementation; torchao and microxcaling do this for MX, and fpsim does it
for all three families).  A block of zeros gets the family's smallest scale (e8m0 2**-127) or 1.
"""

from __future__ import annotations

import math

import numpy as np

from ..numerics import compiled
from .kernels import fp8_to_f32, narrow_cast
from .table import Format, get_format

__all__ = ["SCALE_ROUNDINGS", "mx_exponents", "mx_scales", "mx_floor_tables", "nvfp4_tensor_scale", "nvfp4_scales",
           "fp8_block_scales", "NVFP4_AMAX_DIVISOR"]

SCALE_ROUNDINGS = ("floor", "ceil", "even", "rceil", "bump")
_F32 = np.float32
_FLT_MAX = _F32(np.finfo(np.float32).max)
_FLT_MAX_F = float(_FLT_MAX)
_E4M3 = get_format("float8_e4m3fn")
NVFP4_AMAX_DIVISOR = 448.0 * 6.0  # e4m3's max times e2m1's max


def _bits(a32: np.ndarray) -> np.ndarray:
    return a32.view(np.uint32).astype(np.int64)


def mx_exponents(amax: np.ndarray, elem: Format, mode: str) -> np.ndarray:
    """The unclamped shared exponent E (int64) of each block from its float32 amax (finite, >= 0).

    Read from amax's bit pattern, so exact: for a normal float32 amax the exponent field less 127
    is floor(log2 amax).  A subnormal or zero amax gives -127 - emax_elem, which the caller's
    clamp to -127 makes exactly what every rule gives there.
    """
    b = _bits(amax)
    field = b >> 23
    if mode == "even":  # round amax to the element's mantissa bits first: a carry bumps the exponent
        field = (b + (1 << (22 - elem.mantissa_bits))) >> 23
    e = field - 127
    if mode == "ceil":
        e = e + ((b & 0x7FFFFF) != 0)
    if mode == "bump":  # the significand 1.f beyond max / 2**emax (exact: max has few significand bits)
        top = int(round((elem.max / 2.0**elem.emax - 1) * 2**23))
        e = e + ((field > 0) & ((b & 0x7FFFFF) > top))
    if mode in ("floor", "ceil", "even", "bump"):
        return e - elem.emax
    # rceil: d = amax * (1 / max) in float32, then up to a power of two: ceil(log2 d).  A subnormal d
    # lies in (0, 2**-126): -126 if above 2**-127, else -127 or less (clamped to -127 by the caller).
    with np.errstate(under="ignore"):
        d = _bits(amax * (_F32(1) / _F32(elem.max)))
    field, man = d >> 23, d & 0x7FFFFF
    return np.where(field > 0, field - 127 + (man != 0), np.where(man > 0x400000, -126, -127))


def mx_scales(amax: np.ndarray, elem: Format, mode: str):
    """e8m0 codes (float8_e8m0fnu array), the float32 factor 2**-E and the decode factor 2**E per block.

    Under ``floor`` E depends on amax's exponent field alone (NaN and inf: field 255): three
    256-entry tables, made by the general rule below from one amax per field, are looked up."""
    if mode == "floor":
        field = np.ascontiguousarray(amax, np.float32).view(np.uint32) >> np.uint32(23)
        field &= np.uint32(0xFF)
        codes, inv, dec = mx_floor_tables(elem)
        return codes.take(field).view(get_format("float8_e8m0fnu").dtype), inv.take(field), dec.take(field)
    return _mx_scales(amax, elem, mode)


def mx_floor_tables(elem: Format):
    """:func:`_mx_scales` under ``floor`` of 0, 2**-126 .. 2**127 and inf: indexed by exponent field
    (the e8m0 codes as bytes, the encode and the decode factors; made once per element format)."""
    t = _FLOOR_TABLES.get(elem)
    if t is None:
        one_per_field = (np.arange(256, dtype=np.uint32) << np.uint32(23)).view(np.float32)
        codes, inv, dec = _mx_scales(one_per_field, elem, "floor")
        t = _FLOOR_TABLES[elem] = (codes.view(np.uint8), inv, dec)
    return t


_FLOOR_TABLES: dict[Format, tuple] = {}


def _mx_scales(amax: np.ndarray, elem: Format, mode: str):
    finite = np.isfinite(amax)
    e = np.clip(mx_exponents(np.where(finite, amax, _F32(0)), elem, mode), -127, 127)
    codes = np.where(finite, e + 127, 255).astype(np.uint8)
    return codes.view(get_format("float8_e8m0fnu").dtype), _pow2(-e, finite), _pow2(e, finite)


def _pow2(e: np.ndarray, finite: np.ndarray) -> np.ndarray:
    """float32 2**e for integer e in [-127, 127] (2**-127 is a float32 subnormal), NaN where not
    ``finite``: written as bit patterns, exact."""
    bits = np.where(e > -127, (e + 127) << 23, 0x00400000)
    bits = np.where(finite, bits, 0x7FC00000)
    return bits.astype(np.uint32).view(np.float32)


def nvfp4_tensor_scale(tensor_amax: float, scale_max: float = 448.0) -> np.float32:
    """S_enc = (scale_max * 6) / amax in float32, as TE computes it: capped at float32's max, and 1
    where amax is 0 or not finite (a tensor holding nothing to scale).  ``scale_max`` is 448
    (e4m3's max), or 256 for Four Over Six (:mod:`fpsim.formats.fouroversix`)."""
    amax = float(_F32(tensor_amax))
    if not math.isfinite(amax) or amax == 0:
        return _F32(1)
    # float32's quotient: the float64 one rounded to float32 is the same (53 >= 2 * 24 + 2 bits), capped
    q = float(_F32(scale_max) * _F32(6)) / amax
    return _FLT_MAX if q >= _FLT_MAX_F else _F32(q)


def nvfp4_scales(amax: np.ndarray, s_enc: np.float32, top: float = 6.0):
    """e4m3 block scales, the float32 encode factor and the float32 decode factor per block.

    In float32, in the order of TE's NVFP4 reference quantizer: the decode scale amax_b * (S_enc *
    (1/6)), capped at 448 and rounded to e4m3 (nearest even); the encode factor 1 / (s * S_dec)
    with S_dec = 1 / S_enc, capped at float32's max, and 0 where s rounded to 0 (TE's
    ``S_dec_b_fp32 == 0 ? 0``: the block's elements become 0 and count as underflowed, as they
    decode); the decode factor s * S_dec.
    """
    s_dec = _F32(1) / s_enc
    mult = s_enc * (_F32(1) / _F32(top))  # top: the element value the block's amax maps to (6; 4 in 4/6)
    # the compiled loop for a few blocks too once the kernels are loaded (a 64 x 64 weight's 16 tiles)
    fast = compiled.count("nvfp4_scales", amax) if amax.dtype == np.float32 else None
    if fast is not None and amax.flags.c_contiguous and np.isfinite(mult) and np.isfinite(s_dec):
        # the same steps, block by block in one loop (S_enc is finite and nonzero: nvfp4_tensor_scale's)
        codes, enc, dec = fast(amax, mult, s_dec)
        return codes.view(_E4M3.dtype), enc, dec
    bad = ~np.isfinite(amax)
    a = np.array(amax, np.float32)
    a[bad] = 0
    with np.errstate(over="ignore", divide="ignore"):
        d = a
        d *= mult
        np.minimum(d, _F32(_E4M3.max), out=d)
        codes = narrow_cast(d, _E4M3, False)  # float32 -> e4m3 to nearest even (ml_dtypes' cast, by table)
        s = fp8_to_f32(codes)
        dec = s * s_dec
        enc = np.divide(_F32(1), dec, dtype=np.float32)
        np.minimum(enc, _FLT_MAX, out=enc)
        enc[s == 0] = 0
    codes[bad] = np.nan
    enc[bad] = np.nan
    dec[bad] = np.nan
    return codes, enc, dec


def fp8_block_scales(amax: np.ndarray, pow2: bool, top: float = 448.0):
    """float32 encode scales S = top / amax (``top``: the element's max, e4m3's 448; pow2: its
    exponent bits alone) and decode scales 1 / S per block, as TE's compute_scale_from_amax: S = 1
    for an all-zero block, float32's max where top / amax overflows."""
    finite = np.isfinite(amax)
    a = np.where(finite, amax, _F32(1))
    with np.errstate(over="ignore", divide="ignore"):
        enc = np.where(a == 0, _F32(1), _F32(top) / a)
    enc = np.minimum(enc, _FLT_MAX).astype(np.float32)
    if pow2:
        enc = (enc.view(np.uint32) & np.uint32(0xFF800000)).view(np.float32)
    dec = (_F32(1) / enc).astype(np.float32)
    enc[~finite] = np.nan
    dec[~finite] = np.nan
    return enc, dec
