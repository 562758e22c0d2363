"""The compiled path of :func:`fpsim.quantize` (``fpsim/formats/block.py``): the block maxima in one
pass, and in a second the elements - each times its block's float32 encode factor, rounded into the
element format (to nearest even, or stochastically with the numpy path's uniforms), stored as its
code byte - with each block's counts of underflowed and saturated elements; the scales between the
two passes stay the scale rule's (numpy once per block, NVFP4's compiled in ``_blocks.py``).

The input is read where it lies, with no padded or transposed copy: blocks along the last axis as
rows (R, n) of blocks of k, the last block of a row partial when k does not divide n
(:func:`_rows`); blocks along an earlier axis as tiles (k, 1) of (L, n, B), and 2-D tiles (r, c) of
(L, M, N), partial at the edges (:func:`_grid`); the scales come out in the user's layout.  The
element step is ``_blocks._magnitude_code`` (``_blocks._nearest``'s value, as a code) / ``_blocks._stochastic`` (the
numpy path's ``narrow_cast`` / ``cast`` value for every float32 but NaN); a block whose amax is inf or NaN is all the element's NaN code (0 where it has no NaN) with
no counts, as the numpy path's ``_Encoder`` sets it.
"""

from __future__ import annotations

import numpy as np

from ._blocks import _magnitude_code, _stochastic
from ._exact import jit

__all__ = ["QUANTIZE"]

_F32 = np.float32
_U32 = np.uint32
_INF = _U32(0x7F800000)


@jit(inline=True)
def _nearest_code(v, f, el):
    """(code, underflowed, saturated) of one element v times its block's encode factor f: s = v * f in
    float32, rounded to nearest even (:func:`_magnitude_code` of min(|s|, 2**(emax + 1))) and coded
    with s's sign; underflowed: v != 0 whose code's magnitude is 0; saturated: |s| beyond max
    (ml_dtypes' formats are symmetric).  ``el``: the element format as :func:`quantize_elements` takes it."""
    qmin, man_field, top, fmax, mscale, cmax, sgn, smaxb = el
    s = _F32(v * f)
    sb = _F32(s).view(np.uint32)
    ab = _U32(sb & _U32(0x7FFFFFFF))
    tb = _F32(top).view(np.uint32)
    c = _magnitude_code(_U32(ab if ab < tb else tb).view(np.float32), qmin, man_field, mscale, cmax)
    under = (c == 0) & (_U32(_F32(v).view(np.uint32) & _U32(0x7FFFFFFF)) != 0)
    return np.uint8(c | _U32(_U32(sb >> _U32(31)) * sgn)), np.int64(under), np.int64(ab > smaxb)


@jit(inline=True)
def _stochastic_code(v, f, u, el):
    """:func:`_nearest_code` rounding s stochastically (``_blocks._stochastic``: up where the uniform u
    lies below the fraction, saturating), the result's magnitude coded exactly."""
    qmin, man_field, top, fmax, mscale, cmax, sgn, smaxb = el
    s = _F32(v * f)
    sb = _F32(s).view(np.uint32)
    rb = _U32(_F32(_stochastic(s, u, qmin, man_field, fmax)).view(np.uint32) & _U32(0x7FFFFFFF))
    c = _magnitude_code(rb.view(np.float32), qmin, man_field, mscale, cmax)
    under = (c == 0) & (_U32(_F32(v).view(np.uint32) & _U32(0x7FFFFFFF)) != 0)
    return np.uint8(c | _U32(_U32(sb >> _U32(31)) * sgn)), np.int64(under), np.int64(_U32(sb & _U32(0x7FFFFFFF)) > smaxb)


@jit(inline=True)
def _one(v, f, u, el, sr):
    """:func:`_stochastic_code` with ``sr``, else :func:`_nearest_code`."""
    return _stochastic_code(v, f, u, el) if sr else _nearest_code(v, f, el)


@jit()
def _rows_amax(x, k, out):
    """Into float32 ``out`` (R, nb): the largest magnitude of each block of k of each row of x (R, n)
    uint32 patterns (the last block partial), taken on the patterns with the sign cut (NaN above
    inf above every finite value, as the numpy path orders them)."""
    rows, n = x.shape
    ob = out.view(np.uint32)
    for i in range(rows):
        for b in range(out.shape[1]):
            xs = x[i, b * k : min(b * k + k, n)]  # a view: its loop index starts at 0 (no wraparound test)
            hi = _U32(0)
            for j in range(xs.shape[0]):
                hi = max(hi, _U32(xs[j] & _U32(0x7FFFFFFF)))
            ob[i, b] = hi


@jit()
def _grid_amax(x, r, c, out):
    """Into float32 ``out`` (L, Mb, Nb): :func:`_rows_amax`'s maximum of each (r, c) tile of x (L, M, N)
    uint32 patterns (the tiles at the edges partial): per row of tiles, each column's maximum over
    the tile's rows (along contiguous memory), then over each tile's columns."""
    lead, m, n = x.shape
    ob = out.view(np.uint32)
    col = np.empty(n, np.uint32)
    for g in range(lead):
        for bi in range(out.shape[1]):
            col[:] = 0
            for i in range(bi * r, min(bi * r + r, m)):
                for j in range(n):
                    col[j] = max(col[j], _U32(x[g, i, j] & _U32(0x7FFFFFFF)))
            for bj in range(out.shape[2]):
                hi = _U32(0)
                for j in range(bj * c, min(bj * c + c, n)):
                    hi = max(hi, col[j])
                ob[g, bi, bj] = hi


@jit()
def _rows_nearest(x, n, amax, factor, k, el, nan_code, codes, under, sat):
    """The element pass to nearest over rows of n of x (flat float32: 1-D, so that its slices are
    contiguous to numba) in whole blocks of k (a multiple of 8, at most 248) along each row: codes
    (flat uint8, x's size), under / sat (R, nb) int64, from the blocks' amax and encode factors
    (R, nb).  Each element's counts go to a flag byte (bit 0 underflowed, bit 4 saturated; an
    integer sum in the element loop keeps it from vectorising), a block's flags summed eight bytes a
    word a nibble at a time (each at most k / 8 <= 31), then a word's bytes by one multiply (at most
    k <= 248: no carries); the blocks holding inf or NaN are set last (:func:`_nan_rows`: a branch on
    them here would keep the loop from vectorising too)."""
    fl = np.zeros(k, np.uint8)
    words = fl.view(np.uint64)
    nib = np.uint64(0x0F0F0F0F0F0F0F0F)
    ones = np.uint64(0x0101010101010101)
    for i in range(amax.shape[0]):
        for b in range(amax.shape[1]):
            j0 = i * n + b * k
            f = factor[i, b]
            xs, cs = x[j0 : j0 + k], codes[j0 : j0 + k]
            for j in range(xs.shape[0]):
                c, u, s = _nearest_code(xs[j], f, el)
                cs[j] = c
                fl[j] = np.uint8(u | (s << 4))
            au = np.uint64(0)
            asat = np.uint64(0)
            for t in range(k // 8):
                au += words[t] & nib
                asat += (words[t] >> np.uint64(4)) & nib
            under[i, b] = np.int64((au * ones) >> np.uint64(56))
            sat[i, b] = np.int64((asat * ones) >> np.uint64(56))
    _nan_rows(n, amax, k, nan_code, codes, under, sat)


@jit()
def _rows(x, n, amax, factor, k, el, nan_code, codes, under, sat):
    """:func:`_rows_nearest` for any k and a partial last block, the counts summed in the element loop."""
    for i in range(amax.shape[0]):
        for b in range(amax.shape[1]):
            j0, j1 = i * n + b * k, i * n + min(b * k + k, n)
            f = factor[i, b]
            xs, cs = x[j0:j1], codes[j0:j1]
            nu = np.int64(0)
            ns = np.int64(0)
            for j in range(xs.shape[0]):
                cj, uj, sj = _nearest_code(xs[j], f, el)
                cs[j] = cj
                nu += uj
                ns += sj
            under[i, b] = nu
            sat[i, b] = ns
    _nan_rows(n, amax, k, nan_code, codes, under, sat)


@jit()
def _rows_stochastic(x, n, amax, factor, u, un, k, el, nan_code, codes, under, sat):
    """:func:`_rows` rounding stochastically: ``u`` (flat float64, rows of ``un``) the uniforms,
    element (i, j)'s at u[i un + j]."""
    for i in range(amax.shape[0]):
        for b in range(amax.shape[1]):
            j0, j1 = i * n + b * k, i * n + min(b * k + k, n)
            f = factor[i, b]
            xs, cs = x[j0:j1], codes[j0:j1]
            us = u[i * un + b * k : i * un + b * k + xs.shape[0]]
            nu = np.int64(0)
            ns = np.int64(0)
            for j in range(xs.shape[0]):
                cj, uj, sj = _stochastic_code(xs[j], f, us[j], el)
                cs[j] = cj
                nu += uj
                ns += sj
            under[i, b] = nu
            sat[i, b] = ns
    _nan_rows(n, amax, k, nan_code, codes, under, sat)


@jit()
def _nan_rows(n, amax, k, nan_code, codes, under, sat):
    """Each block of :func:`_rows_nearest`'s layout whose amax is inf or NaN: all its codes ``nan_code``,
    its counts 0."""
    for i in range(amax.shape[0]):
        for b in range(amax.shape[1]):
            if _U32(_F32(amax[i, b]).view(np.uint32)) >= _INF:
                codes[i * n + b * k : i * n + min(b * k + k, n)] = nan_code
                under[i, b] = 0
                sat[i, b] = 0


@jit()
def _grid(x, amax, factor, u, r, c, el, sr, nan_code, codes, under, sat):
    """The element pass over the (r, c) tiles of x (L, M, N) float32 (blocks of k along an earlier
    axis: tiles (k, 1)): codes (L, M, N) uint8, under / sat (L, Mb, Nb) int64; ``u`` (float64, x's
    shape) the uniforms where ``sr``.  Per row of tiles, each column's factor and NaN flag are laid
    out first and its counts summed over the tile's rows, so the element loop runs along memory."""
    lead, m, n = x.shape
    fe = np.empty(n, np.float32)
    bad = np.empty(n, np.bool_)
    cu = np.empty(n, np.int64)
    cs = np.empty(n, np.int64)
    for g in range(lead):
        for bi in range(amax.shape[1]):
            for j in range(n):
                fe[j] = factor[g, bi, j // c]
                bad[j] = _U32(_F32(amax[g, bi, j // c]).view(np.uint32)) >= _INF
            cu[:] = 0
            cs[:] = 0
            for i in range(bi * r, min(bi * r + r, m)):
                for j in range(n):
                    cj, uj, sj = _one(x[g, i, j], fe[j], u[g, i, j] if sr else 0.0, el, sr)
                    codes[g, i, j] = nan_code if bad[j] else cj
                    cu[j] += uj
                    cs[j] += sj
            for bj in range(amax.shape[2]):
                j0, j1 = bj * c, min(bj * c + c, n)
                nu = cu[j0:j1].sum()
                ns = cs[j0:j1].sum()
                ok = not bad[j0]
                under[g, bi, bj] = nu if ok else 0
                sat[g, bi, bj] = ns if ok else 0


def quantize_amax(x: np.ndarray, block) -> np.ndarray:
    """float32 max |x| of each block of C-contiguous float32 ``x``: (R, n) in blocks of the integer
    ``block`` along the rows -> (R, nb); (L, M, N) in tiles of the pair ``block`` -> (L, Mb, Nb)."""
    bits = x.view(np.uint32)
    if x.ndim == 2:
        out = np.empty((x.shape[0], -(-x.shape[1] // block)), np.float32)
        _rows_amax(bits, block, out)
        return out
    r, c = block
    out = np.empty((x.shape[0], -(-x.shape[1] // r), -(-x.shape[2] // c)), np.float32)
    _grid_amax(bits, r, c, out)
    return out


_NO_DRAWS = np.zeros((1, 1, 1))


def quantize_elements(x: np.ndarray, block, amax: np.ndarray, factor: np.ndarray, u, el: tuple, nan_code: int):
    """(codes uint8 of x's shape, underflowed, saturated int64 of amax's shape): the element pass of
    ``x`` in :func:`quantize_amax`'s layouts, with its ``amax`` and float32 encode ``factor``
    (C-contiguous, amax's shape); ``u``: None to round to nearest even, else the float64 uniforms,
    element (i, j) / (g, i, j) at that index (rows: (R, >= n)); ``el``: ``blockcodes._quantize_args``
    of the element format; ``nan_code``: the code a block holding inf or NaN gets.  Rows go to
    :func:`_rows_nearest` where it applies (to nearest, whole blocks of a multiple of 8 up to 248),
    else to :func:`_rows` / :func:`_rows_stochastic`; the rest to :func:`_grid`."""
    codes = np.empty(x.shape, np.uint8)
    under = np.empty(amax.shape, np.int64)
    sat = np.empty(amax.shape, np.int64)
    sr = u is not None
    if x.ndim == 2 and not sr and block % 8 == 0 and block <= 248 and x.shape[1] % block == 0:
        _rows_nearest(x.reshape(-1), x.shape[1], amax, factor, block, el, np.uint8(nan_code), codes.reshape(-1),
                      under, sat)
        return codes, under, sat
    if x.ndim == 2 and sr:
        _rows_stochastic(x.reshape(-1), x.shape[1], amax, factor, u.reshape(-1), u.shape[1], block, el,
                         np.uint8(nan_code), codes.reshape(-1), under, sat)
        return codes, under, sat
    if x.ndim == 2:
        _rows(x.reshape(-1), x.shape[1], amax, factor, block, el, np.uint8(nan_code), codes.reshape(-1), under, sat)
        return codes, under, sat
    _grid(x, amax, factor, u if sr else _NO_DRAWS, block[0], block[1], el, sr, np.uint8(nan_code),
          codes, under, sat)
    return codes, under, sat


# name -> function, beside the roundings in :func:`fpsim.numerics.compiled.rounding`'s table
QUANTIZE = {f.__name__: f for f in (quantize_amax, quantize_elements)}
