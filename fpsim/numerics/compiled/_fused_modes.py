"""The compiled path of ``fpsim.cast`` from float32 in every rounding mode, fused: the magnitude
rounding of ``_modes.py``, ``modes.finish`` (overflow by the mode, saturation, the sign, P3109's
missing -0, unsigned formats' NaN for negative input) and ``round._store`` (the float16 pattern, the
one-byte code, or the float32 value itself) in one loop over the values, with no temporary arrays.

Per value: the magnitude exactly as ``_modes.scaled_modes`` rounds it, r ulps of q.  A format held in
float32 (:func:`_finish`): beyond max it becomes max where the mode or saturation says
(``toward_zero``, a directed mode on the side it rounds away from, for finite input; always when
saturating) and otherwise inf, or NaN (0x7FC00000) in a format without inf; the input's sign is or-ed
on (P3109's -0 pattern becomes +0) or, unsigned, a negative input gives 0x7FC00000.  A format stored
in codes (:func:`_code`): its codes count its magnitudes in order, so the code is the binade's offset
plus r, and the same overflow rule picks max's code or the overflow's (inf, or NaN: both taken by the
caller from the numpy path's own cast), then the sign bit.  Written with selects, no branches, so
that the loops are vectorised.  NaN inputs are only found (a max-reduction): their results' payload
bits are the numpy path's to decide, and the caller redoes those few values.

Few-bit stochastic rounding takes its k-bit integers given (``rand``, in their own dtype: the caller's
``sr_random`` or ``sr.draw_bits``' draws).
"""

from __future__ import annotations

import numpy as np

from ._exact import jit
from ._modes import FEWBIT, MODES, VARIANTS, _fewbit, _grid, _pick
from ._round import _f, _u

__all__ = ["mode_codes", "mode_values", "modes_cast", "FUSED"]

_U32 = np.uint32
_U64 = np.uint64
_F32 = np.float32
_ABS = _U32(0x7FFFFFFF)
_EXP = _U32(0x7F800000)
_SIGN = _U32(0x80000000)
_QNAN = _U32(0x7FC00000)  # np.nan's pattern: finish's NaN for an overflow or a negative unsigned input
_ZERO = _U32(0)
_NO_FIN = (_F32(0), False, False, False, _ZERO, True, False)  # the finish a codes loop does not read, and
_NO_ENC = (_ZERO, _ZERO, _ZERO, _ZERO, _ZERO, False, False, False)  # the codes a values loop does not read


@jit()
def _finish(b, mag, fin):
    """``modes.finish`` of one value: float32 input pattern b, its rounded magnitude ``mag`` (float32,
    unbounded above); ``fin`` = (max, saturate, to max when positive, to max when negative, the
    overflow pattern, signed, no -0).  Returns the result's float32 pattern (b not a NaN).  Written
    with selects, no branches, so that the loop is vectorised."""
    fmax, sat, max_pos, max_neg, ovf, signed, no_nz = fin
    neg = (b & _SIGN) != _ZERO
    a = _U32(b & _ABS)
    clamp = sat | ((a < _EXP) & (max_neg if neg else max_pos))
    m = (_u(fmax) if clamp else ovf) if mag > fmax else _u(mag)
    r = _U32(m | _U32(b & _SIGN))
    r = _ZERO if (no_nz & (r == _SIGN)) else r
    return r if signed else (m if ((not neg) | (a == _ZERO)) else _QNAN)


@jit()
def _code(b, r, q, enc):
    """The code of float32 pattern b's rounding: ``r`` ulps (a float32 integer) of ``q`` (the ulp's
    pattern).  The format's codes count its magnitudes in order, so the magnitude's code is the
    binade's offset plus r: ((q - the smallest ulp's pattern) >> (23 - mantissa bits)) + r (a carry
    into the next binade lands on its code).  ``enc`` = (the smallest ulp's pattern, 23 - mantissa
    bits, max's code, the overflow's code (inf, or NaN), the sign bit, saturate, to max when positive,
    to max when negative): beyond max's code the mode's overflow rule picks max's code or the
    overflow's, as :func:`_finish` does; then the sign bit."""
    q0, sh, c_max, c_ovf, sign_bit, sat, max_pos, max_neg = enc
    neg = (b & _SIGN) != _ZERO
    code = _U32(_U32(_U32(q - q0) >> sh) + _U32(np.int32(r)))
    clamp = sat | ((_U32(b & _ABS) < _EXP) & (max_neg if neg else max_pos))
    code = (c_max if clamp else c_ovf) if code > c_max else code
    return _U32(code | (sign_bit if neg else _ZERO))


@jit()
def _rounded(b, grid, mode, u, rnd, two_k, variant):
    """(r, q) for float32 pattern b: |x| rounded to ``r`` ulps (a float32 integer) of ``q`` (the ulp's
    pattern) in ``mode`` (``_modes.MODES``; 6: exact SR with float64 draw ``u``; ``FEWBIT``: the
    k-bit integer ``rnd``, ``two_k`` = 2**k as float32), as ``_modes.scaled_modes`` rounds it."""
    v, q = _grid(_f(b), grid[0], grid[1], grid[2])
    if mode < 6:
        return _pick(v, (b & _SIGN) != _ZERO, mode), q
    r = _F32(np.floor(v))
    up = (u < np.float64(_F32(v - r))) if mode == 6 else _fewbit(v, r, two_k, rnd, variant)
    return (_F32(r + _F32(1.0)) if up else r), q


@jit(inline=True)
def _loop(src, dst, grid, fin, enc, codes, u, two_k, mode):
    """The values of ``src`` (float32 patterns) rounded into ``dst`` in a deterministic mode or exact SR:
    codes, or float32 patterns; returns (the largest |x| pattern - above 0x7F800000 a NaN is there -,
    0, 0) as :func:`_fewbit_loop` returns."""
    top = _ZERO
    for i in range(src.shape[0]):
        b = src[i]
        top = max(top, _U32(b & _ABS))
        r, q = _rounded(b, grid, mode, u[i] if mode == 6 else 0.0, _ZERO, two_k, 0)
        if codes:
            dst[i] = _code(b, r, q, enc)
        else:
            dst[i] = _finish(b, _F32(r * _f(q)), fin)
    return top, _U64(0), np.int64(0)


@jit(inline=True)
def _fewbit_loop(src, dst, grid, fin, enc, codes, rand, two_k, variant):
    """:func:`_loop` with the k-bit integers ``rand`` (in their own dtype: no widening); returns (the
    largest |x| pattern, the largest integer as uint64 - a negative one wraps large -, the smallest as
    int64) for the caller's range check."""
    top = _ZERO
    most = least = rand[0]
    for i in range(src.shape[0]):
        b = src[i]
        top = max(top, _U32(b & _ABS))
        most = max(most, rand[i])
        least = min(least, rand[i])
        r, q = _rounded(b, grid, FEWBIT, 0.0, rand[i], two_k, variant)
        if codes:
            dst[i] = _code(b, r, q, enc)
        else:
            dst[i] = _finish(b, _F32(r * _f(q)), fin)
    return top, _U64(most), np.int64(least)


@jit(inline=True)
def _deterministic(src, dst, grid, fin, enc, codes, mode, u):
    """One inlined loop for each deterministic mode and exact SR (a constant there: no test per value)."""
    two_k = _F32(1.0)
    if mode == 0:
        return _loop(src, dst, grid, fin, enc, codes, u, two_k, 0)
    if mode == 1:
        return _loop(src, dst, grid, fin, enc, codes, u, two_k, 1)
    if mode == 2:
        return _loop(src, dst, grid, fin, enc, codes, u, two_k, 2)
    if mode == 3:
        return _loop(src, dst, grid, fin, enc, codes, u, two_k, 3)
    if mode == 4:
        return _loop(src, dst, grid, fin, enc, codes, u, two_k, 4)
    if mode == 5:
        return _loop(src, dst, grid, fin, enc, codes, u, two_k, 5)
    return _loop(src, dst, grid, fin, enc, codes, u, two_k, 6)


@jit(inline=True)
def _fewbits(src, dst, grid, fin, enc, codes, rand, k, variant):
    """One inlined few-bit SR loop for each variant (a constant there), ``rand`` not empty."""
    two_k = _F32(2.0**k)
    if variant == 0:
        return _fewbit_loop(src, dst, grid, fin, enc, codes, rand, two_k, 0)
    if variant == 1:
        return _fewbit_loop(src, dst, grid, fin, enc, codes, rand, two_k, 1)
    if variant == 2:
        return _fewbit_loop(src, dst, grid, fin, enc, codes, rand, two_k, 2)
    return _fewbit_loop(src, dst, grid, fin, enc, codes, rand, two_k, 3)


# Four compiled entries, not one: each is compiled for the dtypes it is first called with, and the
# deterministic modes' seven loops are not compiled again for every dtype of few-bit SR's integers
# (nor those four loops for every destination where no SR runs) - a fresh cache compiles a fraction.
@jit()
def _det_codes(src, dst, grid, enc, mode, u):
    return _deterministic(src, dst, grid, _NO_FIN, enc, True, mode, u)


@jit()
def _det_values(src, dst, grid, fin, mode, u):
    return _deterministic(src, dst, grid, fin, _NO_ENC, False, mode, u)


@jit()
def _fewbit_codes(src, dst, grid, enc, rand, k, variant):
    return _fewbits(src, dst, grid, _NO_FIN, enc, True, rand, k, variant)


@jit()
def _fewbit_values(src, dst, grid, fin, rand, k, variant):
    return _fewbits(src, dst, grid, fin, _NO_ENC, False, rand, k, variant)


def mode_codes(src, dst, grid, enc, mode, u, rand, k, variant):
    """float32 patterns ``src`` rounded in ``mode`` (``_modes.MODES``; ``FEWBIT``: with the given k-bit
    integers ``rand``, ``variant`` as ``_modes.VARIANTS``; 6: exact SR, float64 uniforms ``u``, one a
    value) and finished into ``dst`` as the format's codes (uint8 / uint16; ``enc`` as :func:`_code`
    reads it).  ``grid`` = (2**(emax + 2), the exponent field of 2**emin, mantissa_bits << 23).
    Returns (the largest |x| pattern: above 0x7F800000 the input holds NaN, whose results are left to
    the caller; the largest of ``rand`` as uint64 and its smallest as int64, for the caller's range
    check; 0 and 0 in the other modes)."""
    if mode == FEWBIT and rand.shape[0]:
        return _fewbit_codes(src, dst, grid, enc, rand, k, variant)
    return _det_codes(src, dst, grid, enc, min(mode, 6), u)


def mode_values(src, dst, grid, fin, mode, u, rand, k, variant):
    """:func:`mode_codes` for a format held in float32: ``dst`` gets the results' float32 patterns
    (``fin`` as :func:`_finish` reads it)."""
    if mode == FEWBIT and rand.shape[0]:
        return _fewbit_values(src, dst, grid, fin, rand, k, variant)
    return _det_values(src, dst, grid, fin, min(mode, 6), u)


_NO_DRAWS = np.empty(0, np.float64)
_NO_BITS = np.empty(0, np.int64)
_CHUNK = 2**16  # exact SR: the uniforms drawn a chunk at a time (the same stream as one draw for all)
_VIEW = {1: np.uint8, 2: np.uint16, 4: np.uint32}


def modes_cast(x32: np.ndarray, dtype, params, mode: str, sr, rng) -> tuple:
    """(float32 ``x32`` rounded in ``mode`` and finished into storage ``dtype``, whether x32 holds NaN,
    the largest given k-bit integer - 2**64 where one is negative -, or 0): ``params`` = (codes, grid,
    enc or fin), as ``modekernels.fused_params`` makes them; ``sr``: None, or (k, the k-bit integers
    broadcast to x's shape, variant); exact SR
    draws ``rng.random`` here, one float64 a value in order, as the numpy path does.  The results of
    NaN inputs are not written: the caller redoes them (by the numpy path) where the second value is
    True."""
    x = np.ascontiguousarray(x32).reshape(-1).view(np.uint32)
    codes, grid, tail = params
    out = np.empty(x.size, dtype)
    dst = out.view(_VIEW[out.dtype.itemsize])
    kernel = mode_codes if codes else mode_values
    if mode == "stochastic" and sr is not None:
        rand = np.ascontiguousarray(np.asarray(sr[1]).reshape(-1))  # its own integer dtype: no widening pass
        top, most, least = kernel(x, dst, grid, tail, FEWBIT, _NO_DRAWS, rand, int(sr[0]), VARIANTS[sr[2]])
    elif mode == "stochastic":
        top = most = least = 0
        for i in range(0, x.size, _CHUNK):
            j = min(i + _CHUNK, x.size)
            top = max(top, kernel(x[i:j], dst[i:j], grid, tail, MODES[mode], rng.random(j - i), _NO_BITS, 0, 0)[0])
    else:
        top, most, least = kernel(x, dst, grid, tail, MODES[mode], _NO_DRAWS, _NO_BITS, 0, 0)
    return out.reshape(np.shape(x32)), int(top) > 0x7F800000, int(most) if least >= 0 else 2**64

FUSED = {"modes_cast": modes_cast}
