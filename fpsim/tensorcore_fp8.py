"""Ada's and Hopper's FP8 tensor-core chain into e8m13, fast: :mod:`fpsim.tensorcore`'s algorithm
(MMA-Sim's T-FDPA, F = 13 fraction bits, rounding toward zero into e8m13) for fp8 inputs and a
float32 accumulator, bit for bit, in float32 arithmetic on exponent bits.

One step of the chain, for every output and K slice of L elements, as fpsim.tensorcore describes it:
the exponent e_max is the largest of the products' exponents e_a + e_b and the accumulator's; every
product and c are scaled by 2^(13 - e_max) (the grid 2^(e_max - 13) at 1), truncated toward zero and
added; the sum, scaled back, is rounded toward zero to 13 fraction bits.  Here, all exact in float32:

- a product of two fp8 numbers has at most 8 significant bits: exact in float32;
- a scaled term is below 2^15 and L + 1 of them (L <= 32) below 2^21: every sum is exact;
- the scales 2^(13 - e_max) and 2^(e_max - 13) are float32 numbers made from exponent bits, normal
  while e_max lies in [-113, 128] (the alignment exponent is held at or above -113, which changes no
  result: a real one is at least that), so every scaling is exact (an overflow gives inf, as a sum
  at or beyond 2^128 should);
- rounding toward zero to 13 fraction bits clears the low 10 bits of the float32 pattern.

The products' largest exponent of every slice and output, max_k (e_a + e_b), comes from float64
GEMMs: the sum over the slice of 2^(8 e_a) 2^(8 e_b) lies in [2^(8 e_max), 2^(8 e_max + 5)] (at most
32 terms), so its exponent field shifted right by 3 is e_max; a zero product adds 0, and a slice of zero
products gives 0, whose exponent is below the floor.  The accumulator is the step's (L + 1)-th term:
it is scaled, truncated and added with the products in the same numpy calls.

About 0.8 ns a multiply-add on the 2-core machine of docs/performance.md: each term goes through
four to six numpy passes (product, scale, truncation, sum, and the exponents), and numpy cannot
fuse them.  Where the compiled path is on (numba installed, ``FPSIM_NUMBA`` not ``0``),
:mod:`fpsim.tensorcore` runs every chain of 2^18 multiply-adds and more as compiled loops instead
(``fpsim/numerics/compiled/_tensorcore.py``: about 0.2 ns a multiply-add, the same bits); these
numpy steps stay for the numpy path and the small products.
"""

from __future__ import annotations

import numpy as np

__all__ = ["EMAX_FLOOR", "accumulator_fits", "chain"]

EMAX_FLOOR = -113  # alignment exponents held at or above it: 2^(13 - e_max) and 2^(e_max - 13) are normal
_BLOCK = 1 << 18  # elements of one (batch, L + 1, rows, N) work array
_EXPONENT_SUMS = 1 << 21  # float64 exponent sums (batch, K/L, rows, N) made at once


def accumulator_fits(c: np.ndarray) -> bool:
    """Whether every nonzero finite value of the float32 accumulator ``c`` is at least
    2^EMAX_FLOOR in magnitude (then every later partial sum of fp8 products is too, and
    :func:`chain` applies)."""
    mag = np.abs(c[np.isfinite(c) & (c != 0)])
    return not mag.size or float(mag.min()) >= 2.0**EMAX_FLOOR


def _operand(x: np.ndarray, e_sub: int, axis: int, L: int):
    """fp8 values as float32, K (``axis``) padded with zeros to whole slices, and the float64
    powers 2^(8 (e - e_sub)) of their MMA-Sim exponents (0 for a zero or non-finite value).
    No fp8 value is a float32 subnormal, so the float32 exponent field is its exponent."""
    v = np.asarray(x, np.float32)
    pad = -v.shape[axis] % L
    if pad:
        width = [(0, 0)] * v.ndim
        width[axis] = (0, pad)
        v = np.pad(v, width)
    field = (v.view(np.int32) >> 23) & 0xFF
    e = np.maximum(field - 127, e_sub) - e_sub
    p = ((e.astype(np.int64) * 8 + 1023) << 52).view(np.float64)  # at most 2^(8 * 29)
    p[(field == 0) | (field == 255)] = 0
    return v, p


def chain(a: np.ndarray, b: np.ndarray, c: np.ndarray, L: int, e_sub_a: int, e_sub_b: int) -> np.ndarray:
    """``a @ b + c`` as a chain of FP8 steps into e8m13 (F = 13, L elements of K a step).

    ``a`` (batch, M, K) and ``b`` (batch, K, N): fp8 numbers (float32 or fp8 storage) whose
    formats' smallest normal exponents are ``e_sub_a`` and ``e_sub_b``; ``c`` (batch, M, N) float32
    with :func:`accumulator_fits`.  Returns float32 (batch, M, N) holding e8m13 values (a zero's
    sign and a NaN's payload are the caller's to settle).  The output's longer side is worked
    innermost: C^T = B^T A^T has the same terms."""
    if a.shape[-2] > b.shape[-1]:
        out = chain(np.swapaxes(b, -1, -2), np.swapaxes(a, -1, -2), np.swapaxes(c, -1, -2), L, e_sub_b, e_sub_a)
        return np.ascontiguousarray(np.swapaxes(out, -1, -2))
    nb, m, n = c.shape
    va, pa = _operand(a, e_sub_a, -1, L)
    vb, pb = _operand(b, e_sub_b, -2, L)
    J = va.shape[-1] // L
    av = np.ascontiguousarray(va.reshape(nb, m, J, L).transpose(0, 2, 3, 1))  # (batch, K/L, L, M)
    pa = np.ascontiguousarray(pa.reshape(nb, m, J, L).transpose(0, 2, 1, 3))  # (batch, K/L, M, L)
    bv, pb = vb.reshape(nb, J, L, n), pb.reshape(nb, J, L, n)
    out = np.empty(c.shape, np.float32)
    step = max(1, min(m, _BLOCK // max(1, nb * (L + 1) * n)))
    big = step * max(1, _EXPONENT_SUMS // max(1, nb * J * step * n))
    T = np.empty((nb, L + 1, step, n), np.float32)
    for g0 in range(0, m, big):
        emax = _largest_exponents(pa[:, :, g0:g0 + big], pb, e_sub_a + e_sub_b)
        for r0 in range(0, emax.shape[-2], step):
            rows, r = slice(g0 + r0, g0 + r0 + step), min(step, m - g0 - r0)
            work = T[:, :, :r]
            work[:, L] = c[:, rows]
            _steps(av[..., rows], bv, emax[..., r0:r0 + step, :], work)
            out[:, rows] = work[:, L]
    return out


def _largest_exponents(pa: np.ndarray, pb: np.ndarray, e_sub: int) -> np.ndarray:
    """max_k (e_a + e_b) of every slice and output from the powers of :func:`_operand` (pa
    (batch, K/L, rows, L), pb (batch, K/L, L, N)), held at or above EMAX_FLOOR, as float32
    exponent fields: (e_max + 127) << 23, uint32 (batch, K/L, rows, N)."""
    sums = np.matmul(pa, pb)  # 2^(1023 + 8 (e_max - e_sub) + 0..5), or 0 for no product
    e = sums.view(np.int32)[..., 1::2] >> 20  # the exponent field, from the high word (little-endian)
    e += 8 * (e_sub + 127) - 1023
    e &= ~7  # 8 (e_max + 127)
    np.maximum(e, 8 * (EMAX_FLOOR + 127), out=e)
    e <<= 20
    return e.view(np.uint32)


def _steps(av, bv, emax, T) -> None:
    """The chain along K for one block of rows: av (batch, K/L, L, r) and bv (batch, K/L, L, N)
    float32, emax from :func:`_largest_exponents`; T (batch, L + 1, r, N) float32 work, whose last
    term holds c on entry and the result on return."""
    L = T.shape[1] - 1
    prods, c, cu = T[:, :L], T[:, L], T.view(np.uint32)[:, L]
    e = np.empty(c.shape, np.uint32)
    scale = np.empty(c.shape, np.uint32)
    s = np.empty(c.shape, np.float32)
    fscale = scale.view(np.float32)
    up, down = np.uint32((254 + 13) << 23), np.uint32(13 << 23)
    field, keep = np.uint32(0x7F800000), np.uint32(0xFFFFFC00)
    for j in range(av.shape[1]):
        np.bitwise_and(cu, field, out=e)  # c's exponent field
        np.maximum(e, emax[:, j], out=e)  # e_max
        np.subtract(up, e, out=scale)  # 2^(13 - e_max)
        np.multiply(av[:, j, :, :, None], bv[:, j, :, None, :], out=prods)  # the products, exact
        np.multiply(T, fscale[:, None], out=T)  # aligned: the grid at 1
        np.trunc(T, out=T)
        np.add.reduce(T, axis=1, out=s)  # exact: L + 1 integers, the sum below 2^21
        np.subtract(e, down, out=scale)  # 2^(e_max - 13)
        np.multiply(s, fscale, out=c)  # the sum's value (>= 2^128: inf)
        np.bitwise_and(cu, keep, out=cu)  # toward zero to 13 fraction bits
