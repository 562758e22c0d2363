"""The compiled path of block quantization's element pass (``fpsim/formats/blockfast.py``): each
element times its block's float32 encode factor, rounded into the element format, times the block's
float32 decode factor - the numpy path's operations in the written order, value by value in one loop;
and the block maxima before it, in one pass.  Rounding to nearest even is arithmetic here
(:func:`_nearest`: the float32 adder rounds onto the element's grid), where the numpy path looks the
value up in the saturating narrowing table by the product rounded to odd onto bfloat16: two correct
roundings of the same float32 value, the same value for every float32 pattern but NaN (checked on
all of them), and no gather in the loop.  Stochastic rounding is ``blockfast._stochastic``'s exact
kernel with the numpy path's uniforms in ``quantize``'s order.  The scales stay the scale rule's
(numpy, once per block) but NVFP4's, whose float32 steps run block by block in one loop too
(:func:`nvfp4_scales`); blocks holding an inf or NaN are set afterwards by the caller, as on the
numpy path.  The element step is one inlined function (:func:`_element`) that every layout's loop
calls.

Besides: the random Hadamard transform of ``lowp.block.hadamard_transform`` (:func:`block_hadamard`),
the fast Walsh-Hadamard transform of each group in float64 where every partial sum is proven exact,
so that one float32 rounding of it is the exact sum rounded once, as ``matmul_f32`` defines it.
"""

from __future__ import annotations

import math

import numpy as np

from ._exact import jit

__all__ = ["BLOCKS"]

_F32 = np.float32
_U32 = np.uint32
_INV = _U32(254 << 23)  # the bits of 2**-E are (254 << 23) minus those of 2**E


@jit()
def _amax_tiles(xb, out):
    """Into uint32 ``out`` (R, Nb): the largest magnitude pattern of each block of xb (R, r, Nb, c)
    (float32 patterns, the sign cut: NaN above inf above every finite value, as the numpy path orders them)."""
    rows, r, nb, c = xb.shape
    for i in range(rows):
        for m in range(nb):
            out[i, m] = 0
        for j in range(r):
            for m in range(nb):
                hi = out[i, m]
                for k in range(c):
                    hi = max(hi, np.uint32(xb[i, j, m, k] & np.uint32(0x7FFFFFFF)))
                out[i, m] = hi


@jit()
def _amax_columns(xb, out):
    """Into uint32 ``out`` (R, B): the largest magnitude pattern of each block of xb (R, k, B)."""
    rows, k, nb = xb.shape
    for i in range(rows):
        for b in range(nb):
            out[i, b] = 0
        for j in range(k):
            for b in range(nb):
                out[i, b] = max(out[i, b], np.uint32(xb[i, j, b] & np.uint32(0x7FFFFFFF)))


@jit()
def _amax_rows(xb, out):
    """Into uint32 ``out`` (R,): the largest magnitude pattern of each row of xb (R, k) - the 1-D
    blocks along the last axis (a loop of its own: the tiles' four indices keep the short row's
    maximum from vectorising)."""
    rows, k = xb.shape
    for i in range(rows):
        hi = np.uint32(0)
        for j in range(k):
            hi = max(hi, np.uint32(xb[i, j] & np.uint32(0x7FFFFFFF)))
        out[i] = hi


def block_amax(xb: np.ndarray) -> np.ndarray:
    """float32 max |x| of each block of C-contiguous float32 ``xb`` (the layouts of
    :func:`block_nearest`: (R,), (R, B) or (R, Nb)), taken on the bit patterns as
    ``blockfast._Blocks.amax`` takes it."""
    bits = xb.view(np.uint32)
    if xb.ndim == 3:
        out = np.empty((xb.shape[0], xb.shape[2]), np.uint32)
        _amax_columns(bits, out)
    elif xb.ndim == 2:
        out = np.empty(xb.shape[0], np.uint32)
        _amax_rows(bits, out)
    else:
        out = np.empty((xb.shape[0], xb.shape[2]), np.uint32)
        _amax_tiles(bits, out)
    return out.view(np.float32)


@jit(inline=True)
def _nearest(s, qmin, man_field, top, fmax):
    """float32 s rounded to nearest even into the element format, saturating: |s| (clamped to
    ``top`` = 2**(emax + 1), beyond which everything ends at max) plus 2**23 times its ulp in the
    element (q: the binade's spacing, the subnormals' below the smallest normal) - the float32 adder
    rounds onto the multiples of q, ties to even - minus the same, then min(., max) and s's sign.
    The same value as the numpy path's table look-up (``blockfast._nearest_table`` of the product
    rounded to odd onto bfloat16) for every float32 but NaN (a NaN block is set by the caller)."""
    b = s.view(np.uint32)
    a = _F32(min(_U32(b & _U32(0x7FFFFFFF)).view(np.float32), top))
    q = _U32(max(_U32(a.view(np.uint32) & _U32(0x7F800000)), qmin) - man_field)
    m = _U32(q + _U32(23 << 23)).view(np.float32)
    r = _F32(_F32(a + m) - m)
    r = _F32(min(r, fmax))
    return _U32(r.view(np.uint32) | _U32(b & _U32(0x80000000))).view(np.float32)


@jit(inline=True)
def _magnitude_code(a, qmin, man_field, mscale, cmax):
    """The code of magnitude a (float32, >= 0, at most 2**(emax + 1)) rounded to nearest even into
    the element format, saturating, its sign bit clear: with q the element's spacing in a's binade
    (the subnormals' below its smallest normal, bits ``qmin``), a + 2**23 q rounds onto the multiples
    of q (ties to even) and its bit pattern less that of 2**23 q is a / q rounded, N; the code is N
    plus the binade's index times 2**m (``mscale``; a carry into the next binade lands on its code),
    at most ``cmax`` (max's).  Exact for a value already on the grid (the stochastic path's).  The
    same value as :func:`_nearest`, as a code; integer steps only, but the one float32 addition."""
    ab = _F32(a).view(np.uint32)
    e = _U32(ab & _U32(0x7F800000))
    eb = _U32(e if e > qmin else qmin)
    mb = _U32(_U32(eb - man_field) + _U32(23 << 23))
    n = _U32(_U32(_F32(a + mb.view(np.float32)).view(np.uint32)) - mb)
    c = _U32(n + _U32(_U32(_U32(eb - qmin) >> _U32(23)) * mscale))
    return _U32(c if c < cmax else cmax)


@jit(inline=True)
def _stochastic(s, u, qmin, man_field, fmax):
    """``blockfast._stochastic`` of one float32 s: |s| / ulp (exact), its floor, up by one where
    the uniform u lies below the fraction, times the ulp, min(., max), s's sign.  The quotient w is
    below 2**(m + 2) for every finite s (the ulp is its binade's), so its floor is its integer part
    (a conversion, where np.floor is a call per value); an inf s's w is cut to 2**30 first (its floor
    then times the ulp is beyond max, as inf is, and its fraction 0 never goes up: the same max).
    The min with max compares bit patterns (r >= 0: the same order; a NaN block's r is set after)."""
    b = s.view(np.uint32)
    a = _U32(b & _U32(0x7FFFFFFF))
    q = _U32(max(_U32(a & _U32(0x7F800000)), qmin) - man_field)
    w = _F32(a.view(np.float32) * _U32(_INV - q).view(np.float32))
    w = _F32(w if w < _F32(2.0**30) else _F32(2.0**30))
    r = _F32(np.int64(w))
    frac = _F32(w - r)
    r = _F32(r + _F32(1.0 if u < frac else 0.0))
    rb = _U32(_F32(r * q.view(np.float32)).view(np.uint32))
    fb = _F32(fmax).view(np.uint32)
    return _U32(_U32(rb if rb < fb else fb) | _U32(b & _U32(0x80000000))).view(np.float32)


@jit(inline=True)
def _element(v, f, d, u, qmin, man_field, top, fmax, sr):
    """One element v of a block: times its encode factor f (float32), rounded into the element
    format - to nearest even, or with ``sr`` stochastically with the uniform u - times its decode
    factor d (float32): the element step every kernel here shares, in the numpy path's order."""
    s = _F32(v * f)
    r = _stochastic(s, u, qmin, man_field, fmax) if sr else _nearest(s, qmin, man_field, top, fmax)
    return _F32(r * d)


@jit()
def _tiles(xb, factor, dec, u, qmin, man_field, top, fmax, sr, out):
    """xb (R, r, Nb, c) float32, block (i, m) its elements [i, :, m, :]; factor / dec (R, Nb); to
    nearest or, with ``sr``, stochastically with the uniforms ``u`` (float64, xb's shape; unread to
    nearest)."""
    rows, r, nb, c = xb.shape
    for i in range(rows):
        for j in range(r):
            for m in range(nb):
                f = factor[i, m]
                d = dec[i, m]
                for k in range(c):
                    out[i, j, m, k] = _element(xb[i, j, m, k], f, d, u[i, j, m, k] if sr else 0.0, qmin, man_field,
                                               top, fmax, sr)


@jit()
def _rows_values(x, k, factor, dec, qmin, man_field, top, fmax, out):
    """:func:`_tiles` to nearest for blocks of k as rows (x and out flat float32, factor / dec (R,)):
    one slice a block, so that the element loop runs from 0 along contiguous memory (it vectorises;
    the tiles' four indices keep it from doing so for short rows)."""
    for b in range(factor.shape[0]):
        f = factor[b]
        d = dec[b]
        xs, os_ = x[b * k : b * k + k], out[b * k : b * k + k]
        for j in range(xs.shape[0]):
            os_[j] = _element(xs[j], f, d, 0.0, qmin, man_field, top, fmax, False)


@jit()
def _rows_stochastic_values(x, k, factor, dec, u, qmin, man_field, top, fmax, out):
    """:func:`_rows_values` rounding stochastically with the uniforms ``u`` (flat float64, x's size)."""
    for b in range(factor.shape[0]):
        f = factor[b]
        d = dec[b]
        xs, us, os_ = x[b * k : b * k + k], u[b * k : b * k + k], out[b * k : b * k + k]
        for j in range(xs.shape[0]):
            os_[j] = _element(xs[j], f, d, us[j], qmin, man_field, top, fmax, True)


@jit()
def _columns(xb, factor, dec, u, qmin, man_field, top, fmax, sr, out):
    """xb (R, k, B) float32, blocks along the middle axis: block (i, b) its elements [i, :, b];
    factor / dec (R, B); the inner loop runs along b, over contiguous memory.  To nearest, or with
    ``sr`` stochastically with the uniforms ``u`` (lead, B, n) in ``quantize``'s order (the block
    axis last: n = blocks along it times k) - block i is block i % (n / k) of leading index
    i // (n / k), its element j the uniform at position (i % (n / k)) k + j: each row of blocks'
    uniforms are first copied into a (k, B) tile in the elements' order (a small transposed copy,
    in cache; read in place, the element loop could not run along contiguous memory)."""
    rows, k, nb = xb.shape
    nblk = u.shape[2] // k if sr else 1
    ut = np.zeros((k, nb))
    for i in range(rows):
        if sr:
            lead = i // nblk
            off = (i % nblk) * k
            for b in range(nb):
                for j in range(k):
                    ut[j, b] = u[lead, b, off + j]
        for j in range(k):
            for b in range(nb):
                out[i, j, b] = _element(xb[i, j, b], factor[i, b], dec[i, b], ut[j, b], qmin, man_field, top, fmax,
                                        sr)


def _as_tiles(xb, factor, dec, *more):
    """Rows of blocks (R, k) with their per-block arrays (R,) as 2-D tiles (R, 1, 1, k) / (R, 1), the
    one layout :func:`_tiles` loops over; 2-D tiles (R, r, Nb, c) as they are.  ``more``: arrays of
    xb's shape (the uniforms, the output), reshaped alike."""
    if xb.ndim == 4:
        return (xb, factor, dec, *more)
    shape4 = (xb.shape[0], 1, 1, xb.shape[1])
    return (xb.reshape(shape4), factor.reshape(-1, 1), dec.reshape(-1, 1), *(m.reshape(shape4) for m in more))


_NO_DRAWS = np.zeros((1, 1, 1, 1))  # to nearest: no uniforms (never read)
_NO_DRAWS3 = np.zeros((1, 1, 1))


def block_stochastic(xb: np.ndarray, factor: np.ndarray, dec: np.ndarray, u: np.ndarray, elem: tuple) -> np.ndarray:
    """:func:`block_nearest` rounding stochastically (saturating), each element up where its uniform
    lies below its fraction: ``u`` (float64, C-contiguous) the draws in ``quantize``'s order - xb's
    shape, or for (R, k, B) blocks along an earlier axis as drawn, (lead, B, n) (see
    :func:`_columns`)."""
    out = np.empty(xb.shape, np.float32)
    if xb.ndim == 3:
        _columns(xb, factor, dec, u, *elem, True, out)
    elif xb.ndim == 2:
        _rows_stochastic_values(xb.reshape(-1), xb.shape[1], factor, dec, u.reshape(-1), *elem, out.reshape(-1))
    else:
        x4, f4, d4, u4, o4 = _as_tiles(xb, factor, dec, u.reshape(xb.shape), out)
        _tiles(x4, f4, d4, u4, *elem, True, o4)
    return out


def block_nearest(xb: np.ndarray, factor: np.ndarray, dec: np.ndarray, elem: tuple) -> np.ndarray:
    """The blocked float32 output of ``blockfast._encode`` to nearest: ``xb`` (R, k) blocks as rows
    (``factor`` / ``dec`` (R,)), (R, k, B) blocks along the middle axis ((R, B)) or (R, r, Nb, c)
    2-D tiles ((R, Nb)), C-contiguous float32; ``elem``: the element format as the kernels take it
    (``blockcodes._kernel_args``: the bits of 2**emin, the mantissa bits as an exponent field,
    2**(emax + 1) and max as float32)."""
    out = np.empty(xb.shape, np.float32)
    if xb.ndim == 3:
        _columns(xb, factor, dec, _NO_DRAWS3, *elem, False, out)
    elif xb.ndim == 2:
        _rows_values(xb.reshape(-1), xb.shape[1], factor, dec, *elem, out.reshape(-1))
    else:
        x4, f4, d4, o4 = _as_tiles(xb, factor, dec, out)
        _tiles(x4, f4, d4, _NO_DRAWS, *elem, False, o4)
    return out


_E4M3_MIN, _E4M3_MAN, _E4M3_TOP, _E4M3_MAX = _U32((-6 + 127) << 23), _U32(3 << 23), _F32(512.0), _F32(448.0)
_F32_MAX = _F32(np.finfo(np.float32).max)


@jit()
def _nvfp4_scales(amax, mult, s_dec, codes, enc, dec):
    """Per block, ``block_scales.nvfp4_scales``' steps in its order, in float32: d = min(amax * mult,
    448) rounded to e4m3 (nearest even; :func:`_nearest`, d >= 0) is the scale s, its e4m3 code
    :func:`_magnitude_code` of it; dec = s * s_dec; enc = min(1 / dec, max) (1 / 0 is inf, so max;
    the quotient in float64 rounds to float32 as float32's own division would: 53 >= 2 * 24 + 2), 0
    where s is 0; then each block whose amax is inf or NaN gets the NaN code 0x7F and NaN factors (a
    second loop: a branch in the first keeps it from vectorising)."""
    for i in range(amax.shape[0]):
        d = _F32(_F32(amax[i]) * mult)
        d = _F32(d if d < _E4M3_MAX else _E4M3_MAX)  # NaN: 448 (set below)
        sc = _F32(_nearest(d, _E4M3_MIN, _E4M3_MAN, _E4M3_TOP, _E4M3_MAX))
        codes[i] = np.uint8(_magnitude_code(sc, _E4M3_MIN, _E4M3_MAN, _U32(8), _U32(0x7E)))
        de = _F32(sc * s_dec)
        dec[i] = de
        en = _F32(np.true_divide(_F32(1.0), de))
        en = _F32(en if en < _F32_MAX else _F32_MAX)
        enc[i] = _F32(0.0) if sc == 0 else en
    for i in range(amax.shape[0]):
        if _U32(_F32(amax[i]).view(np.uint32) & _U32(0x7F800000)) == _U32(0x7F800000):
            codes[i] = 0x7F
            enc[i] = np.nan
            dec[i] = np.nan


def nvfp4_scales(amax: np.ndarray, mult, s_dec):
    """(e4m3 codes as uint8, encode factors, decode factors) of each block from C-contiguous float32
    ``amax`` (any shape; >= 0 or inf / NaN), with the float32 ``mult`` = S_enc * (1 / top) and
    ``s_dec`` = 1 / S_enc (:func:`fpsim.formats.block_scales.nvfp4_scales`)."""
    codes = np.empty(amax.shape, np.uint8)
    enc = np.empty(amax.shape, np.float32)
    dec = np.empty(amax.shape, np.float32)
    _nvfp4_scales(amax.reshape(-1), _F32(mult), _F32(s_dec), codes.reshape(-1), enc.reshape(-1), dec.reshape(-1))
    return codes, enc, dec


@jit()
def _hadamard_groups(x, bits, col_signs, row_scale, out, open_):
    """out[g] = diag(row_scale) H diag(col_signs) x[g] for each group g of x (G, n, C) float32 (H the
    Sylvester Hadamard matrix of size n, a power of two), each entry the exact sum rounded once to
    float32 where the group's column is proven exact in float64, else ``open_[g, c]`` set (the caller
    sums it exactly).  H x by the fast Walsh-Hadamard transform in float64: each butterfly a sum of
    +-x values, exact in any order where every value is a multiple of q (the spacing of the column's
    smallest nonzero magnitude, 2**-149 at least) and n max|x| < 2**53 q; row_scale (+-a power of
    two) then scales exactly, + 0.0 makes an exact zero +0, and the float32 cast rounds once."""
    ng, n, nc = x.shape
    buf = np.empty((n, nc))
    lo = np.empty(nc, np.uint32)
    hi = np.empty(nc, np.uint32)
    for g in range(ng):
        lo[:] = 0xFFFFFFFF
        hi[:] = 0
        for k in range(n):
            s = col_signs[k]
            for j in range(nc):
                b = _U32(bits[g, k, j] & _U32(0x7FFFFFFF))
                hi[j] = max(hi[j], b)
                lo[j] = min(lo[j], b if b != 0 else _U32(0xFFFFFFFF))
                buf[k, j] = s * np.float64(x[g, k, j])
        h = 1
        while h < n:
            for i0 in range(0, n, 2 * h):
                for k in range(i0, i0 + h):
                    for j in range(nc):
                        p = buf[k, j]
                        q = buf[k + h, j]
                        buf[k, j] = p + q
                        buf[k + h, j] = p - q
            h *= 2
        for j in range(nc):
            exact = hi[j] < _U32(0x7F800000)
            if exact and lo[j] != _U32(0xFFFFFFFF):
                e = max(np.int64(lo[j] >> _U32(23)), 1) - 127
                exact = n * np.float64(_U32(hi[j]).view(np.float32)) < math.ldexp(1.0, e - 23 + 53)
            open_[g, j] = not exact
        for k in range(n):
            r = row_scale[k]
            for j in range(nc):
                out[g, k, j] = np.float32(buf[k, j] * r + 0.0)


def block_hadamard(x: np.ndarray, col_signs: np.ndarray, row_scale: np.ndarray):
    """(out, open): :func:`_hadamard_groups` of C-contiguous float32 ``x`` (G, n, C) - ``open`` (G, C)
    bool marks the columns of groups whose float64 sums were not proven exact (their ``out`` is
    to be replaced by the exact sums)."""
    out = np.empty(x.shape, np.float32)
    open_ = np.empty((x.shape[0], x.shape[2]), np.bool_)
    _hadamard_groups(x, x.view(np.uint32), np.asarray(col_signs, np.float64), np.asarray(row_scale, np.float64),
                     out, open_)
    return out, open_


# name -> function, beside the roundings in :func:`fpsim.numerics.compiled.rounding`'s table
BLOCKS = {f.__name__: f for f in (block_amax, block_nearest, block_stochastic, block_hadamard, nvfp4_scales)}
