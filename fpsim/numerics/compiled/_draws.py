"""numpy's PCG64 draws, the same numbers, faster: ``Generator.random(n)``'s doubles (stochastic
rounding's uniforms: ``fpsim.formats.blockcodes.uniforms``) and ``bit_generator.random_raw(n)``'s words
(few-bit stochastic rounding's random bits: ``fpsim.formats.sr.draw_bits``), the generator left in the
state numpy leaves it in.

PCG64 as numpy defines it (numpy/random/src/pcg64: ``pcg_setseq_128_xsl_rr_64``): a 128-bit LCG
s -> s * M + inc (mod 2**128), each output taken from the advanced state by XSL-RR (the high and low
halves xored, rotated right by the top six bits), a double being (output >> 11) * 2**-53.  The LCG's
chain is serial; here 64 lanes step it at once, lane j starting at step j + 1 and each advancing 64
steps a time by the composed map s -> s * A + C, so that the lanes' loop vectorises.  The 128-bit
products are four 32-bit partial products of the low halves and two low 64-bit ones, all in uint64
(wrapping, as the C code's arithmetic does).
"""

from __future__ import annotations

import numpy as np

from ._exact import jit

__all__ = ["DRAWS"]

_U64 = np.uint64
LANES = 64


@jit(inline=True)
def _mul128(ah, al, bh, bl):
    """(high, low) 64-bit halves of (ah 2**64 + al) (bh 2**64 + bl) mod 2**128."""
    m32 = _U64(0xFFFFFFFF)
    a0, a1, b0, b1 = al & m32, al >> _U64(32), bl & m32, bl >> _U64(32)
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = (p00 >> _U64(32)) + (p01 & m32) + (p10 & m32)
    hi = p11 + (p01 >> _U64(32)) + (p10 >> _U64(32)) + (mid >> _U64(32))
    return _U64(hi + al * bh + ah * bl), _U64(al * bl)


@jit(inline=True)
def _affine(h, lw, ah, al, ch, cl):
    """(high, low) of s A + C mod 2**128, s = h 2**64 + lw."""
    ph, pl = _mul128(h, lw, ah, al)
    lo = _U64(pl + cl)
    return _U64(ph + ch + (_U64(1) if lo < pl else _U64(0))), lo


@jit()
def _fill(sh, sl, ah, al, ch, cl, out, raw):
    """Into ``out`` (float64 or, ``raw``, uint64; a multiple of the lanes long): lane j's output at each
    of its steps, a double or the raw word, lane j holding in ``sh`` / ``sl`` the state it outputs from;
    each lane then advances by (A, C).  Returns the state of the last lane at the last step (the
    generator's state after out.size outputs)."""
    nl = sh.shape[0]
    scale = 1.0 / 9007199254740992.0
    lh, ll = sh[nl - 1], sl[nl - 1]
    for i in range(out.shape[0] // nl):
        lh, ll = sh[nl - 1], sl[nl - 1]
        for j in range(nl):
            h, lw = sh[j], sl[j]
            x = h ^ lw
            rot = h >> _U64(58)
            v = (x >> rot) | (x << ((_U64(64) - rot) & _U64(63)))
            if raw:
                out[i * nl + j] = v
            else:
                out[i * nl + j] = np.float64(np.int64(v >> _U64(11))) * scale
            sh[j], sl[j] = _affine(h, lw, ah, al, ch, cl)
    return lh, ll


_MULT = 0x2360ED051FC65DA44385DF649FCCF645  # PCG's default 128-bit multiplier (numpy's PCG64)
_MASK = (1 << 128) - 1
_JUMPS: dict[int, tuple] = {}


@jit()
def _start(h, lw, mh, ml, ih, il, sh, sl):
    """Into ``sh`` / ``sl``: the states 1 .. len(sh) steps of s -> s M + inc after s = h 2**64 + lw."""
    for j in range(sh.shape[0]):
        h, lw = _affine(h, lw, mh, ml, ih, il)
        sh[j], sl[j] = h, lw


def _halves(v: int) -> tuple:
    return _U64(v >> 64), _U64(v & (2**64 - 1))


def _lanes(s: int, inc: int):
    """(lane states' high and low halves: steps 1 .. LANES from s, the 64-step map's A and C), the map
    kept per ``inc`` (a generator's own constant)."""
    jump = _JUMPS.get(inc)
    if jump is None:
        a, c = 1, 0
        for _ in range(LANES):
            a, c = (a * _MULT) & _MASK, (c * _MULT + inc) & _MASK
        jump = _JUMPS[inc] = (*_halves(a), *_halves(c))
        if len(_JUMPS) > 64:
            _JUMPS.pop(next(iter(_JUMPS)))
    sh, sl = np.empty(LANES, np.uint64), np.empty(LANES, np.uint64)
    _start(*_halves(s), *_halves(_MULT), *_halves(inc), sh, sl)
    return sh, sl, jump


def _draw(rng: np.random.Generator, n: int, raw: bool) -> np.ndarray:
    """n draws of ``rng`` (a Generator on numpy's PCG64), whole rounds of the lanes here and the rest by
    numpy itself, under the bit generator's lock: the doubles of ``rng.random(n)`` or (``raw``) the
    words of ``random_raw(n)``, ``rng`` left where numpy leaves it (a buffered 32-bit half kept)."""
    bg = rng.bit_generator
    with bg.lock:
        st = bg.state
        sh, sl, (ah, al, ch, cl) = _lanes(st["state"]["state"], st["state"]["inc"])
        out = np.empty(n, np.uint64 if raw else np.float64)
        m = n - n % LANES
        hi, lo = _fill(sh, sl, ah, al, ch, cl, out[:m], raw)
        st["state"]["state"] = (int(hi) << 64) | int(lo)
        bg.state = st
    if m < n:
        out[m:] = bg.random_raw(n - m) if raw else rng.random(n - m)
    return out


def pcg64_uniforms(rng: np.random.Generator, n: int) -> np.ndarray:
    """``rng.random(n)`` (float64), the same values and ``rng`` left in the same state, for a Generator
    on numpy's PCG64 (below 64 values: ``rng.random`` itself)."""
    return rng.random(n) if n < LANES else _draw(rng, n, False)


def pcg64_raw(rng: np.random.Generator, n: int) -> np.ndarray:
    """``rng.bit_generator.random_raw(n)`` (uint64 words), the same words and ``rng`` left in the same
    state, for a Generator on numpy's PCG64 (below 64 words: ``random_raw`` itself)."""
    return np.asarray(rng.bit_generator.random_raw(n), np.uint64) if n < LANES else _draw(rng, n, True)


# name -> function, beside the roundings in :func:`fpsim.numerics.compiled.rounding`'s table
DRAWS = {"pcg64_uniforms": pcg64_uniforms, "pcg64_raw": pcg64_raw}
