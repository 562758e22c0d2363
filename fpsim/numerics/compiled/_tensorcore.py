"""The compiled path of :mod:`fpsim.tensorcore`: the chain of tensor-core steps (MMA-Sim's T-FDPA)
as loops, for every architecture, input format and accumulator of ``tensorcore.matmul``.

The steps are the numpy model's (``tensorcore._block``), for every output and K slice of L elements:
the largest of the products' exponents e_a + e_b and the accumulator's, e_max (a zero product and a
zero accumulator take the zero exponent where the numpy model counts it); every product, exact,
times 2^(F - e_max), truncated toward zero; the same for the accumulator; the integers added; the sum
times 2^(e_max - F) rounded once by the instruction's output rounding.  Nothing is reassociated in a
way that could change a bit (no fastmath): every truncated term is an integer below 2^(F + 2), so
L + 1 of them add exactly in float64 (in float32 when F = 13: below 2^21), in any order, and an inf
or NaN among them gives the IEEE answer in any order.  The running accumulator is kept as float64,
which holds every float32 and float16 value exactly.

The products are formed in the operands' work dtype: float32 where every nonzero product's exponent
lies in [F - 127, 126] (each product of two inputs of at most 11 significant bits is then exact and
normal, and the scale 2^(F - max(e_max, F - 127)) a normal float32: what ``tensorcore._prepare``
decides), else float64 (always exact: the inputs have at most 24 significant bits and exponents in
[-149, 127]).  The loops run along N, four elements of K at a time, and vectorize.
"""

from __future__ import annotations

import numpy as np

from ._exact import jit

__all__ = ["LOW", "COLUMN_BYTES", "rows", "cols", "pack", "unpack", "steps", "ROUND_RZ32", "ROUND_RZ13", "ROUND_RNE16"]

LOW = -(1 << 14)  # the exponent given to a zero or non-finite element: any sum with it is below every real one, in int16
COLUMN_BYTES = 1 << 15  # a slice of a tile of b with its exponents (L x W x 8 bytes) at most: in L1
_TILE = 1 << 17  # bytes of a block of rows' accumulator and sums (rows x columns x (8 + 4))
ROUND_RZ32, ROUND_RZ13, ROUND_RNE16 = 0, 1, 2
_SIGN64 = np.int64(-0x8000000000000000)
_MAG64 = np.int64(0x7FFFFFFFFFFFFFFF)
_INF64 = np.int64(0x7FF0000000000000)
_F16_OVER = np.int64(0x40EFFE0000000000)  # 65520.0
_F16_NORMAL = np.int64(1023 - 14) << 52  # 2^-14
_F32_OVER = np.int64(1023 + 128) << 52
_F32_NORMAL = np.int64(1023 - 126) << 52
_KEEP23 = ~((np.int64(1) << 29) - 1)
_KEEP13 = ~((np.int64(1) << 39) - 1)
_KEEP10 = ~((np.int64(1) << 42) - 1)
_HALF42 = (np.int64(1) << 41) - 1


@jit(inline=True)
def _exponent(bits, e_sub):
    """MMA-Sim's exponent of the float32 with the int32 ``bits``: floor(log2 |x|), at least
    ``e_sub`` (a subnormal's); :data:`LOW` for a zero or a non-finite value."""
    f = (bits >> 23) & 0xFF
    e = max(max(f, 1) - 127, e_sub)
    return np.int16(LOW) if ((bits & 0x7FFFFFFF) == 0) | (f == 255) else np.int16(e)


@jit()
def _values(xr, mask, e_sub, vr, er, lo, hi):
    """The bits of xr (int32, 1-D) under ``mask`` into vr and their exponents into er (int16):
    MMA-Sim's, floor(log2 |x|) but at least ``e_sub`` (a subnormal's), :data:`LOW` for a zero or a
    non-finite value; returns the running smallest and largest exponent of a nonzero finite
    value.  (A function of its own, called row by row: the loop vectorizes.)"""
    for t in range(xr.shape[0]):
        bits = xr[t] & mask
        f = (bits >> 23) & 0xFF
        e = max(max(f, 1) - 127, e_sub)
        er[t] = np.int16(LOW) if ((bits & 0x7FFFFFFF) == 0) | (f == 255) else np.int16(e)
        vr[t] = bits
    for t in range(xr.shape[0]):
        e = er[t]
        hi = max(hi, e)
        lo = min(lo, e if e != LOW else np.int16(-LOW))
    return lo, hi


@jit()
def rows(x, tf32, e_sub, va, ea):
    """The left operand of :func:`steps`: va (B, M, Kp) float32 and its exponents ea (int16) from
    the float32 x (B, M, K) (C-contiguous), K padded with zeros;
    ``tf32``: the top 19 bits of each value (the tensor core's read).  Returns the smallest and
    largest exponent of a nonzero finite value (LOW, LOW for none)."""
    nb, m, kp = va.shape
    k = x.shape[2]
    xb, vb = x.view(np.int32), va.view(np.int32)
    mask = np.int32(-8192) if tf32 else np.int32(-1)  # 0xFFFFE000
    lo, hi = np.int16(-LOW), np.int16(LOW)
    for q in range(nb):
        for i in range(m):
            lo, hi = _values(xb[q, i], mask, e_sub, vb[q, i, :k], ea[q, i, :k], lo, hi)
            vb[q, i, k:] = 0
            ea[q, i, k:] = LOW
    return (lo if hi > LOW else np.int16(LOW)), hi


@jit()
def cols(x, tf32, e_sub, vb, eb):
    """The right operand of :func:`steps`: vb (B, T, Kp / L, L, W) float32, its N columns in T
    tiles of W, and its exponents eb (int16) from the float32 x (B, K, N) (C-contiguous), K and
    the last tile padded with zeros; ``tf32`` and the result as :func:`rows`.  (A transposed
    operand is copied by numpy first: numba's transposed copy takes seconds to compile.)"""
    nb, nt, ns, L, w = vb.shape
    k, n = x.shape[1], x.shape[2]
    xb, vbb = x.view(np.int32), vb.view(np.int32)
    mask = np.int32(-8192) if tf32 else np.int32(-1)
    lo, hi = np.int16(-LOW), np.int16(LOW)
    for q in range(nb):
        for tile in range(nt):
            c0 = tile * w
            cw = min(w, n - c0)
            for s in range(ns):
                for t in range(L):
                    kk = s * L + t
                    if kk < k:
                        lo, hi = _values(xb[q, kk, c0:c0 + cw], mask, e_sub, vbb[q, tile, s, t, :cw],
                                         eb[q, tile, s, t, :cw], lo, hi)
                        vbb[q, tile, s, t, cw:] = 0
                        eb[q, tile, s, t, cw:] = LOW
                    else:
                        vbb[q, tile, s, t] = 0
                        eb[q, tile, s, t] = LOW
    return (lo if hi > LOW else np.int16(LOW)), hi


@jit()
def pack(c, tr, cv):
    """The accumulator of :func:`steps`: cv (B, T, R, W) float64 from the float32 c (B, R, N), or
    with ``tr`` c (B, N, R), its N columns in T tiles of W, the last padded with zeros."""
    nb, nt, r, w = cv.shape
    n = c.shape[1] if tr else c.shape[2]
    for q in range(nb):
        for tile in range(nt):
            for i in range(r):
                for j in range(w):
                    col = tile * w + j
                    v = 0.0
                    if col < n:
                        v = np.float64(c[q, col, i] if tr else c[q, i, col])
                    cv[q, tile, i, j] = v


@jit()
def unpack(cv, tr, out):
    """The float32 result out (B, R, N), or with ``tr`` (B, N, R), from :func:`steps`'s cv (whose
    values are float32 values): a zero as +0, a NaN as 0x7FFFFFFF (MMA-Sim's)."""
    nb, nt, r, w = cv.shape
    n = out.shape[1] if tr else out.shape[2]
    ob = out.view(np.int32)
    for q in range(nb):
        for tile in range(nt):
            for i in range(r):
                for j in range(min(w, n - tile * w)):
                    col = tile * w + j
                    v = cv[q, tile, i, j]
                    if tr:
                        out[q, col, i] = np.float32(v + 0.0)
                        if v != v:
                            ob[q, col, i] = 0x7FFFFFFF
                    else:
                        out[q, i, col] = np.float32(v + 0.0)
                        if v != v:
                            ob[q, i, col] = 0x7FFFFFFF


@jit(inline=True)
def _finish(acc, back, cv, cb, q, tile, i, w, mode):
    """Into ``cv[q, tile, i, :w]`` (``cb``: cv as int64 bits): the exact sums acc[q, tile, i, :w]
    times ``back`` (2^(e_max - F)), rounded by the instruction's output rounding: toward zero to 24 (ROUND_RZ32) or 14 (ROUND_RZ13)
    significant bits with float32's exponent range (subnormals on the grid 2^(-126 - fraction
    bits), +-inf at or beyond 2^128), or to nearest even into float16 (ROUND_RNE16), the results
    float64s.  A NaN stays a NaN, a zero keeps its sign (the caller settles both).  Two loops
    of selects, no branch, neither reading the memory through one type and writing it through the
    other (the overlap would make each loop run scalar): they vectorize."""
    if mode == ROUND_RNE16:
        for j in range(w):  # float16 subnormals: the grid 2^-24 (to nearest even; 2^-14 is exact below)
            v = np.float64(acc[q, tile, i, j]) * back[j]  # exact
            cv[q, tile, i, j] = np.rint(v * 2.0**24) * 2.0**-24 if abs(v) < 2.0**-14 else v
        for j in range(w):  # 10 fraction bits: the pattern rounded to nearest even at bit 42 (a carry is exact)
            vb = cb[q, tile, i, j]
            mag = vb & _MAG64
            r = (vb & _SIGN64) | ((mag + (_HALF42 + ((mag >> 42) & 1))) & _KEEP10)
            r = (vb & _SIGN64) | _INF64 if mag >= _F16_OVER else r  # from halfway above float16's largest
            r = vb if (mag < _F16_NORMAL) | (mag >= _INF64) else r
            cb[q, tile, i, j] = r
        return
    fb = 23 if mode == ROUND_RZ32 else 13
    keep = _KEEP23 if mode == ROUND_RZ32 else _KEEP13
    up, down = 2.0 ** (126 + fb), 2.0 ** -(126 + fb)
    for j in range(w):  # float32 subnormals: the grid 2^(-126 - fraction bits)
        v = np.float64(acc[q, tile, i, j]) * back[j]  # exact
        cv[q, tile, i, j] = np.trunc(v * up) * down if abs(v) < 2.0**-126 else v
    for j in range(w):  # normals: the low fraction bits cleared; at or beyond 2^128: inf
        vb = cb[q, tile, i, j]
        mag = vb & _MAG64
        r = (vb & _SIGN64) | _INF64 if mag >= _F32_OVER else vb & keep
        cb[q, tile, i, j] = vb if (mag < _F32_NORMAL) | (mag >= _INF64) else r


@jit(inline=True)
def _exponents(cb, ea, es, e, pw, sc, bk, q, tile, i, k0, L, w, F, pmin, c_zero, c_min, c_inf):
    """One row's step of :func:`steps`: e_max of each output into ``e`` (the accumulator's exponent
    from its bits ``cb``, then the products' ea + es), and from it the products' scale
    2^(F - max(e_max, pmin)) into ``pw``, the accumulator's 2^(F - e_max) into ``sc`` and the way
    back 2^(e_max - F) into ``bk``, each as float64 bits."""
    for j in range(w):  # the accumulator's exponent
        mag = cb[q, tile, i, j] & _MAG64
        f = np.int32(mag >> 52)
        ce = max(f - 1023, c_min)
        ce = c_zero if mag == 0 else ce
        e[j] = c_inf if f == 0x7FF else ce
    for t in range(0, L, 4):  # the products' exponents (int32 sums: numba's are int64)
        x0, x1, x2, x3 = ea[q, i, k0 + t], ea[q, i, k0 + t + 1], ea[q, i, k0 + t + 2], ea[q, i, k0 + t + 3]
        for j in range(w):
            u = max(max(np.int16(x0 + es[t, j]), np.int16(x1 + es[t + 1, j])),
                    max(np.int16(x2 + es[t + 2, j]), np.int16(x3 + es[t + 3, j])))
            e[j] = max(e[j], u)
    for j in range(w):
        pw[j] = np.int64(F - max(e[j], pmin) + 1023) << 52
        sc[j] = np.int64(F - e[j] + 1023) << 52
        bk[j] = np.int64(e[j] - F + 1023) << 52


@jit()
def steps(a, ea, b, eb, cv, F, pmin, c_zero, c_min, c_inf, mode, acc):
    """``cv <- a @ b + cv`` as the chain of steps along K, in place, in tiles of columns.

    a (B, M, K): the left operand's values in the work dtype (float32 or float64), K a whole
    number of L-element slices (padded with zeros), L a multiple of 4; b (B, T, K / L, L, W): the
    right operand's, its N columns in T tiles of W (padded with zeros); ea, eb: their exponents
    (int32, LOW for a zero or non-finite value, :func:`exponents`); cv (B, T, M, W) float64: the
    accumulator.  F: the fraction bits; pmin: the least alignment exponent of the products' scale
    (below every nonzero product's exponent); c_zero, c_min, c_inf: the accumulator's exponent
    when it is zero (the zero exponent, or c_min where the model leaves zeros out), its least one
    (a subnormal's), when it is inf or NaN; mode: the output rounding (ROUND_*); acc: cv's shape
    in float32 (F = 13 with float32 operands) or float64, where the terms add.

    A zero product is left out of e_max (a zero or non-finite element's exponent is LOW): the zero
    exponent it would bring never exceeds the accumulator's, which is the zero exponent itself for
    a zero accumulator and at least c_min, above every architecture's zero exponent, otherwise.
    (A non-finite product makes the sum inf or NaN whatever e_max is.)

    A block of rows takes each step in turn, so that a slice of b and its exponents stay in L1
    while the block's rows use it, and the block's accumulator in L2.  (No view is taken inside
    the loops over rows, whose reference counts cost more than a row's step; the column index
    starts at 0, so the indexing needs no wraparound test and the loops vectorize.)"""
    nb, m, k = a.shape
    nt, ns, L, w = b.shape[1], b.shape[2], b.shape[3], b.shape[4]
    rt = max(1, _TILE // (12 * w))
    e = np.empty(w, np.int16)
    sp = np.empty(w, a.dtype)  # 2^(F - max(e_max, pmin)): the products' scale
    pw = np.empty(w, np.int64)  # as float64 bits
    pwf = pw.view(np.float64)
    sc = np.empty(w, np.int64)  # the accumulator's scale 2^(F - e_max), as bits
    scf = sc.view(np.float64)
    bk = np.empty(w, np.int64)  # 2^(e_max - F), as bits
    bkf = bk.view(np.float64)
    cb = cv.view(np.int64)
    for q in range(nb):
        for tile in range(nt):
            for i0 in range(0, m, rt):
                for s in range(ns):
                    bs, es = b[q, tile, s], eb[q, tile, s]
                    k0 = s * L
                    for i in range(i0, min(m, i0 + rt)):
                        _exponents(cb, ea, es, e, pw, sc, bk, q, tile, i, k0, L, w, F, pmin, c_zero, c_min, c_inf)
                        for j in range(w):  # the accumulator, aligned and truncated
                            sp[j] = pwf[j]
                            acc[q, tile, i, j] = np.trunc(cv[q, tile, i, j] * scf[j])
                        for t in range(0, L, 4):
                            x0, x1, x2, x3 = a[q, i, k0 + t], a[q, i, k0 + t + 1], a[q, i, k0 + t + 2], a[q, i, k0 + t + 3]
                            for j in range(w):  # each term in acc's dtype: exact sums
                                f = sp[j]
                                v = acc[q, tile, i, j] + np.trunc((x0 * bs[t, j]) * f)
                                v = v + np.trunc((x1 * bs[t + 1, j]) * f)
                                v = v + np.trunc((x2 * bs[t + 2, j]) * f)
                                acc[q, tile, i, j] = v + np.trunc((x3 * bs[t + 3, j]) * f)
                        _finish(acc, bkf, cv, cb, q, tile, i, w, mode)
