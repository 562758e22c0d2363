"""bfloat16 <-> float32 on the bit patterns: the engine's hottest bfloat16 conversions, exactly
ml_dtypes' casts, in a few integer passes.

bfloat16 is the top half of a float32: widening is a 16-bit shift, and rounding to nearest even
is an integer add on the float32 pattern - adding 0x7FFF plus the last bit that is kept (bit 16)
carries into bit 16 exactly when the dropped half is above 0x8000, or equal to it with that bit
odd - followed by cutting the low 16 bits.  A carry out of the mantissa steps into the next
binade, and from the largest finite binade to inf, as rounding does.  Only NaN needs care (the add
may carry a NaN's payload into the sign or into an inf pattern): ml_dtypes gives the quiet NaN
0x7FC0 with the input's sign, and so do these, for the few NaN values found.

The float32 passes run over chunks of 2**16 values in a preallocated scratch buffer (fresh large
temporaries cost page faults, see ``kernels.f32_to_f16``).  The tests hold every kernel against
ml_dtypes on every bfloat16 pattern and on every float32 high half with the low halves at and
around the rounding boundaries.
"""

from __future__ import annotations

import threading

import ml_dtypes
import numpy as np

__all__ = ["f32_to_bf16", "bf16_to_f32", "snap_bf16"]

_U32 = np.uint32
_CHUNK = 2**16
_HALF = _U32(0x7FFF)
_HIGH = _U32(0xFFFF0000)
_SCRATCH = threading.local()


def _scratch() -> np.ndarray:
    buf = getattr(_SCRATCH, "buf", None)
    if buf is None:
        buf = _SCRATCH.buf = np.empty(_CHUNK, _U32)
    return buf


def _rounded_bits(xs: np.ndarray, t: np.ndarray) -> bool:
    """t = xs's float32 pattern + 0x7FFF + bit 16 (the rounding add, modulo 2**32); whether xs
    holds a NaN (the max of the chunk propagates one)."""
    b = xs.view(_U32)
    np.right_shift(b, _U32(16), out=t)
    t &= _U32(1)
    t += _HALF
    t += b
    return bool(np.isnan(np.maximum.reduce(xs))) if xs.size else False


def _quiet_nan(x32: np.ndarray) -> np.ndarray:
    """ml_dtypes' bfloat16 NaN for each NaN of x32: 0x7FC0 with its sign (as uint16 patterns)."""
    nan = np.isnan(x32)
    return nan, ((x32.view(_U32)[nan] >> _U32(16)) & _U32(0x8000) | _U32(0x7FC0)).astype(np.uint16)


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 (numpy array in ml_dtypes' storage), rounded once to nearest even:
    bit for bit ml_dtypes' ``astype`` (subnormals, overflow to inf, -0, NaN as the quiet NaN)."""
    if x.ndim == 0:
        return f32_to_bf16(x.reshape(1)).reshape(())
    flat = x.reshape(-1)
    out = np.empty(x.shape, np.uint16)
    dst = out.reshape(-1)
    buf = _scratch()
    has_nan = False
    for i in range(0, flat.size, _CHUNK):
        xs = flat[i : i + _CHUNK]
        t = buf[: xs.size]
        has_nan |= _rounded_bits(xs, t)
        t >>= _U32(16)
        np.copyto(dst[i : i + xs.size], t, casting="unsafe")  # keeps the low 16 bits
    if has_nan:
        nan, q = _quiet_nan(x)
        out[nan] = q
    return out.view(ml_dtypes.bfloat16)


def snap_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> float32 on bfloat16's grid: the value ml_dtypes' float32 -> bfloat16 cast gives,
    kept in a float32 array (the ``numpy-f32`` backend's rounding; no 16-bit array on the way)."""
    if x.ndim == 0:
        return snap_bf16(x.reshape(1)).reshape(())
    flat = x.reshape(-1)
    out = np.empty(x.shape, np.float32)
    dst = out.reshape(-1).view(_U32)
    buf = _scratch()
    has_nan = False
    for i in range(0, flat.size, _CHUNK):
        xs = flat[i : i + _CHUNK]
        t = buf[: xs.size]
        has_nan |= _rounded_bits(xs, t)
        np.bitwise_and(t, _HIGH, out=dst[i : i + xs.size])
    if has_nan:
        nan, q = _quiet_nan(x)
        out.view(_U32)[nan] = q.astype(_U32) << _U32(16)
    return out


def bf16_to_f32(x: np.ndarray) -> np.ndarray:
    """bfloat16 -> float32, exact: each pattern shifted into the top half (NaN payloads kept, as
    ml_dtypes' ``astype`` keeps them)."""
    out = x.view(np.uint16).astype(_U32)  # the widening copy, then the shift in place
    out <<= _U32(16)
    return out.view(np.float32)
