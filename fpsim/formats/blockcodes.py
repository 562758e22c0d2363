"""The compiled path of :func:`~fpsim.formats.block.quantize` (``fpsim/numerics/compiled/_quantize.py``):
the block maxima, then the elements as their codes with each block's underflow and saturation counts,
two compiled passes over the input where it lies (no padded or transposed copy), around the format's
scale rule - the numpy path's operations in its order, the same bits; and the element formats as the
compiled block kernels take them (:func:`_kernel_args`, used by :mod:`.blockfast` too).

:func:`quantize_compiled` returns None where the numpy path is to run (numba missing or off, fewer
than ``compiled.ROUNDING_MIN_SIZE`` values, rounding modes other than nearest and stochastic,
MXINT8's elements, NVFP4's Four Over Six scales); ``quantize`` then takes its numpy path.
"""

from __future__ import annotations

import math

import numpy as np

from .. import state
from ..numerics import compiled
from .table import Format

__all__ = ["quantize_compiled", "uniforms"]

_U32 = np.uint32
_F32 = np.float32


def quantize_compiled(bf, arr: np.ndarray, lay, rule, rounding: str, pow2: bool, rng):
    """:func:`~.block.quantize`'s arrays (``bf`` its BlockFormat, ``arr`` float32, ``lay`` its
    ``_Layout``, ``rule`` the scale rounding) by the compiled path - (elements in their dtype, stored scales,
    the tensor's decode factor or None, underflowed, saturated, decode factors), the last five in the
    scales' layout - or None where it does not run (numba missing or off, a small array, a rounding
    other than nearest and stochastic, MXINT8's elements, Four Over Six).  Two compiled passes over
    ``arr`` where it lies (``_quantize.py``) around the scale rule's scales from the block maxima:
    the same operations in the same order as the numpy path, the same stochastic draws (one float64
    uniform per position of ``lay``'s padded blocks, in its order; ``rng`` None: the process's
    generator, as ``cast`` takes it), the same bits."""
    elem = bf.element
    if rounding not in ("nearest", "stochastic") or not elem.is_ml_dtype or rule == "four_over_six":
        return None
    amax_pass = compiled.rounding("quantize_amax", arr, np.float32)
    if amax_pass is None:
        return None
    x, kblock = _quantize_view(np.ascontiguousarray(arr), lay)
    amax = amax_pass(x, kblock)
    codes, factor, dec, tscale = bf.scale_rule.scales(elem, amax, rule, pow2)
    u = None
    if rounding == "stochastic":
        u = _quantize_draws(rng if rng is not None else state.default_rng(), lay, x)
    nan_code = np.array([np.nan], np.float32).astype(elem.dtype).view(np.uint8)[0] if elem.has_nan else 0
    out, under, sat = compiled.kernels().roundings["quantize_elements"](
        x, kblock, amax, np.ascontiguousarray(factor, np.float32), u, _quantize_args(elem), nan_code)
    s = lay.scale_shape
    return (out.reshape(arr.shape).view(elem.dtype), codes.reshape(s), tscale, under.reshape(s), sat.reshape(s),
            np.ascontiguousarray(dec, np.float32).reshape(s))


def uniforms(rng: np.random.Generator, n: int) -> np.ndarray:
    """``rng.random(n)``, the same doubles and ``rng`` left in the same state: by the compiled path's
    PCG64 (``_draws.py``, about twice as fast) where it runs - numpy's PCG64 generator, n at least
    ``compiled.ROUNDING_MIN_SIZE`` - else by ``rng.random`` itself."""
    if n >= compiled.ROUNDING_MIN_SIZE and type(rng.bit_generator) is np.random.PCG64:
        k = compiled.kernels()
        if k is not None:
            return k.roundings["pcg64_uniforms"](rng, n)
    return rng.random(n)


def _quantize_view(a: np.ndarray, lay):
    """(a view of C-contiguous ``a``, its block) as ``_quantize.py``'s kernels take them: blocks along
    the last axis (or one followed by axes of size 1) rows (R, n) in blocks of k; along an earlier axis
    (L, n, B) in tiles (k, 1); 2-D tiles (L, M, N) in tiles (r, c)."""
    if lay.tiled:
        return a.reshape(-1, *lay.shape[-2:]), lay.block
    n, trail = lay.shape[lay.axis], math.prod(lay.shape[lay.axis + 1 :])
    if trail == 1:
        return a.reshape(-1, n), lay.block
    return a.reshape(-1, n, trail), (lay.block, 1)


def _quantize_draws(rng: np.random.Generator, lay, x: np.ndarray) -> np.ndarray:
    """The numpy path's uniforms (one per position of ``lay``'s zero-padded blocks, drawn in their
    order), each where :func:`_quantize_view`'s layout ``x`` reads its element's: rows (R, padded n),
    tiles (L, padded M, padded N), blocks along an earlier axis copied from (L, B, padded n) to (L, n, B)."""
    if lay.tiled:
        lead, m, n = x.shape
        return uniforms(rng, lead * (m + lay.pads[0]) * (n + lay.pads[1])).reshape(lead, m + lay.pads[0], -1)
    npad = lay.shape[lay.axis] + lay.pads[0]
    if x.ndim == 2:
        return uniforms(rng, x.shape[0] * npad).reshape(x.shape[0], npad)
    lead, n, trail = x.shape
    u = uniforms(rng, lead * trail * npad).reshape(lead, trail, npad)[:, :, :n]
    return np.ascontiguousarray(u.transpose(0, 2, 1))


def _quantize_args(elem: Format) -> tuple:
    """The element format as ``_quantize.quantize_elements`` takes it: :func:`_kernel_args`, then
    2**m (m mantissa bits), max's code, the sign's bit and max's float32 pattern, as uint32."""
    m = elem.mantissa_bits
    cmax = (int(_F32(elem.max).view(_U32)) >> (23 - m)) - ((elem.emin + 126) << m)  # max is normal
    return (*_kernel_args(elem), _U32(1 << m), _U32(cmax), _U32(1 << (elem.bits - 1)),
            _F32(elem.max).view(_U32))


def _kernel_args(elem: Format) -> tuple:
    """The element format as the compiled kernels take it: the bits of 2**emin (its smallest normal),
    its mantissa bits as an exponent field, 2**(emax + 1) and its max, as float32."""
    return (_U32((elem.emin + 127) << 23), _U32(elem.mantissa_bits << 23), _F32(2.0 ** (elem.emax + 1)),
            _F32(elem.max))
