"""An independent reference for block-scaled formats, written from the definitions, not from fpsim.

Exact rational arithmetic (fractions.Fraction), one block at a time, in loops: slow, small inputs
only.  Nothing here calls fpsim's rounding or block code.

- MX: OCP Microscaling Formats (MX) Specification v1.0, section 6.3 ("minimally supported"
  conversion): X = 2**(floor(log2(amax)) - emax_elem), clamped to e8m0's 2**-127 .. 2**127;
  P_i = V_i / X rounded to the element format (nearest even), beyond max clamped to max.  The
  scale roundings ceil / even / rceil as torchao's ScaleCalculationMode defines them (rceil:
  amax * (1 / max_elem) in float32, rounded up to a power of two, as NVIDIA's hardware does).
- NVFP4: NVIDIA Transformer Engine's recipe (per-tensor S_enc = 448 * 6 / amax, e4m3 block scales
  amax_b * (S_enc * (1/6)), elements x * (1 / (s * (1 / S_enc))) clamped to 6), every operation
  rounded to float32 as TE's reference quantizer does.
- DeepSeek-V3 fp8 blocks (arXiv 2412.19437, section 3.3) as TE's Float8BlockScaling computes
  them: S = 448 / amax in float32 (pow2: S rounded down to a power of two), elements
  e4m3(x * S) saturating, stored decode scale 1 / S.
"""

from __future__ import annotations

import math
from fractions import Fraction as Q

import numpy as np

# (mantissa bits, exponent of the smallest normal, max, emax_elem), from the MX spec's tables.
ELEM = {
    "float8_e4m3fn": (3, -6, Q(448), 8),
    "float8_e5m2": (2, -14, Q(57344), 15),
    "float6_e3m2fn": (2, -2, Q(28), 4),
    "float6_e2m3fn": (3, 0, Q(15, 2), 2),
    "float4_e2m1fn": (1, 0, Q(6), 2),
}
MX_ELEM = {"mxfp8_e4m3": "float8_e4m3fn", "mxfp8_e5m2": "float8_e5m2", "mxfp6_e3m2": "float6_e3m2fn",
           "mxfp6_e2m3": "float6_e2m3fn", "mxfp4_e2m1": "float4_e2m1fn"}
F32_MAX = Q((2**24 - 1) * 2**104)


def floor_log2(q: Q) -> int:
    e = q.numerator.bit_length() - q.denominator.bit_length()
    return e - 1 if Q(2) ** e > q else e


def ceil_log2(q: Q) -> int:
    e = floor_log2(q)
    return e if Q(2) ** e == q else e + 1


def rne(q: Q, m: int, emin: int, vmax: Q | None = None) -> Q:
    """Round q >= 0 onto a binary grid with m mantissa bits and smallest normal exponent emin
    (subnormals below it), ties to even; then clamp to vmax."""
    if q == 0:
        return q
    ulp = Q(2) ** (max(floor_log2(q), emin) - m)
    n = q / ulp
    fl = n.numerator // n.denominator
    rem = n - fl
    if rem > Q(1, 2) or (rem == Q(1, 2) and fl % 2):
        fl += 1
    r = fl * ulp
    return min(r, vmax) if vmax is not None else r


def f32(q: Q) -> Q | float:
    """A rational rounded to float32 (nearest even); +-inf beyond float32's range."""
    a = rne(abs(q), 23, -126)
    if a > F32_MAX:
        return math.copysign(math.inf, q)
    return a if q >= 0 else -a


def signed(v: float, mag: Q) -> float:
    """mag with the sign of v (so -0.0 stays negative), as a float."""
    return math.copysign(float(mag), v)


class Block:
    """One block's reference result: the stored scale, the element values, the dequantized
    values, and the counts of underflowed and saturated elements (None scale: a NaN block)."""

    def __init__(self, scale, elements, dequant, underflow, saturated):
        self.scale, self.elements, self.dequant = scale, elements, dequant
        self.underflow, self.saturated = underflow, saturated


def _counts(vals, scaled, elems, vmax):
    under = sum(1 for v, e in zip(vals, elems) if v != 0 and e == 0)
    sat = sum(1 for s in scaled if abs(s) > vmax)
    return under, sat


def mx_block(vals: list[float], elem: str, mode: str) -> Block:
    """vals: the block's float32 values (Python floats).  Scale: the e8m0 exponent E."""
    if not all(math.isfinite(v) for v in vals):
        return Block(None, None, [math.nan] * len(vals), 0, 0)
    m, emin, vmax, emax = ELEM[elem]
    amax = max(abs(Q(v)) for v in vals)
    if amax == 0:
        e = -127
    elif mode == "floor":
        e = floor_log2(amax) - emax
    elif mode == "ceil":
        e = ceil_log2(amax) - emax
    elif mode == "even":  # amax rounded to the element's precision (exponent unbounded) first
        e = floor_log2(rne(amax, m, -(10**6))) - emax
    elif mode == "bump":  # floor, plus one where the block max lies beyond the element's largest significand
        k = floor_log2(amax)
        e = k - emax + (amax > vmax / Q(2) ** emax * Q(2) ** k)
    else:  # rceil: amax * (1 / max) in float32, up to a power of two
        d = f32(amax * f32(1 / vmax))
        e = ceil_log2(d) if d > 0 else -127
    e = min(max(e, -127), 127)
    x = Q(2) ** e
    scaled = [Q(v) / x for v in vals]
    elems = [rne(abs(s), m, emin, vmax) for s in scaled]
    out = [signed(v, p) for v, p in zip(vals, elems)]
    # X * P_i beyond float32's range is implementation-defined in the spec: float32 overflows to inf
    return Block(e, out, [signed(v, f32(p * x)) for v, p in zip(vals, elems)], *_counts(vals, scaled, elems, vmax))


def nvfp4_tensor_scale(amax: Q) -> Q:
    if amax == 0:
        return Q(1)
    s = f32(Q(448 * 6) / amax)
    return F32_MAX if s == math.inf else s


def nvfp4_block(vals: list[float], s_enc: Q) -> Block:
    """Scale: the e4m3 value s; every product / quotient rounded to float32 as TE does."""
    if not all(math.isfinite(v) for v in vals):
        return Block(None, None, [math.nan] * len(vals), 0, 0)
    m, emin, vmax, _ = ELEM["float8_e4m3fn"]
    amax = max(abs(Q(v)) for v in vals)
    s_dec = f32(1 / s_enc)
    mult = f32(s_enc * f32(Q(1, 6)))
    s = rne(min(f32(amax * mult), Q(448)), m, emin)
    dec = f32(s * s_dec)
    enc = Q(0) if s == 0 else F32_MAX if dec == 0 else min(f32(1 / dec), F32_MAX)  # TE: s == 0 encodes by 0
    scaled = [f32(Q(v) * enc) for v in vals]
    fm, femin, fmax, _ = ELEM["float4_e2m1fn"]
    elems = [rne(min(abs(y), fmax), fm, femin) for y in scaled]
    out = [signed(v, p) for v, p in zip(vals, elems)]
    deq = [signed(v, f32(p * dec)) for v, p in zip(vals, elems)]
    return Block(s, out, deq, *_counts(vals, scaled, elems, fmax))


def fp8_block(vals: list[float], pow2: bool) -> Block:
    """Scale: the float32 decode scale 1 / S."""
    if not all(math.isfinite(v) for v in vals):
        return Block(None, None, [math.nan] * len(vals), 0, 0)
    m, emin, vmax, _ = ELEM["float8_e4m3fn"]
    amax = max(abs(Q(v)) for v in vals)
    enc = Q(1) if amax == 0 else min(f32(vmax / amax), F32_MAX)
    if pow2:
        enc = Q(2) ** floor_log2(enc)
    s = f32(1 / enc)
    scaled = [f32(Q(v) * enc) for v in vals]
    elems = [rne(abs(y), m, emin, vmax) for y in scaled]
    out = [signed(v, p) for v, p in zip(vals, elems)]
    return Block(s, out, [signed(v, f32(p * s)) for v, p in zip(vals, elems)], *_counts(vals, scaled, elems, vmax))


def blocks_1d(x: np.ndarray, axis: int, k: int):
    """(index of the block in the moved scale layout, the block's values) for blocks of k along axis."""
    moved = np.moveaxis(x, axis, -1)
    for idx in np.ndindex(*moved.shape[:-1]):
        row = moved[idx]
        for j in range(0, max(row.size, 1), k) if row.size else ():
            yield (*idx, j // k), [float(v) for v in row[j : j + k]]


def blocks_2d(x: np.ndarray, r: int, c: int):
    """(tile index, values) for r x c tiles over a 2-D array."""
    m, n = x.shape
    for i in range(0, m, r):
        for j in range(0, n, c):
            yield (i // r, j // c), [float(v) for v in x[i : i + r, j : j + c].reshape(-1)]
