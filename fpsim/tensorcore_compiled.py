"""The parts of :mod:`fpsim.tensorcore`'s chain that its compiled path shares with the numpy one:
the dtype the products are formed in (:func:`work_dtype`), MMA-Sim's zeros and NaNs
(:func:`canonical`), and the driver of the compiled loops (:func:`chain_compiled`,
``fpsim/numerics/compiled/_tensorcore.py``): operands packed into tiles, the loops run, the
accumulator read back.  Same steps, same bits as the numpy model."""

from __future__ import annotations

import numpy as np

from .formats.bitviews import bits_view

__all__ = ["work_dtype", "canonical", "chain_compiled"]


def work_dtype(ra, rb, fa, fb, F: int):
    """The dtype the products are formed and aligned in, and pmin, the least alignment exponent of
    the products' scale (below every nonzero product's exponent), from the operands' exponent
    ranges ``ra``, ``rb`` (:func:`fpsim.tensorcore._exponent_range`).  float32 where every product, and every
    product times its alignment scale 2^(F - e_max), is exact in float32: products of at most 22
    bits whose exponents lie in [F - 127, 126] (so the scale is at most 2^127, no product is
    subnormal and none reaches 2^128); else float64.  The sums of the truncated terms are then
    taken in float64 (float32 when F = 13: below 2^21)."""
    pmin = min(fa[2], fb[2]) * 2 - 2
    if ra is None or rb is None or (ra[0] + rb[0] >= F - 127 and ra[1] + rb[1] <= 126):
        return np.float32, max(pmin, F - 127)  # the alignment scale 2^(F - e_max) stays a float32
    return np.float64, pmin


def canonical(out: np.ndarray) -> np.ndarray:
    """What MMA-Sim returns for zeros and NaNs: +0, and the NaN 0x7FFF / 0x7FFFFFFF."""
    out = out + out.dtype.type(0)
    bits = out.view(bits_view(out))
    bits[np.isnan(out)] = 0x7FFF if out.dtype == np.float16 else 0x7FFFFFFF
    return out


_ROUNDINGS = {"rz-float32": 0, "rz-e8m13": 1, "rne-float16": 2}  # _tensorcore's ROUND_RZ32, ROUND_RZ13, ROUND_RNE16


def chain_compiled(kern, a, b, c, ins, fa, fb) -> np.ndarray:
    """:func:`fpsim.tensorcore._chain_any`'s chain (and the FP8 path's, which is the same) by the compiled loops
    (``fpsim.numerics.compiled._tensorcore``): the same steps, the same bits.  The output's longer
    side is worked innermost (C^T = B^T A^T has the same terms, the same products).  ``kern``:
    the compiled module, ``ins``: the :class:`fpsim.tensorcore.Instruction`."""
    F, L = ins.fraction_bits, ins.slice_length
    nb, m, n = c.shape
    k = a.shape[-1] + (-a.shape[-1] % L)
    swap = m > n
    (x, fl), (y, fr) = ((np.swapaxes(b, -1, -2), fb), (np.swapaxes(a, -1, -2), fa)) if swap else ((a, fa), (b, fb))
    # exact: every input is a float32 value (a read-only array copied: the loops are compiled for writable ones)
    x, y = (np.ascontiguousarray(v, np.float32) for v in (x, y))
    x, y = (v if v.flags.writeable else v.copy() for v in (x, y))
    r, cols = (n, m) if swap else (m, n)
    tiles = -(-cols // max(1, kern.COLUMN_BYTES // (8 * L)))
    w = -(-cols // tiles)
    va, ea = np.empty((nb, r, k), np.float32), np.empty((nb, r, k), np.int16)
    vb, eb = np.empty((nb, tiles, k // L, L, w), np.float32), np.empty((nb, tiles, k // L, L, w), np.int16)
    ra = kern.rows(x, fl[0] == "tf32", fl[2], va, ea)
    rb = kern.cols(y, fr[0] == "tf32", fr[2], vb, eb)
    vdt, pmin = work_dtype(*(None if e[1] == kern.LOW else e for e in (ra, rb)), fa, fb, F)
    zeros = ins.rounding == "rne-float16" or pmin < -126  # as _block decides it
    half = c.dtype == np.float16
    c_min = -14 if half else -126
    assert ins.zero_exponent < c_min  # what lets the loops leave zero products out of e_max
    if vdt == np.float64:
        va, vb, pmin = va.astype(np.float64), vb.astype(np.float64), -(1 << 16)  # every e_max is above it
    cv = np.empty((nb, tiles, r, w))
    kern.pack(c.astype(np.float32) if half else c, swap, cv)
    acc = np.empty(cv.shape, np.float32 if vdt == np.float32 and (L + 1) << (F + 2) <= 1 << 24 else np.float64)
    kern.steps(va, ea, vb, eb, cv, F, pmin, ins.zero_exponent if zeros else c_min, c_min, 16 if half else 128,
               _ROUNDINGS[ins.rounding], acc)
    if half:  # exact: every value is a float16 value
        out = np.swapaxes(cv, 1, 2).reshape(nb, r, tiles * w)[..., :cols].astype(np.float16)
        return canonical(np.ascontiguousarray(np.swapaxes(out, -1, -2) if swap else out))
    out = np.empty(c.shape, np.float32)
    kern.unpack(cv, swap, out)
    return out
