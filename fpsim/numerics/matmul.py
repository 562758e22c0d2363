"""A matrix product that no BLAS can change: the exact sum of exact products, rounded once.

A float32 BLAS product adds its K products in an order set by the kernel the CPU selects
(blocking, vector width, fused multiply-adds, threads), and float32 addition is not
associative: the same ``a @ b`` gives other bits under OpenBLAS's Haswell and SkylakeX kernels,
or under Accelerate.  fpsim defines ``a @ b`` of float32 values as: every product exact, their
exact sum rounded once to float32 (to nearest, ties to even; an exact zero is +0).  That is the
best float32 answer there is, and the same on every machine.

Computed fast, not slowly: a product of two float32 numbers is exact in float64, so one
float64 BLAS product (dgemm) gives every sum to within gamma_K * sum_k |a_ik b_kj| of the exact
one, in whatever order the BLAS adds (``checked.gamma``).  That sum of magnitudes is at most
||a_i|| ||b_j|| (Cauchy-Schwarz; only the row and column norms are computed).  Where the
interval rounds to one float32 number, that is the answer; for a long K the sum is split into
about sqrt(K) chunks, each its own dgemm, which shrinks the bound from K to about 2 sqrt(K)
roundings.  The few sums left open (near a halfway point between two float32 numbers) are
summed exactly (``exactsum.round_rows``) - except where they are exact already: a sum whose
values are all multiples of powers of two qa (its row of a) and qb (its column of b), with the
magnitudes below 2**53 qa qb, is exact in float64 in any order.  ``grid_a`` / ``grid_b`` say what
the values are (mantissa bits and smallest spacing of their format) so that qa and qb can be
read off the smallest magnitudes: with float16 or bfloat16 inputs and a short K, a tenth of the
sums land exactly on a halfway point, and this is how they are settled without the slow path.

inf and NaN: IEEE's rules, which no order changes (an inf times 0 is NaN, inf - inf is NaN);
NaN comes out as the positive quiet NaN.
"""

from __future__ import annotations

import numpy as np

from . import compiled
from .checked import gamma, round_within, round_within_outer
from .chunks import chunk_of, chunk_sums
from .exactsum import round_rows

__all__ = ["matmul_f32", "chunk_of"]

_TERMS_AT_ONCE = 2**21  # products an exact pass holds at a time


def _norms(x64, axis: int):
    """Euclidean norms along ``axis`` in float64, rounded up enough to be upper bounds (the sum
    of squares has a relative error of at most gamma_K; the square root is correctly rounded)."""
    return np.sqrt(np.einsum("...k,...k->...", x64, x64) if axis == -1 else
                   np.einsum("...kn,...kn->...n", x64, x64))


def matmul_f32(a, b, grid_a=None, grid_b=None) -> np.ndarray:
    """``a @ b`` of float32 values (arrays (..., M, K) and (..., K, N), batch dimensions
    broadcast as numpy's ``matmul``), each sum exact and rounded once to float32.

    ``grid_a`` / ``grid_b``: what is known of the values' grid - (mantissa bits, the quantum that
    divides every value) of the format they are in, (10, 2**-24) for float16; None for any
    float32 value, (23, 2**-149).  Only the speed depends on it: it lets exact float64 sums be
    recognised as exact (see the module docstring)."""
    a = np.asarray(a)
    b = np.asarray(b)
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
        raise ValueError(f"matmul_f32: shapes {a.shape} and {b.shape} do not fit (..., M, K) @ (..., K, N)")
    k = a.shape[-1]
    shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
    if k == 0 or 0 in shape:  # nothing to add: every sum is an exact +0
        return np.zeros(shape, np.float32)
    grid_a = grid_a or F32_GRID
    grid_b = grid_b or F32_GRID
    fast = compiled.kernels() if a.dtype == b.dtype == np.float32 else None
    if fast is not None:
        return fast.matmul(a, b, grid_a, grid_b, grid_a != F32_GRID or grid_b != F32_GRID)
    a64 = a.astype(np.float64)
    b64 = b.astype(np.float64)
    kc = chunk_of(k)
    with np.errstate(over="ignore", invalid="ignore"):
        if kc == k:
            c = a64 @ b64
            na, nb = _norms(a64, -1), _norms(b64, -2)
            na *= 1 + 2.0**-30  # the norms' own rounding (a relative gamma_K < 2**-30 for K < 2**23)
            if na.size and nb.size and na.max() * nb.max() < 2.0**53 * grid_a[1] * grid_b[1]:
                out = np.empty(c.shape, np.float32)
                np.add(c, 0.0, out=out, casting="same_kind")  # every partial sum exact, in any order (+0, not -0)
                return out
            g2 = 2 * gamma(max(k - 1, 1))  # twice the bound: round_within decides within half its w
            out, ok = round_within_outer(c, na * g2, nb)
            mags = None
        else:
            c, mags = _chunked(a64, b64, kc)
            out, ok = round_within(c, mags * (2 * (gamma(kc) + gamma(-(-k // kc)))))
            na = nb = None
    if not ok.all():
        _settle(a, b, a64, b64, c, out, ~ok, (na, nb, mags), grid_a, grid_b)
    return out


F32_GRID = (23, 2.0**-149)


def _chunked(a64, b64, kc: int):
    """(the float64 product as a sum of chunk products, Cauchy-Schwarz bounds summed per chunk)."""
    k = a64.shape[-1]
    main = (k // kc) * kc
    c, ac, bc = chunk_sums(a64, b64, kc)
    na = np.sqrt(np.einsum("...cmk,...cmk->...mc", ac, ac))  # (..., M, nc)
    nb = np.sqrt(np.einsum("...ckn,...ckn->...cn", bc, bc))  # (..., nc, N)
    mags = na @ nb
    if main < k:
        mags += _norms(a64[..., main:], -1)[..., :, None] * _norms(b64[..., main:, :], -2)[..., None, :]
    return c, mags * (1 + 2.0**-30)  # the norms and their small product round too


def _quanta(x32: np.ndarray, grid) -> np.ndarray:
    """Per row of float32 ``x32`` (n, K): a power of two dividing every value of the row - the
    spacing of the grid at the row's smallest non-zero magnitude (2**(e - mantissa bits) in
    binade 2**e), never below the grid's quantum; an all-zero row gets the grid's quantum."""
    mant, q = grid
    m = x32.view(np.uint32) & np.uint32(0x7FFFFFFF)
    m = np.where(m == 0, np.uint32(0x7F7FFFFF), m).min(axis=1)  # an all-zero row: the largest
    e = np.maximum(m >> np.uint32(23), np.uint32(1)).astype(np.int64) - 127
    return np.maximum(np.ldexp(1.0, e - mant), q)


def _settle(a, b, a64, b64, c, out, todo, bounds, grid_a, grid_b) -> None:
    """The products ``round_within`` left open: IEEE's inf / NaN where the float64 product is not
    finite; c itself where every partial sum of that product is exact (its row's and column's
    values all multiples of powers of two whose product times 2**53 exceeds the magnitudes - a
    sum that lands exactly on a halfway point is such a sum, far more often than not); the exact
    sum of the products everywhere else."""
    idx = np.nonzero(todo)
    cv = c[idx]
    bad = ~np.isfinite(cv)
    if bad.any():
        v = cv[bad].astype(np.float32)
        v[np.isnan(v)] = np.float32(np.nan)
        out[tuple(i[bad] for i in idx)] = v
    fin = tuple(i[~bad] for i in idx)
    if not fin[0].size:
        return
    batch = np.broadcast_shapes(a64.shape[:-2], b64.shape[:-2])
    ab = np.broadcast_to(a64, batch + a64.shape[-2:])
    bt = np.swapaxes(np.broadcast_to(b64, batch + b64.shape[-2:]), -1, -2)  # (..., N, K): columns as rows
    na, nb, mags = bounds
    k = a64.shape[-1]
    step = max(1, _TERMS_AT_ONCE // k)
    n = fin[0].size
    quanta = None
    if grid_a != F32_GRID or grid_b != F32_GRID:  # low-precision values: exact sums are common
        quanta = _row_col_quanta(a, b, batch, grid_a, grid_b)
    for lo in range(0, n, step):
        sel = tuple(i[lo:lo + step] for i in fin)
        rest = slice(None)
        if quanta is not None:
            ra, cb = sel[:-1], sel[:-2] + (sel[-1],)  # (batch..., i) and (batch..., j)
            if mags is None:
                nab = (np.broadcast_to(na, batch + na.shape[-1:])[ra] *
                       np.broadcast_to(nb, batch + nb.shape[-1:])[cb])
            else:
                nab = mags[sel]
            exact = nab < 2.0**53 * quanta[0][ra] * quanta[1][cb]
            if exact.any():
                out[tuple(i[exact] for i in sel)] = (c[tuple(i[exact] for i in sel)] + 0.0).astype(np.float32)
            rest = ~exact
        sr = tuple(i[rest] for i in sel)
        if sr[0].size:
            out[sr] = round_rows(ab[sr[:-1]] * bt[sr[:-2] + (sr[-1],)])


def _row_col_quanta(a, b, batch, grid_a, grid_b):
    """The quanta (:func:`_quanta`) of every row of a and every column of b, broadcast to the batch
    (O(MK + KN) work, next to the product's MNK)."""
    qa = _quanta(np.ascontiguousarray(a).reshape(-1, a.shape[-1]), grid_a).reshape(a.shape[:-1])
    bt32 = np.ascontiguousarray(np.swapaxes(b, -1, -2))
    qb = _quanta(bt32.reshape(-1, bt32.shape[-1]), grid_b).reshape(bt32.shape[:-1])
    return np.broadcast_to(qa, batch + a.shape[-2:-1]), np.broadcast_to(qb, batch + b.shape[-1:])
