"""The compiled path of block quantization's element pass (``fpsim/formats/blockfast.py``): each
element times its block's float32 encode factor, rounded to nearest even into the element format
by the saturating narrowing table (indexed by the product rounded to odd onto bfloat16, as
``kernels.narrow_cast`` indexes it, the table already widened to float32), times the block's float32
decode factor - the numpy path's three operations and its look-up, value by value in one loop, in
the written order (the same bits); stochastic rounding likewise, with the numpy path's uniforms in
``quantize``'s order; and the block maxima before it, in one pass.  The scales themselves stay the
scale rule's (numpy, once per block); blocks holding an inf or NaN are set afterwards by the caller,
as on the numpy path.
"""

from __future__ import annotations

import numpy as np

from ._exact import jit
from ._round import _odd

__all__ = ["BLOCKS"]

_F32 = np.float32
_U32 = np.uint32
_INV = _U32(254 << 23)  # the bits of 2**-E are (254 << 23) minus those of 2**E


@jit()
def _tiles(xb, factor, dec, table, out):
    """xb (R, r, Nb, c) float32, block (i, m) its elements [i, :, m, :]; factor / dec (R, Nb)."""
    rows, r, nb, c = xb.shape
    for i in range(rows):
        for j in range(r):
            for m in range(nb):
                f = factor[i, m]
                d = dec[i, m]
                for k in range(c):
                    s = _F32(xb[i, j, m, k] * f)
                    out[i, j, m, k] = _F32(table[_odd(s.view(np.uint32))] * d)


@jit()
def _columns(xb, factor, dec, table, out):
    """xb (R, k, B) float32, blocks along the middle axis: block (i, b) its elements [i, :, b];
    factor / dec (R, B) - the inner loop runs along b, over contiguous memory."""
    rows, k, nb = xb.shape
    for i in range(rows):
        for j in range(k):
            for b in range(nb):
                s = _F32(xb[i, j, b] * factor[i, b])
                out[i, j, b] = _F32(table[_odd(s.view(np.uint32))] * dec[i, b])


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


def block_amax(xb: np.ndarray) -> np.ndarray:
    """float32 max |x| of each block of C-contiguous float32 ``xb`` (the layouts of
    :func:`block_nearest`: (R,), (R, B) or (R, Nb)), taken on the bit patterns as
    ``blockfast._Blocks.amax`` takes it."""
    bits = xb.view(np.uint32)
    if xb.ndim == 3:
        out = np.empty((xb.shape[0], xb.shape[2]), np.uint32)
        _amax_columns(bits, out)
    elif xb.ndim == 2:
        out = np.empty((xb.shape[0], 1), np.uint32)
        _amax_tiles(bits.reshape(xb.shape[0], 1, 1, xb.shape[1]), out)
        out = out.reshape(-1)
    else:
        out = np.empty((xb.shape[0], xb.shape[2]), np.uint32)
        _amax_tiles(bits, out)
    return out.view(np.float32)


@jit(inline=True)
def _sr(v, f, d, u, qmin, man_field, fmax):
    """``blockfast._stochastic`` of one element v times f, then times d: |v f| / ulp (exact), its
    floor, up by one where the uniform u lies below the fraction, times the ulp, min(., max), the sign."""
    s = _F32(v * f)
    b = s.view(np.uint32)
    a = _U32(b & _U32(0x7FFFFFFF))
    q = _U32(max(_U32(a & _U32(0x7F800000)), qmin) - man_field)
    w = _F32(a.view(np.float32) * _U32(_INV - q).view(np.float32))
    r = _F32(np.floor(w))
    frac = _F32(w - r)
    r = _F32(r + _F32(1.0 if u < frac else 0.0))
    r = _F32(r * q.view(np.float32))
    r = _F32(min(r, fmax))
    return _F32(_U32(r.view(np.uint32) | _U32(b & _U32(0x80000000))).view(np.float32) * d)


@jit()
def _tiles_sr(xb, factor, dec, u, qmin, man_field, fmax, out):
    """:func:`_tiles` rounding stochastically, with the uniforms ``u`` (float64, xb's shape)."""
    rows, r, nb, c = xb.shape
    for i in range(rows):
        for j in range(r):
            for m in range(nb):
                f = factor[i, m]
                d = dec[i, m]
                for k in range(c):
                    out[i, j, m, k] = _sr(xb[i, j, m, k], f, d, u[i, j, m, k], qmin, man_field, fmax)


@jit()
def _columns_sr(xb, factor, dec, u, qmin, man_field, fmax, out):
    """:func:`_columns` rounding stochastically, with the uniforms ``u`` (lead, B, n) in
    ``quantize``'s order (the block axis last: n = blocks along it times k), read where they lie -
    no transposed copy: block i is block i % (n / k) of leading index i // (n / k), its element j
    the uniform at position (i % (n / k)) k + j.  The loop runs along the block (contiguous uniforms)."""
    rows, k, nb = xb.shape
    nblk = u.shape[2] // k
    for i in range(rows):
        lead = i // nblk
        off = (i % nblk) * k
        for b in range(nb):
            f = factor[i, b]
            d = dec[i, b]
            for j in range(k):
                out[i, j, b] = _sr(xb[i, j, b], f, d, u[lead, b, off + j], qmin, man_field, fmax)


def block_stochastic(xb: np.ndarray, factor: np.ndarray, dec: np.ndarray, u: np.ndarray, emin: int, mantissa_bits: int,
                     fmax) -> np.ndarray:
    """:func:`block_nearest` rounding stochastically into an element format of ``emin``,
    ``mantissa_bits`` and ``fmax`` (saturating), each element up where its uniform lies below its
    fraction: ``u`` (float64, C-contiguous) the draws in ``quantize``'s order - xb's shape, or for
    (R, k, B) blocks along an earlier axis as drawn, (lead, B, n) (see :func:`_columns_sr`)."""
    out = np.empty(xb.shape, np.float32)
    args = (_U32((emin + 127) << 23), _U32(mantissa_bits << 23), _F32(fmax))
    if xb.ndim == 3:
        _columns_sr(xb, factor, dec, u, *args, out)
    else:
        shape4 = (xb.shape[0], 1, 1, xb.shape[1]) if xb.ndim == 2 else xb.shape
        per = (-1, 1) if xb.ndim == 2 else factor.shape
        _tiles_sr(xb.reshape(shape4), factor.reshape(per), dec.reshape(per), u.reshape(shape4), *args,
                  out.reshape(shape4))
    return out


def block_nearest(xb: np.ndarray, factor: np.ndarray, dec: np.ndarray, table: np.ndarray) -> np.ndarray:
    """The blocked float32 output of ``blockfast._encode`` to nearest: ``xb`` (R, k) blocks as rows
    (``factor`` / ``dec`` (R,)), (R, k, B) blocks along the middle axis ((R, B)) or (R, r, Nb, c)
    2-D tiles ((R, Nb)), C-contiguous float32; ``table``: the element's widened saturating
    narrowing table (65,536 float32)."""
    out = np.empty(xb.shape, np.float32)
    if xb.ndim == 3:
        _columns(xb, factor, dec, table, out)
    elif xb.ndim == 2:
        _tiles(xb.reshape(xb.shape[0], 1, 1, xb.shape[1]), factor.reshape(-1, 1), dec.reshape(-1, 1), table,
               out.reshape(xb.shape[0], 1, 1, xb.shape[1]))
    else:
        _tiles(xb, factor, dec, table, out)
    return out


# name -> function, beside the roundings in :func:`fpsim.numerics.compiled.rounding`'s table
BLOCKS = {f.__name__: f for f in (block_amax, block_nearest, block_stochastic)}
