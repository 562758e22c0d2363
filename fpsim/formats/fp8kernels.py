"""The scaled, saturating float32 -> fp8 cast of per-tensor scaling, in one chunked pass.

:func:`scaled_fp8` gives, for float32 ``x`` and a float32 scale ``s``, the fp8 numbers of
``x * s`` (the product rounded in float32 first, then rounded to nearest even into
float8_e4m3fn / float8_e5m2 with saturation) widened exactly to float32, optionally as stored
bytes too, and how many non-zero values became 0 - what ``kernels.f32_to_fp8(x * s, fmt,
saturate=True)``, ``kernels.fp8_to_f32`` and counts of zeros give, bit for bit, for NaN-free
``x``.  Instead of about eleven whole-array passes (two of them index look-ups that numpy first
widens to 64-bit indices), it makes twelve cheap ones (seventeen with the bytes) over chunks of
2**16 values in three preallocated scratch buffers that stay in L2.
"""

from __future__ import annotations

import threading

import numpy as np

from ..numerics import compiled
from .kernels import _clip  # the clip ufunc itself: 1.3x a bitwise and, np.maximum 3.3x
from .table import Format

__all__ = ["scaled_fp8"]

_U32 = np.uint32
_ABS = _U32(0x7FFFFFFF)
_SIGN = _U32(0x80000000)
_EXP = _U32(0x7F800000)
_CHUNK = 2**16  # three uint32 scratch buffers of this size (768 KB) and the chunk of x stay in L2
_LOCAL = threading.local()  # per thread: every call writes the scratch buffers


def _scratch():
    bufs = getattr(_LOCAL, "bufs", None)
    if bufs is None:
        bufs = _LOCAL.bufs = tuple(np.empty(_CHUNK, _U32) for _ in range(3))
    return bufs


_CONSTANTS: dict = {}  # format name -> _constants(f)


def _constants(f: Format):
    """(exponent field of 2**emin, 2**(23 - man) as an exponent-field addend, float32 pattern
    of max, the shift from float32's exponent field to the fp8 byte's, the byte's offset, float32
    pattern of half the smallest subnormal: the largest magnitude that rounds to 0)."""
    c = _CONSTANTS.get(f.name)
    if c is None:
        sh = 23 - f.mantissa_bits
        lo = _U32((127 + f.emin) << 23)
        offset = ((127 + f.emin + sh) << f.mantissa_bits) % 256
        half = np.float32(f.smallest_subnormal / 2).view(_U32)
        c = _CONSTANTS[f.name] = (lo, _U32(sh << 23), np.float32(f.max).view(_U32), _U32(sh), np.uint8(offset), half)
    return c


def scaled_fp8(x32: np.ndarray, scale, f: Format, saturate: bool = True,
               codes: bool = True) -> tuple[np.ndarray | None, np.ndarray, int]:
    """(fp8 bytes of ``x32 * scale`` in ``f``'s storage dtype, their exact float32 values, how
    many non-zero ``x32`` became +-0: the flushes) for NaN-free float32 ``x32`` (the caller checks: a NaN is clamped
    here, not kept), a float32 ``scale`` and an fp8 Format.  ``saturate=False`` skips the
    clamp: for a caller that knows every |x * scale| is at most max (the same bits then).
    ``codes=False`` skips the bytes (None in their place; five of the passes): for a caller
    that needs only the values.

    Per value: y = x * scale rounded in float32 (as ``x32 * scale`` is); its magnitude clamped
    to max on the bit patterns (+-inf and every overflow saturate; max is on the grid, so the
    rounding below keeps it, and values between max and the overflow threshold round to it as
    before); then the float adder rounds: with e = max(exponent of |y|, emin), b = 2**(e + 23 -
    man) has float32 ulp 2**(e - man), fp8's ulp in that binade (the subnormal spacing below
    2**emin), so s = b + |y| rounds |y| onto fp8's grid with ties to even and s - b is exact.
    s's mantissa field then holds k = the rounded |y| in those ulps (2**man + the fp8 mantissa
    for a normal, the mantissa alone for a subnormal, 2**(man + 1) on a carry into the next
    binade), so the byte is k + (e - emin) << man = s's low byte + (b >> (23 - man)) - a
    constant, mod 256, and the sign bit (+128) - the -0 of a negative value that rounds to 0
    included.  A value is flushed when 0 < |y| <= half the smallest subnormal (the tie goes to
    the even 0), counted on the patterns as |y| - 1 < that (a zero wraps to the top); with a
    scale below 1 a non-zero x can also give y = 0, so then the zeros of y are counted and
    those of x taken off.
    """
    if (fast := compiled.rounding("scaled_fp8", x32, np.float32)) is not None:
        return fast(x32, scale, f.dtype, _constants(f), saturate, codes)
    x = np.ascontiguousarray(x32).reshape(-1)
    codes32 = np.empty(x.shape, np.float32)
    out8 = np.empty(x.shape, np.uint8) if codes else None
    c = _constants(f)
    s = np.float32(scale)
    exact_zeros = bool(s >= 1)  # then y = 0 only where x = 0
    flushed = 0
    with np.errstate(over="ignore"):  # x * scale overflowing to inf is a result: it saturates
        for i in range(0, x.size, _CHUNK):
            j = min(i + _CHUNK, x.size)
            flushed += _chunk(x[i:j], s, codes32[i:j], out8[i:j] if codes else None, c, saturate, exact_zeros)
    if not exact_zeros:
        flushed -= int(np.count_nonzero(x == 0))
    shape = np.shape(x32)
    if not codes:
        return None, codes32.reshape(shape), flushed
    out8 -= c[4]  # the byte's offset, mod 256
    return out8.reshape(shape).view(f.dtype), codes32.reshape(shape), flushed


def _chunk(xs, s, out32, out8, c, saturate: bool, exact_zeros: bool) -> int:
    """scaled_fp8 on one chunk: writes the values into ``out32`` and (unless None) the bytes,
    less their offset, into ``out8``; returns the flushes (with ``exact_zeros`` False: the
    zeros of y)."""
    lo, up, maxpat, sh, _, half = c
    k = xs.size
    a, b, sgn = _scratch()
    ac, bc, sc = a[:k], b[:k], sgn[:k]
    af, bf = ac.view(np.float32), bc.view(np.float32)
    np.multiply(xs, s, out=af)  # y, rounded in float32
    np.bitwise_and(ac, _SIGN, out=sc)
    np.bitwise_and(ac, _ABS, out=ac)
    if saturate:  # integer order is value order for magnitudes
        _clip(ac, _U32(0), maxpat, out=ac)
    if exact_zeros:
        np.subtract(ac, _U32(1), out=bc)
        flushed = int(np.count_nonzero(bc < half))
    else:
        flushed = int(np.count_nonzero(ac <= half))
    np.bitwise_and(ac, _EXP, out=bc)
    _clip(bc, lo, _EXP, out=bc)
    bc += up  # b = 2**(e + 23 - man)
    af += bf  # THE rounding: onto fp8's grid, ties to even
    np.subtract(af, bf, out=out32)  # exact
    u = out32.view(_U32)
    np.bitwise_or(u, sc, out=u)  # the sign
    if out8 is not None:
        np.right_shift(bc, sh, out=bc)
        ac += bc
        np.right_shift(sc, _U32(24), out=sc)
        ac += sc
        np.copyto(out8, ac, casting="unsafe")  # the low byte, as astype keeps it
    return flushed
