"""The compiled roundings as the functions of ``fpsim/formats/kernels.py`` and ``fp8kernels.py`` that
they replace: flatten the input, allocate the result, run the loop of ``_round.py``, and hand the
few NaNs whose bits a library cast decides back to that cast - so each returns what the numpy path
returns, bit for bit, in the same dtype and shape (C-ordered).

The tables (``widening_table``'s, the fp8 narrowing tables) and fp8 constants are the numpy path's,
passed in by the caller: this layer knows nothing of the format table.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from . import _modes, _round

__all__ = ["ROUNDINGS"]

_ONE = np.float32(1)
_NO_DRAWS = np.empty(0, np.float64)
_NO_BITS = np.empty(0, np.int64)


def _flat(x: np.ndarray, dtype) -> np.ndarray:
    """x's values, C-contiguous and one-dimensional, viewed as ``dtype`` (a copy only where x is
    not contiguous)."""
    return np.ascontiguousarray(x).reshape(-1).view(dtype)


def f32_to_f16(x: np.ndarray) -> np.ndarray:
    """float32 -> float16, to nearest even (``kernels.f32_to_f16``); NaNs by numpy's cast, which
    keeps their payload bits, as the numpy path does."""
    out = np.empty(x.shape, np.float16)
    if _round.f16_bits(_flat(x, np.uint32), out.reshape(-1).view(np.uint16)):
        nan = np.isnan(x)
        out[nan] = x[nan].astype(np.float16)
    return out


def snap_f16(x: np.ndarray) -> np.ndarray:
    """float32 -> float32 on float16's grid (``kernels.snap_f16``)."""
    out = np.empty(x.shape, np.float32)
    _round.snap16(_flat(x, np.uint32), out.reshape(-1).view(np.uint32))
    return out


def f16_to_f32(x: np.ndarray, table: np.ndarray) -> np.ndarray:
    """float16 -> float32, exact (``kernels.f16_to_f32``; ``table``: float16's widening table)."""
    out = np.empty(x.shape, np.float32)
    _round.widen16(_flat(x, np.int16), out.reshape(-1), _ONE, table, False)
    return out


def f16_to_f32_scaled(x: np.ndarray, scale: np.float32, table: np.ndarray) -> tuple[np.ndarray, bool]:
    """(float32(x) * scale rounded once, whether x holds an inf or NaN) (``kernels.f16_to_f32_scaled``)."""
    out = np.empty(x.shape, np.float32)
    special = _round.widen16(_flat(x, np.int16), out.reshape(-1), np.float32(scale), table, True)
    return out, bool(special)


def fp8_to_f32(codes: np.ndarray, table: np.ndarray) -> np.ndarray:
    """A one-byte format's codes -> float32 by its 256-entry widening table (``kernels.fp8_to_f32``)."""
    out = np.empty(codes.shape, np.float32)
    _round.table_widen(_flat(codes, np.uint8), table, out.reshape(-1))
    return out


def narrow(x: np.ndarray, table: np.ndarray) -> np.ndarray:
    """float32 -> one-byte codes (uint8) by the narrowing ``table`` indexed by x rounded to odd
    onto bfloat16 (``kernels.narrow_cast``; the caller views the bytes as the format's dtype)."""
    out = np.empty(x.shape, np.uint8)
    _round.narrow(_flat(x, np.uint32), table, out.reshape(-1))
    return out


def bf16_odd(x: np.ndarray) -> np.ndarray:
    """``kernels.bf16_odd_patterns``: x rounded to odd onto bfloat16, as uint32 bfloat16 patterns."""
    out = np.empty(x.shape, np.uint32)
    _round.bf16_odd(_flat(x, np.uint32), out.reshape(-1))
    return out


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16, to nearest even (``kernels.f32_to_bf16``); NaNs by ml_dtypes' cast."""
    out = np.empty(x.shape, ml_dtypes.bfloat16)
    if _round.bf16_bits(_flat(x, np.uint32), out.reshape(-1).view(np.uint16)):
        nan = np.isnan(x)
        out[nan] = x[nan].astype(ml_dtypes.bfloat16)
    return out


def scaled_fp8(x32: np.ndarray, s: np.float32, dtype, constants, saturate: bool, codes: bool):
    """``fp8kernels.scaled_fp8`` (its arguments; ``constants``: its ``_constants(f)``, ``dtype``: the
    format's storage dtype): (bytes or None, values, flushes)."""
    lo, up, maxpat, sh, offset, half = constants
    x = _flat(x32, np.float32)
    vals = np.empty(x.shape, np.float32)
    out8 = np.empty(x.shape if codes else 0, np.uint8)
    flushed = _round.fp8_scaled(x, np.float32(s), lo, up, maxpat, sh, np.uint32(offset), half, bool(saturate),
                                bool(s >= 1), vals.view(np.uint32), out8, bool(codes))
    shape = np.shape(x32)
    return (out8.reshape(shape).view(dtype) if codes else None), vals.reshape(shape), int(flushed)


def magnitudes(x32: np.ndarray, f, mode: str, sr, rng) -> np.ndarray:
    """``modekernels.round_magnitudes_f32`` (its arguments; ``f``: the Format, read for its name,
    emin, emax and mantissa bits): |x| rounded onto f's grid in ``mode``, float32.  Exact
    stochastic rounding draws ``rng.random(x32.size)`` here, as the numpy path does."""
    x = _flat(x32, np.float32)
    code = _modes.MODES[mode] if mode != "stochastic" or sr is None else _modes.FEWBIT
    u = rng.random(x.size) if code == _modes.MODES["stochastic"] else _NO_DRAWS
    k, rand, variant = 0, _NO_BITS, 0
    if code == _modes.FEWBIT:
        # the bits in their own integer dtype (uint8 for k <= 8 ...): no widening pass; one compilation each
        k, rand, variant = int(sr[0]), np.ascontiguousarray(np.asarray(sr[1]).reshape(-1)), _modes.VARIANTS[sr[2]]
    out = np.empty(x.size, np.float32)
    if f.name == "bfloat16":
        _modes.bf16_modes(x.view(np.uint32), out.view(np.uint32), code, u, rand, k, variant)
    else:
        _modes.scaled_modes(x, out, np.float32(2.0 ** (f.emax + 2)), np.uint32((f.emin + 127) << 23),
                            np.uint32(f.mantissa_bits << 23), code, u, rand, k, variant)
    return out.reshape(np.shape(x32))


# name -> function, the names :func:`fpsim.numerics.compiled.rounding` is asked for
ROUNDINGS = {f.__name__: f for f in (f32_to_f16, snap_f16, f16_to_f32, f16_to_f32_scaled, fp8_to_f32, narrow, bf16_odd,
                                     f32_to_bf16, scaled_fp8, magnitudes)}
