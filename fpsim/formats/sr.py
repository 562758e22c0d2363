"""Few-bit stochastic rounding: the random bits, the four ways of comparing them, and their bias.

A value v lies between two neighbours of a format, ``lo`` and ``lo + ulp``; ``delta = (v - lo) / ulp``
in [0, 1) is how far along.  Exact stochastic rounding goes up with probability ``delta``.  Hardware
compares a few random bits instead: with ``k`` bits and a uniform random integer R in [0, 2**k),
it goes up when ``D + R >= 2**k``, where D is ``delta`` cut to k bits.  How D is cut is the
variant (gfloat's ``RoundMode.Stochastic*``, the IEEE P3109 definitions):

- ``"rne"``: D = delta * 2**k rounded to the nearest integer, ties to even (gfloat ``Stochastic``);
- ``"rto"``: the same with ties to odd (gfloat ``StochasticOdd``);
- ``"fast"``: floor(delta * 2**(k+1)) + 2R + 1 >= 2**(k+1), i.e. delta cut to k+1 bits and R
  offset by half a step (gfloat ``StochasticFast``);
- ``"fastest"``: floor(delta * 2**k) + R >= 2**k, delta truncated to k bits (gfloat
  ``StochasticFastest``).

Only exact SR (``sr_bits=None``) is unbiased for every value.  With k bits the probability of going
up is a multiple of 2**-k, so a value whose delta is not one is rounded with a bias: truncating
("fastest") always rounds down on average, by up to one step of 2**-k ulp; "fast", "rne" and "rto"
are off by at most half a step either way (arXiv 2504.20634: natural few-bit implementations are
biased).
:func:`fpsim.formats.srbias.sr_bias` measures it for any format, k and variant.
"""

from __future__ import annotations

import numpy as np

from ..checks import check_integer
from ..numerics import compiled
from .bitviews import uint_for_bits
from .names import mode_name

__all__ = ["SR_VARIANTS", "SR_MAX_BITS", "check_sr", "draw_bits", "round_up_fewbit"]

SR_VARIANTS = ("rne", "rto", "fast", "fastest")
SR_MAX_BITS = 32


def check_sr(rounding: str, sr_bits, sr_random, sr_variant, shape, ranged: bool = True) -> np.ndarray | None:
    """Validate the few-bit SR arguments (ValueError / TypeError naming the argument); return
    ``sr_random`` broadcast to ``shape`` (a view: its own integer dtype), or None.  ``ranged=False``
    leaves out the test that each integer is in [0, 2**sr_bits) (a pass over them), for a caller whose
    loop finds the largest and calls this again to raise the error."""
    sr_variant = mode_name(sr_variant, SR_VARIANTS, "sr_variant")  # any case, as cast has normalized it
    if sr_bits is None:
        if sr_random is not None:
            raise ValueError("sr_random needs sr_bits: the number of random bits each value is rounded with")
        if sr_variant != "rne":
            raise ValueError(f"sr_variant={sr_variant!r} needs sr_bits (exact stochastic rounding has no variants)")
        return None
    if rounding != "stochastic":
        raise ValueError(f"sr_bits applies to rounding='stochastic' only, not {rounding!r}")
    check_integer(sr_bits, "sr_bits", 1, SR_MAX_BITS, none=True)
    if sr_random is None:
        return None
    r = np.asarray(sr_random)
    if r.dtype.kind not in "iu":
        raise TypeError(f"sr_random must be an array of integers, got dtype {r.dtype}")
    if ranged and r.size and ((r.dtype.kind == "i" and int(r.min()) < 0) or int(r.max()) >= 2**sr_bits):
        raise ValueError(f"sr_random must hold integers in [0, 2**sr_bits) = [0, {2**sr_bits}), "
                         f"got {int(r.min())} .. {int(r.max())}")
    try:
        return np.broadcast_to(r, shape)
    except ValueError:
        raise ValueError(f"sr_random of shape {r.shape} does not broadcast to the input's shape {shape}") from None


def draw_bits(rng: np.random.Generator, k: int, shape) -> np.ndarray:
    """Uniform random integers in [0, 2**k) of ``shape``: the generator's raw 64-bit words cut into
    1, 2 or 4 bytes per value (k <= 8, 16, 32) and masked to k bits (every bit of a raw word is
    uniform), which costs a fraction of ``rng.integers``.  Where the compiled path is on, numpy's PCG64's
    words come from its compiled twin (``compiled._draws.pcg64_raw``: the same words, the generator left
    in the same state) from :data:`~fpsim.numerics.compiled.ROUNDING_MIN_SIZE` values up."""
    n = int(np.prod(shape, dtype=np.int64))
    dt = uint_for_bits(k)
    words = -(-n * dt.itemsize // 8)
    fast = (compiled.kernels() if n >= compiled.ROUNDING_MIN_SIZE and type(rng.bit_generator) is np.random.PCG64
            else None)
    raw = (fast.roundings["pcg64_raw"](rng, words) if fast is not None
           else np.asarray(rng.bit_generator.random_raw(words), dtype=np.uint64))
    out = raw.view(dt)[:n].reshape(shape)
    if k < 8 * dt.itemsize:
        out &= dt.type((1 << k) - 1)
    return out


def round_up_fewbit(delta: np.ndarray, k: int, rand: np.ndarray, variant: str) -> np.ndarray:
    """Whether each value goes up: ``delta`` in [0, 1) (float64, exact), ``rand`` integers in
    [0, 2**k), as gfloat's ``round_ndarray`` decides it for the variant (all in exact arithmetic:
    delta * 2**k is an exact scaling, the integers are int64)."""
    rand = np.asarray(rand, dtype=np.int64)
    if variant == "fast":
        return np.floor(np.ldexp(delta, k + 1)).astype(np.int64) + 2 * rand + 1 >= 2 ** (k + 1)
    d = np.ldexp(delta, k)
    fl = np.floor(d)
    if variant == "fastest":
        cut = fl
    else:
        frac = d - fl
        tie_up = (fl.astype(np.int64) & 1) == (1 if variant == "rne" else 0)  # rne: ties to even; rto: to odd
        cut = fl + ((frac > 0.5) | ((frac == 0.5) & tie_up))
    return cut.astype(np.int64) + rand >= 2**k
