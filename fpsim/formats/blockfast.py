"""Quantize into a block format and straight back to float32 in one go ("fake quantization"):
the values block-scaled training multiplies, without building a :class:`~.block.BlockQuantized`.

:func:`fake_quantize` returns the same float32 bits as ``quantize(...).dequantize()`` with the
same arguments (the same scales, the same element rounding, the same stochastic-rounding draws
from the same generator, NaN blocks the same NaN), in fewer numpy passes:

- the blocks are a reshaped view of the input wherever no block is partial: blocks along the
  last axis are rows ``(R, k)``, blocks along an earlier axis are ``(R, k, B)`` (no transposed
  copy: the block maxima reduce the middle axis), 2-D tiles ``(R, r, Nb, c)``; partial blocks
  take :class:`~.block._Layout`'s zero-padded copy, as ``quantize`` does;
- the block maxima are one ``max`` of the magnitudes' bit patterns (NaN above inf above finite,
  as ``quantize`` orders them), the scales from the format's scale rule on those maxima alone;
- round to nearest even is one table look-up from float32 to the element's float32 value: the
  float32 pattern cut to its top 16 bits with a sticky bit (round to odd; 8 significant bits are
  enough for a correct second rounding into 4 or fewer), indexing the saturating table
  ``kernels.narrow_cast`` uses, already widened back to float32 - the same value ``quantize``
  stores and ``dequantize`` reads;
- stochastic rounding is ``modekernels``' exact float32 kernel (one float64 uniform per element,
  up where it lies below the fraction), its draws taken in ``quantize``'s order (the blocked
  layout, the block axis last), then saturated and signed as ``cast`` does;
- the product with the decode factor is written straight into the output, a chunk of rows at a
  time (small temporaries stay in cache).

Where the compiled path runs (``fpsim.numerics.compiled``, ``_blocks.py``), the block maxima and
the element pass (scaled, rounded to nearest or stochastically, decoded) are one numba loop each over
the blocked layout: the same operations in the same order, the same draws (read where they lie, not
transposed), the same bits - rounding to nearest by the float32 adder onto the element's grid, not
by the table: the same value for every float32 (both are the correctly rounded one).

:func:`fake_quantize_on_grid` also says what a matrix product may know of the values: where every
decode factor of a block holding a finite nonzero value is a power of two high enough that no
value falls below float32's normal range (MX, fp8 blocks with ``pow2_scales``), each value has at
most the element's mantissa bits + 1 significant bits, and ``matmul_f32`` told so proves most of
its sums exact by their quanta instead of summing them exactly (the same bits, sooner).

No per-block statistics, no element array in its own dtype.  The MXINT8 format, NVFP4's Four
Over Six scales and the rounding modes other than ``nearest`` and ``stochastic`` go through
``quantize(...).dequantize()`` itself.
"""

from __future__ import annotations

import math

import numpy as np

from .. import state
from ..numerics import compiled
from .block import BlockFormat, _check_padding, _Layout, checked, quantize
from .blockcodes import _kernel_args, uniforms
from .kernels import bf16_odd_patterns, fp8_to_f32, narrow_cast, widening_table
from .table import Format

__all__ = ["fake_quantize", "fake_quantize_on_grid"]

_U32 = np.uint32
_F32 = np.float32
_ABS = _U32(0x7FFFFFFF)
_SIGN = _U32(0x80000000)
_EXP = _U32(0x7F800000)
_MANT_SIGN = _U32(0x807FFFFF)  # a positive power of two in the normal range has none of these set
_INV = _U32(254 << 23)  # the bits of 2**-E are (254 << 23) minus those of 2**E
_CHUNK = 2**15  # elements a pass: the few float32 temporaries stay in L2
_TABLES: dict[Format, np.ndarray] = {}


def fake_quantize(x, fmt, axis: int = -1, *, block=None, scale_rounding: str | None = None,
                  rounding: str = "nearest", pow2_scales: bool = False, seed=None, rng=None) -> np.ndarray:
    """The float32 values a block-scaled :func:`~.block.quantize` stands for, with no elements or scales kept.

    ``quantize(x, fmt, axis, ...).dequantize()``, bit for bit, every argument as in
    :func:`~.block.quantize` (checked the same way, the same errors): each element rounded into
    ``fmt``'s element format (saturating) after the float32 multiply by its block's encode factor,
    then multiplied by the block's float32 decode factor.  Returns a new C-contiguous float32
    array of ``x``'s shape."""
    return fake_quantize_on_grid(x, fmt, axis, block=block, scale_rounding=scale_rounding, rounding=rounding,
                                 pow2_scales=pow2_scales, seed=seed, rng=rng)[0]


def fake_quantize_on_grid(x, fmt, axis: int = -1, *, block=None, scale_rounding: str | None = None,
                          rounding: str = "nearest", pow2_scales: bool = False, seed=None,
                          rng=None) -> tuple[np.ndarray, tuple[int, float] | None]:
    """(:func:`fake_quantize`'s array, what :func:`fpsim.numerics.matmul_f32` may be told of its
    values as ``grid_a`` / ``grid_b``): ``(mantissa bits of the element format, 2**-149)`` where
    every value is an element times a power of two, all in float32's normal range or zero, inf
    or NaN - so each has at most mantissa bits + 1 significant bits (MX's scales; fp8_block's
    with ``pow2_scales``); None where that is not known (NVFP4's float32 scales, the paths
    through ``quantize``).  Only the speed of the product depends on it."""
    bf, arr, axis, block, rule = checked(x, fmt, axis, block, scale_rounding, rounding, pow2_scales, seed, rng)
    if (rounding not in ("nearest", "stochastic") or not bf.element.is_ml_dtype or rule == "four_over_six"
            or not arr.size):
        return quantize(arr, bf, axis, block=block, scale_rounding=rule, rounding=rounding,
                        pow2_scales=pow2_scales, seed=seed, rng=rng).dequantize(), None
    if rounding != "stochastic":
        rng = None  # quantize draws nothing to round to nearest: neither does this
    elif rng is None:
        rng = np.random.default_rng(seed) if seed is not None else state.default_rng()
    lay = _Layout(arr.shape, axis, block, clamp=rounding != "stochastic")
    _check_padding(lay, arr, block)
    blocks = _Blocks(arr, lay)
    outb, grid = _encode(bf, blocks, rule, pow2_scales, rng)
    return blocks.result(outb), grid


class _Blocks:
    """The input as blocks, the block rows first: ``xb`` (R, k) for blocks along the last axis,
    (R, k, B) along an earlier one (a view: R = leading size x blocks, B = trailing size), or
    (R, r, Nb, c) for 2-D tiles; ``lay``'s zero-padded copy (R, k) / (R, r, Nb, c) where a block
    is partial.  One scale per block: (R,), (R, B) or (R, Nb)."""

    def __init__(self, arr: np.ndarray, lay: _Layout):
        self.lay, self.shape = lay, arr.shape
        self.padded = any(lay.pads)
        if self.padded:
            self.xb = lay.to_blocks(arr)
        elif lay.tiled:
            r, c = lay.block
            self.xb = np.ascontiguousarray(arr).reshape(-1, r, arr.shape[-1] // c, c)
        elif lay.axis == arr.ndim - 1:
            self.xb = np.ascontiguousarray(arr).reshape(-1, lay.block)
        else:
            trail = math.prod(arr.shape[lay.axis + 1 :])
            self.xb = np.ascontiguousarray(arr).reshape(-1, lay.block, trail)
        self.axes = (1, 3) if self.xb.ndim == 4 else 1
        self.row_size = math.prod(self.xb.shape[1:])

    def expand(self, s: np.ndarray) -> np.ndarray:
        """A per-block array broadcast against blocked elements."""
        if self.xb.ndim == 4:
            return s[:, None, :, None]
        return s[:, None, :] if self.xb.ndim == 3 else s[:, None]

    def slices(self):
        rows = max(1, _CHUNK // max(self.row_size, 1))
        return [slice(i, i + rows) for i in range(0, self.xb.shape[0], rows)]

    def amax(self, slices) -> np.ndarray:
        """float32 max |x| per block, ordered on the bit patterns (NaN wins over inf, inf over finite);
        in one compiled pass where the compiled path runs."""
        if self.xb.flags.c_contiguous and (fast := compiled.rounding("block_amax", self.xb, np.float32)) is not None:
            return fast(self.xb)
        parts = [self._max(np.bitwise_and(self.xb[sl].view(_U32), _ABS)) for sl in slices]
        return (parts[0] if len(parts) == 1 else np.concatenate(parts)).view(_F32)

    def _max(self, mag: np.ndarray) -> np.ndarray:
        if mag.ndim != 2:
            return mag.max(axis=self.axes)
        # rows of k: reduceat walks the flat array once (a max over each short row costs twice that)
        flat = mag.reshape(-1)
        return np.maximum.reduceat(flat, np.arange(0, flat.size, mag.shape[1]))

    def draws(self, rng: np.random.Generator):
        """Stochastic rounding's uniforms in ``quantize``'s order (the blocked layout with the block
        axis last: for blocks along an earlier axis, transposed), shaped like ``xb``; None where that
        order is the memory order and each chunk draws its own in turn."""
        if self.xb.ndim != 3:
            return None
        ax = self.lay.axis
        lead, n, trail = math.prod(self.shape[:ax]), self.shape[ax], self.xb.shape[2]
        u = rng.random(self.xb.size).reshape(lead, trail, n).transpose(0, 2, 1)
        # one transposed copy: comparing against the strided view, a chunk at a time, costs several
        return np.ascontiguousarray(u).reshape(self.xb.shape)

    def result(self, outb: np.ndarray) -> np.ndarray:
        if self.padded:
            return np.ascontiguousarray(self.lay.from_blocks(outb))
        return outb.reshape(self.shape)


def _encode(bf: BlockFormat, blocks: _Blocks, rule, pow2: bool, rng):
    """(the blocked output, its grid as :func:`fake_quantize_on_grid` gives it): scales from the
    block maxima, then each chunk of rows scaled, rounded into the element format (to nearest even;
    stochastically from ``rng`` when one is given) and multiplied by its decode factor."""
    slices = blocks.slices()
    amax = blocks.amax(slices)
    elem = bf.element
    factor, dec = bf.scale_rule.factors(elem, amax, rule, pow2)
    outb = _compiled_elements(blocks, elem, factor, dec, rng)
    if outb is None:
        outb = _chunks(blocks, slices, elem, factor, dec, rng)
    ex = blocks.expand
    if amax.size and amax.view(_U32).max() >= _EXP:  # a block holding inf or NaN
        bad = ~np.isfinite(amax)
        outb[np.broadcast_to(ex(bad), outb.shape)] = _nan_block_value(elem, dec[bad][:1])
    return outb, _grid(elem, amax, dec)


def _grid(elem: Format, amax: np.ndarray, dec: np.ndarray) -> tuple[int, float] | None:
    """(elem's mantissa bits, 2**-149) where every block holding a finite nonzero value has a
    decode factor that is a power of two in float32's normal range, large enough that elem's
    smallest nonzero magnitude (2**(emin - mantissa bits), or above without subnormals) times it
    is normal too: then every value of the block is an element times that power of two, exactly.
    Blocks of zeros hold zeros whatever their factor; a block holding inf or NaN is all NaN (or
    zeros): they are left out.  None otherwise."""
    if dec.dtype != np.float32:
        return None
    a = amax.view(_U32)
    d = dec.view(_U32)
    live = (a != 0) & (a < _EXP)
    d = d[live] if not live.all() else d.reshape(-1)
    if d.size and (np.bitwise_and(d, _MANT_SIGN).any()
                   or int(d.min() >> 23) - 127 < -126 - elem.emin + elem.mantissa_bits):
        return None
    return elem.mantissa_bits, 2.0**-149


def _chunks(blocks: _Blocks, slices, elem: Format, factor: np.ndarray, dec: np.ndarray, rng) -> np.ndarray:
    """The blocked output on numpy, a chunk of rows at a time: scaled, rounded (by the table to
    nearest; stochastically from ``rng``, drawn in ``quantize``'s order), decoded."""
    u_all = blocks.draws(rng) if rng is not None else None
    outb = np.empty(blocks.xb.shape, np.float32)
    ex = blocks.expand
    with np.errstate(invalid="ignore", over="ignore"):
        for sl in slices:
            scaled = blocks.xb[sl] * ex(factor[sl])
            if rng is None:
                vals = _nearest_table(elem).take(bf16_odd_patterns(scaled), mode="clip")  # indices < 2**16: no check
            else:
                u = u_all[sl] if u_all is not None else rng.random(scaled.shape)
                vals = _stochastic(scaled, elem, u)
            np.multiply(vals, ex(dec[sl]), out=outb[sl])
    return outb


def _compiled_elements(blocks: _Blocks, elem: Format, factor: np.ndarray, dec: np.ndarray, rng) -> np.ndarray | None:
    """The blocked output by the compiled path's one loop (scaled, rounded - to nearest,
    or stochastically with ``rng``'s uniforms drawn in ``quantize``'s order, as :func:`_chunks` draws
    them - and decoded: the same operations in the same order), or None where it does not run
    (numba missing or off, a small array, scales not float32, a layout that is not C-contiguous)."""
    xb = blocks.xb
    if factor.dtype != np.float32 or dec.dtype != np.float32 or not xb.flags.c_contiguous:
        return None
    fast = compiled.rounding("block_nearest" if rng is None else "block_stochastic", xb, np.float32)
    if fast is None:
        return None
    factor, dec = np.ascontiguousarray(factor), np.ascontiguousarray(dec)
    args = _kernel_args(elem)
    if rng is None:
        return fast(xb, factor, dec, args)
    u = uniforms(rng, xb.size)  # draws()'s, or each chunk's in turn on the numpy path: the same stream
    if xb.ndim == 3:  # as drawn, (lead, trail, n): the kernel reads them where they lie (draws() transposes)
        ax = blocks.lay.axis
        u = u.reshape(math.prod(blocks.shape[:ax]), xb.shape[2], blocks.shape[ax])
    return fast(xb, factor, dec, u.reshape(xb.shape) if xb.ndim != 3 else u, args)


def _nearest_table(elem: Format) -> np.ndarray:
    """float32 (65,536): for every bfloat16 pattern, the float32 value of its saturating
    round-to-nearest-even cast into ``elem`` - ``kernels.narrow_cast``'s table, widened."""
    t = _TABLES.get(elem)
    if t is None:
        t = _TABLES[elem] = fp8_to_f32(narrow_cast(widening_table("bfloat16"), elem, True))
    return t


def _stochastic(scaled: np.ndarray, elem: Format, u: np.ndarray) -> np.ndarray:
    """``cast(scaled, elem, "stochastic", saturate=True)`` widened to float32, with the uniforms
    ``u`` (float64, one per element): ``modekernels``' exact kernel - v = |x| / ulp exact, up where
    u < v - floor(v) - then min(., max) and x's sign.  (That kernel first clamps |x| to
    2**(emax + 2); every |x| beyond max ends at max after the min either way, inf included - its
    fraction is NaN, never above a draw - and the draws are the same, so the clamp is left out.)"""
    bits = scaled.view(_U32)
    a = np.bitwise_and(bits, _ABS).view(_F32)
    q = np.bitwise_and(a.view(_U32), _EXP)
    np.maximum(q, _U32((elem.emin + 127) << 23), out=q)
    q -= _U32(elem.mantissa_bits << 23)
    v = a
    v *= (_INV - q).view(_F32)
    r = np.floor(v)
    v -= r  # exact: the fraction
    r += u < v
    r *= q.view(_F32)
    np.minimum(r, _F32(elem.max), out=r)
    out = r.view(_U32)
    out |= np.bitwise_and(bits, _SIGN)
    return r


def _nan_block_value(elem: Format, dec_nan: np.ndarray) -> np.float32:
    """What ``dequantize`` gives for every element of a block with an inf or NaN: the element
    ``quantize`` stores there (NaN, or 0 in a format without NaN) times the block's NaN decode
    factor, one float32 product (the NaN that survives is the hardware's choice: computed, not
    assumed)."""
    e = np.array([np.nan if elem.has_nan else 0.0], np.float32).astype(elem.dtype)
    return (fp8_to_f32(e) * dec_nan)[0]

