"""The compiled path of :func:`fpsim.numerics.matmul_f32`: the same definition and the same steps
as ``matmul.py`` (one float64 BLAS product, the Cauchy-Schwarz bound, the interval test, the
sums it leaves open settled by quanta or summed exactly), with the passes around the dgemm fused:

- :func:`rows_to_f64` / :func:`cols_to_f64`: the float64 copy the dgemm needs and, in the same
  pass, the sums of squares of the rows of a and the columns of b (per chunk of K for a long K)
  and, given a grid, their quanta (``matmul._quanta``).  The sums of squares are the only code
  here with fastmath (reassociation and contraction): a sum of squares in any order is within
  gamma_K of the exact one, which the bound allows for, as it does for einsum's;
- :func:`finish`: per block of output rows, w, the two rounded ends and their test in one loop,
  then each entry left open settled at once, as ``matmul._settle`` settles it: IEEE's inf / NaN;
  c itself where the row's and column's quanta make the float64 sum exact; else the exact sum of
  its K products (``_exact``: a compensated sum where its bound decides, else Shewchuk's).

Every result is the exact sum rounded once, decided as the numpy path decides it (its bound from
norms summed in another order, which only moves which few entries the test leaves open), so the
bits are the numpy path's.  An operand stored transposed (a Fortran-ordered matrix, as ``w.T``
is) is read as it lies, never copied: its transpose is C-ordered, and the kernels take a flag
saying which index is which; a tall C-ordered a goes in blocks of rows (:func:`fused_matmul`).
"""

from __future__ import annotations

import math

import numpy as np

from ..checked import gamma
from ..chunks import chunk_of, chunk_sums
from ._exact import CAPACITY, decide_row, grow, jit, round_compensated, round_partials, two_sum_step

__all__ = ["fused_matmul"]

_BLOCK = 4096  # entries a pass of finish: their bounds and flags stay in L1
_FM = {"reassoc", "contract"}  # for the sums of squares only (see the module docstring)


@jit()
def _quantum(mn, mant, q):
    """``matmul._quanta`` of a row whose smallest nonzero magnitude has the bits mn + 1 (mn + 1 =
    2**32: none), capped at the largest finite one - which differs from ``_quanta`` only for a row
    holding inf or NaN, whose sums are never finite."""
    e = max(min(np.int64(mn) + 1, 0x7F7FFFFF) >> 23, 1) - 127
    return max(math.ldexp(1.0, e - mant), q)


@jit(fastmath=_FM)
def rows_to_f64(x, kc, mant, q):
    """(float64 copy of x (B, R, K), sums of squares of each row's chunks of kc: (B, R, ceil(K / kc)),
    each row's quantum for the grid (mant, q) (none if mant < 0): (B, R))."""
    nb, r, k = x.shape
    nch = (k + kc - 1) // kc
    out, ss, qs = np.empty((nb, r, k)), np.empty((nb, r, nch)), np.zeros((nb, r))
    bits = x.view(np.uint32)
    for b in range(nb):
        for i in range(r):
            xr, orow = x[b, i], out[b, i]
            for c in range(nch):
                xs, os_ = xr[c * kc:(c + 1) * kc], orow[c * kc:(c + 1) * kc]
                acc = 0.0
                for j in range(xs.shape[0]):
                    v = np.float64(xs[j])
                    os_[j] = v
                    acc += v * v
                ss[b, i, c] = acc
            if mant >= 0:
                br = bits[b, i]
                mn = np.uint64(0xFFFFFFFF)
                for j in range(br.shape[0]):
                    mn = min(mn, (br[j] & np.uint32(0x7FFFFFFF)) - np.uint32(1))  # a zero wraps to the top
                qs[b, i] = _quantum(mn, mant, q)
    return out, ss, qs


@jit(fastmath=_FM)
def cols_to_f64(x, kc, mant, q):
    """(float64 copy of x (B, K, C), sums of squares of each column's chunks of kc: (B, ceil(K / kc), C),
    each column's quantum for the grid (mant, q) (none if mant < 0): (B, C))."""
    nb, k, n = x.shape
    out, ss, qs = np.empty((nb, k, n)), np.zeros((nb, (k + kc - 1) // kc, n)), np.zeros((nb, n))
    bits = x.view(np.uint32)
    mins = np.empty(n, np.uint32)
    for b in range(nb):
        mins[:] = np.uint32(0xFFFFFFFF)
        for i in range(k):
            xr, orow, sr = x[b, i], out[b, i], ss[b, i // kc]
            for j in range(xr.shape[0]):
                v = np.float64(xr[j])
                orow[j] = v
                sr[j] += v * v
            if mant >= 0:
                br = bits[b, i]
                for j in range(br.shape[0]):
                    mins[j] = min(mins[j], (br[j] & np.uint32(0x7FFFFFFF)) - np.uint32(1))
        if mant >= 0:
            for j in range(n):
                qs[b, j] = _quantum(np.uint64(mins[j]), mant, q)
    return out, ss, qs


@jit()
def _exact_entry(av, bv, p, tmp):
    """The exact sum of av[k] * bv[k] (float32 rows, every product exact in float64), rounded to float32:
    a compensated sum (TwoSum) where its error bound decides (``_exact.round_compensated``), else
    Shewchuk's partials."""
    s = comp = eabs = 0.0
    for k in range(av.shape[0]):
        s, comp, eabs = two_sum_step(s, comp, eabs, np.float64(av[k]) * np.float64(bv[k]))
    r, ok = round_compensated(s, comp, eabs, av.shape[0])
    if ok:
        return r
    n = np.int64(0)
    for k in range(av.shape[0]):
        x = np.float64(av[k]) * np.float64(bv[k])
        if x != 0.0:
            n = grow(p, n, x)
    return round_partials(p, n, tmp)


@jit(inline=True)
def _settle(y, ai, i, bi, j, a, ta, b, tb, p, tmp):
    """One entry left open: IEEE's inf / NaN, else the exact sum of its products."""
    if not math.isfinite(y):
        return np.float32(np.nan) if math.isnan(y) else np.float32(y)
    return _exact_entry(a[ai, :, i] if ta else a[ai, i], b[bi, j] if tb else b[bi, :, j], p, tmp)


@jit()
def _bounds(w, ex, i0, rows, t, ai, bi, na, nb, g2, mags, const, thr, qb):
    """w, as (rows, N), for the output rows i0 .. i0 + rows of matrix t, and where thr has columns
    ex, the quanta's exactness test (na[i] nb[j], or mags, below thr[i] qb[j]).  (Indexed, not
    sliced, row by row: a slice costs more than a short row's work.)"""
    n = w.shape[1]
    quanta = thr.shape[1] > 0
    for r in range(rows):
        i = i0 + r
        if mags.shape[0] == 0:
            na_i, wa = na[ai, i], na[ai, i] * g2
            for j in range(n):
                w[r, j] = wa * nb[bi, j]
            if quanta:
                ti = thr[ai, i]
                for j in range(n):
                    ex[r, j] = na_i * nb[bi, j] < ti * qb[bi, j]
        else:
            for j in range(n):
                w[r, j] = mags[t, i, j] * const
            if quanta:
                ti = thr[ai, i]
                for j in range(n):
                    ex[r, j] = mags[t, i, j] < ti * qb[bi, j]


@jit()
def _decide_or_exact(y, w, ex, out, flag):
    """decide_row, then, among the entries it leaves open, c itself where ex says the float64 sum
    is exact (and it is finite): not flagged.  (One loop, no branch: in vector registers.)"""
    cnt = 0
    for j in range(y.shape[0]):
        hi = np.float32(y[j] + w[j])
        lo = np.float32(y[j] - w[j])
        bad = not ((hi == lo) & (math.copysign(1.0, hi) == math.copysign(1.0, lo)))
        exact = bad & ex[j] & math.isfinite(y[j])
        out[j] = np.float32(y[j] + 0.0) if exact else lo
        flag[j] = bad & (not exact)
        cnt += flag[j]
    return cnt


@jit()
def finish(c, out, na, nb, g2, mags, const, thr, qb, ia, ib, a, ta, b, tb):
    """Round c (T, M, N) into out: the interval test with w = na[i] g2 nb[j] (mags empty) or
    mags[t, i, j] const; each entry it leaves open is c itself where thr (2**53 times the rows'
    quanta; no columns: no quanta) makes the float64 sum exact (:func:`_bounds`), else settled by
    :func:`_settle`.  a: (A, M, K), or (A, K, M) if ta; b: (B, K, N), or (B, N, K) if tb; ia / ib:
    each output matrix's operands."""
    nt, m, n = c.shape
    rows = max(1, _BLOCK // n)
    cf, of = c.reshape(-1), out.reshape(-1)
    w, ex, flag = np.empty((rows, n)), np.zeros((rows, n), np.bool_), np.empty(rows * n, np.bool_)
    wf, exf = w.reshape(-1), ex.reshape(-1)
    p, tmp = np.empty(CAPACITY), np.empty(CAPACITY)
    for t in range(nt):
        ai, bi = ia[t], ib[t]
        for i0 in range(0, m, rows):
            base, cnt = (t * m + i0) * n, (min(m, i0 + rows) - i0) * n
            _bounds(w, ex, i0, cnt // n, t, ai, bi, na, nb, g2, mags, const, thr, qb)
            ys, os_ = cf[base:base + cnt], of[base:base + cnt]
            if thr.shape[1]:
                left = _decide_or_exact(ys, wf[:cnt], exf[:cnt], os_, flag)
            else:
                left = decide_row(ys, wf[:cnt], os_, flag)
            if left == 0:
                continue
            for r in range(cnt // n):
                for j in range(n):
                    if flag[r * n + j]:
                        os_[r * n + j] = _settle(ys[r * n + j], ai, i0 + r, bi, j, a, ta, b, tb, p, tmp)


def _as3(x):
    """(x as a C-ordered float32 stack (S, R, C), transposed?): x (..., R, C) itself, or its
    transpose (S, C, R) where that is C-ordered (a Fortran-ordered matrix), else a C-ordered copy
    (a read-only x too: the kernels are compiled for writable arrays only)."""
    r, c = x.shape[-2:]
    if not x.flags.writeable:
        x = np.array(x, order="C")
    if x.flags.c_contiguous:
        return x.reshape(-1, r, c), False
    xt = np.swapaxes(x, -1, -2)
    if xt.flags.c_contiguous:
        return xt.reshape(-1, c, r), True
    return np.ascontiguousarray(x).reshape(-1, r, c), False


def _operand(x, kc, rows: bool, grid):
    """(x as float64 in x's shape, the sums of squares of its rows (rows=True: (S, R, chunks)) or
    columns ((S, chunks, C)), their quanta ((S, R) or (S, C); grid None: none), the float32 stack
    and its flag as :func:`_as3` gives them)."""
    x3, tr = _as3(x)
    mant, q = (-1, 0.0) if grid is None else (int(grid[0]), float(grid[1]))
    x64, ss, qs = (rows_to_f64 if rows != tr else cols_to_f64)(x3, kc, mant, q)
    if tr:
        x64 = np.swapaxes(x64.reshape(x.shape[:-2] + x64.shape[-2:]), -1, -2)
        return x64, np.swapaxes(ss, -1, -2), qs, x3, tr
    return x64.reshape(x.shape), ss, qs, x3, tr


_MIN_ROWS, _BLOCK_BYTES = 512, 2**20  # a tall a's blocks: their float64 rows and product in 1 MiB (L2)
_ZERO = np.zeros(1, np.int64)
_NO_MAGS = np.zeros((0, 0, 0))
_NO_NORMS = np.zeros((1, 1))
_NO_QUANTA = np.zeros((1, 0))


def _which(shape, batch):
    """Each of the batch's matrices: the index of its operand in a stack of ``shape``'s matrices."""
    if not batch:
        return _ZERO
    return np.array(np.broadcast_to(np.arange(math.prod(shape)).reshape(shape), batch).reshape(-1), np.int64)


def fused_matmul(a, b, grid_a, grid_b, quanta: bool) -> np.ndarray:
    """``matmul.matmul_f32`` for float32 a (..., M, K) and b (..., K, N), K > 0 and nothing empty;
    ``quanta``: whether a grid is not float32's (the exactness test by quanta is worth making).
    A tall C-ordered a (two matrices, one dgemm) goes in blocks of rows whose float64 copy and
    product stay in L2: the same sums, the same bounds, row by row."""
    k, m, n = a.shape[-1], a.shape[-2], b.shape[-1]
    kc = chunk_of(k)
    bop = _operand(b, kc, False, grid_b if quanta else None)
    rows = max(_MIN_ROWS, _BLOCK_BYTES // (8 * (k + n)))
    out = np.empty(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (m, n), np.float32)
    if kc == k and a.ndim == b.ndim == 2 and m >= 2 * rows and a.flags.c_contiguous:
        for i0 in range(0, m, rows):
            _product(a[i0:i0 + rows], bop, grid_a, grid_b, quanta, out[i0:i0 + rows])
        return out
    return _product(a, bop, grid_a, grid_b, quanta, out)


def _product(a, bop, grid_a, grid_b, quanta, out) -> np.ndarray:
    """out = the correctly rounded a @ b, b given as :func:`_operand` makes it."""
    k, m = a.shape[-1], a.shape[-2]
    b64, sb, qb, b3, tb = bop
    n, kc = b64.shape[-1], chunk_of(k)
    batch = out.shape[:-2]
    a64, sa, qa, a3, ta = _operand(a, kc, True, grid_a if quanta else None)
    thr, qb = (qa * 2.0**53, qb) if quanta else (_NO_QUANTA, _NO_QUANTA)
    with np.errstate(over="ignore", invalid="ignore"):
        if kc == k:
            c = a64 @ b64
            na = np.sqrt(sa[..., 0])
            na *= 1 + 2.0**-30  # the norms' own rounding (a relative gamma_K < 2**-30 for K < 2**23)
            nb = np.sqrt(sb[:, 0])
            if na.max() * nb.max() < 2.0**53 * grid_a[1] * grid_b[1]:
                np.add(c, 0.0, out=out, casting="same_kind")  # every partial sum exact, in any order (+0, not -0)
                return out
            g2, mags, const = 2 * gamma(max(k - 1, 1)), _NO_MAGS, 0.0
        else:
            c = chunk_sums(a64, b64, kc)[0]
            nch = sa.shape[-1]
            mags = np.sqrt(sa).reshape(a.shape[:-2] + (m, nch)) @ np.sqrt(sb).reshape(b64.shape[:-2] + (nch, n))
            mags = np.ascontiguousarray((mags * (1 + 2.0**-30)).reshape(-1, m, n))  # the norms and their product round
            na, nb, g2, const = _NO_NORMS, _NO_NORMS, 0.0, 2 * (gamma(kc) + gamma(nch))
        finish(np.ascontiguousarray(c).reshape(-1, m, n), out.reshape(-1, m, n), na, nb, g2, mags, const, thr, qb,
               _which(a.shape[:-2], batch), _which(b64.shape[:-2], batch), a3, ta, b3, tb)
    return out
