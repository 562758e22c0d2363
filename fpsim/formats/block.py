"""Block-scaled formats: MXFP8 / MXFP6 / MXFP4 / MXINT8 (OCP MX v1.0), NVFP4 and DeepSeek-V3's fp8 blocks.

One call, :func:`quantize`, for all of them::

    q = fpsim.quantize(x, "mxfp8_e4m3", axis=-1, scale_rounding="floor")
    q.elements      # the elements in their real dtype (ml_dtypes float8/6/4; MXINT8: float32 holding
                    # the ocp_int8 values i/64 exactly - fpsim.encode gives the bytes), the shape of x
    q.scales        # one scale per block in its real dtype (e8m0, e4m3 or float32)
    q.dequantize()  # float32
    q.nbytes        # the memory the format takes, elements and scales bit-packed
    q.stats         # per block: elements flushed to zero, elements saturated, the scale used

Blocks run along ``axis`` (``block`` consecutive elements, the last one partial when the axis
length is not a multiple), or are 2-D tiles over the last two axes when ``block`` is a pair
(NVFP4's 16x16 and DeepSeek-V3's 128x128 weight blocks).  How a format picks its scales is its
``scale_rule`` (:mod:`fpsim.formats.scale_rules`), a field of the format: the formats are data, in
the ``BLOCK_FORMATS`` registry.  The input is taken as float32 (float16 / bfloat16 / fp8 widen
exactly; float64 is rounded to float32 once, to nearest, as the hardware's inputs are), and every
step is exact or rounds in float32 exactly where the family's definition says it does.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field

import numpy as np

from ..checks import check_seed
from ..registry import Registry
from .blockcodes import quantize_compiled
from .kernels import fp8_to_f32, narrow_cast
from .round import ROUNDING_MODES, _as_float_array, cast
from .scale_rules import E8M0_SCALE, FLOAT32_BLOCK_SCALE, NVFP4_SCALE, SCALE_ROUNDINGS, ScaleRule
from .table import OCP_INT8, Format, get_format

__all__ = ["BlockFormat", "BLOCK_FORMATS", "BlockQuantized", "BlockStats", "get_block_format", "quantize",
           "SCALE_ROUNDINGS"]

@dataclass(frozen=True)
class BlockFormat:
    """A block-scaled format: element format, scale format, default block length and 2-D tile side,
    and its ``scale_rule`` (:class:`~.scale_rules.ScaleRule`: how each block's scale comes from its
    amax, and what the rule takes and has - ``scale_rounding`` names, ``pow2_scales``, a tensor scale).
    """

    name: str
    scale_rule: ScaleRule
    element: Format
    scale: Format
    block: int
    tile: int | None = None
    aliases: tuple[str, ...] = field(default=())

    @property
    def family(self) -> str:
        """The scale rule's name: ``mx``, ``nvfp4`` or ``fp8_block`` (for reading; nothing switches on it)."""
        return self.scale_rule.name

    @property
    def tensor_scale(self) -> bool:
        """Whether one more float32 scale per tensor sits above the block scales (NVFP4)."""
        return self.scale_rule.tensor_scale


BLOCK_FORMATS = Registry("block format", entry_points="fpsim.block_formats")
"""The block formats by name: ``BLOCK_FORMATS.register(BlockFormat(...))`` adds one (its aliases too)."""


def _mx(elem: str, *aliases: str) -> BlockFormat:
    e = get_format(elem)
    short = elem.split("_")[1].removesuffix("fn")
    return BlockFormat(f"mxfp{e.bits}_{short}", E8M0_SCALE, e, get_format("float8_e8m0fnu"), 32, aliases=aliases)


for _f in (
    _mx("float8_e4m3fn", "mxfp8"),
    _mx("float8_e5m2"),
    _mx("float6_e2m3fn", "mxfp6"),
    _mx("float6_e3m2fn"),
    _mx("float4_e2m1fn", "mxfp4"),
    # OCP MX v1.0 section 5.3.3: two's complement int8 elements i / 64 in [-2, 1 + 63/64], emax_elem 0
    BlockFormat("mxint8", E8M0_SCALE, OCP_INT8, get_format("float8_e8m0fnu"), 32),
    BlockFormat("nvfp4", NVFP4_SCALE, get_format("float4_e2m1fn"), get_format("float8_e4m3fn"), 16, 16),
    BlockFormat("fp8_block", FLOAT32_BLOCK_SCALE, get_format("float8_e4m3fn"), get_format("float32"), 128, 128,
                aliases=("fp8_blockwise", "deepseek_fp8")),
):
    BLOCK_FORMATS.register(_f)


def _aliases() -> dict[str, str]:
    return {a: f.name for f in BLOCK_FORMATS.values() for a in f.aliases}


def get_block_format(fmt) -> BlockFormat:
    """A block format by name or alias (``mxfp8`` = ``mxfp8_e4m3``), or a :class:`BlockFormat`
    itself (registered or not); ValueError listing them if unknown."""
    if isinstance(fmt, BlockFormat):
        return fmt
    key = fmt.strip().lower() if isinstance(fmt, str) else None
    aliases = _aliases()
    key = aliases.get(key, key)
    if key not in BLOCK_FORMATS:
        listed = ", ".join(f"{a} = {n}" for a, n in aliases.items())
        raise ValueError(f"unknown block format {fmt!r}; known: {', '.join(BLOCK_FORMATS)} ({listed})")
    return BLOCK_FORMATS.get(key)


# --------------------------------------------------------------------------------------------
# the result


@dataclass(frozen=True)
class BlockStats:
    """Per block (arrays shaped like the scales): ``underflow`` counts the non-zero finite inputs
    that became 0, ``saturated`` the finite inputs whose scaled magnitude lay beyond the element's
    max and were clamped to it, ``scale`` is the float32 decode factor the block's elements are
    multiplied by (NaN for a block holding inf or NaN)."""

    underflow: np.ndarray
    saturated: np.ndarray
    scale: np.ndarray

    def totals(self) -> dict[str, int]:
        """Block and element counts: underflowed, saturated, NaN blocks."""
        return {"blocks": int(self.scale.size), "underflow": int(self.underflow.sum()),
                "saturated": int(self.saturated.sum()), "nan_blocks": int(np.isnan(self.scale).sum())}


@dataclass(frozen=True, eq=False)
class BlockQuantized:
    """A tensor in a block-scaled format (what :func:`quantize` returns).

    ``elements`` has the input's shape, in the element dtype; ``scales`` has one entry per block
    (the block axis shortened to the number of blocks; 2-D tiles shorten the last two axes), in
    the scale dtype; ``tensor_scale`` is NVFP4's float32 per-tensor decode factor 1 / S_enc (None
    otherwise).  Dequantized value = element * block decode factor (``stats.scale``).
    """

    format: BlockFormat
    elements: np.ndarray
    scales: np.ndarray
    tensor_scale: np.float32 | None
    axis: int
    block: int | tuple[int, int]
    scale_rounding: str | None
    rounding: str
    pow2_scales: bool
    stats: BlockStats

    def __post_init__(self):
        """The scales' shape is what the elements' shape, axis and block imply (a ValueError naming both)."""
        shape, got = np.shape(self.elements), np.shape(self.scales)
        try:
            want = _Layout(shape, self.axis, self.block).scale_shape
        except (IndexError, TypeError, ValueError):
            want = None
        if want != got:
            how = (f"in tiles of {self.block}" if isinstance(self.block, tuple) else
                   f"in blocks of {self.block!r} along axis {self.axis!r}")
            raise ValueError(f"BlockQuantized: elements of shape {shape} {how} take scales of shape {want}, not {got}")

    @property
    def shape(self) -> tuple[int, ...]:
        return self.elements.shape

    @property
    def nbytes(self) -> int:
        """Bytes of the format, bit-packed as the hardware stores it: elements (4 / 6 / 8 bits
        each), scales (8 or 32 bits each) and NVFP4's one float32.  numpy holds fp6 / fp4 in a
        byte each: ``elements.nbytes`` is the emulation's memory, not the format's."""
        bits = self.elements.size * self.format.element.bits + self.scales.size * self.format.scale.bits
        bits += 32 if self.tensor_scale is not None else 0
        return -(-bits // 8)

    @property
    def bits_per_element(self) -> float:
        """nbytes * 8 / elements: MXFP8 8.25, MXFP4 4.25, NVFP4 4.5 (+ 32 bits a tensor)."""
        return self.nbytes * 8 / max(self.elements.size, 1)

    def dequantize(self) -> np.ndarray:
        """float32: each element times its block's decode factor, read from this object's own
        ``scales`` (and ``tensor_scale``): the e8m0 power of two for MX, the e4m3 scale times the
        float32 ``tensor_scale`` (one float32 product) for NVFP4, the float32 scale for fp8_block.
        Exact for MX, except that a product beyond float32's range - only with ceil / even / rceil
        scales near 2**128, which the MX spec leaves to the implementation - is +-inf; one float32
        product for NVFP4 and DeepSeek's float32 scales."""
        v = fp8_to_f32(self.elements) if self.format.element.is_ml_dtype else self.elements
        lay = _Layout(self.shape, self.axis, self.block)
        vb = lay.to_blocks(v)
        dec = self.format.scale_rule.decode(self.scales, self.tensor_scale)
        with np.errstate(invalid="ignore", over="ignore"):
            out = vb * lay.expand(lay.scale_to_blocks(dec))
        return np.ascontiguousarray(lay.from_blocks(out))


# --------------------------------------------------------------------------------------------
# layout: blocks along an axis, or 2-D tiles over the last two axes


class _Layout:
    """Reshapes an array of ``shape`` into rows of blocks (zero-padded) and back.

    1-D blocks of k along ``axis``: the axis moved last, padded and split -> (R, k), one block a
    row; scales (R,).  2-D tiles (r, c) over the last two axes: (..., M, N) -> (R, r, Nb, c)
    with R = (leading size) * Mb; scales (R, Nb).  Row slices of both are what the encoder
    works on, a chunk at a time.  With ``clamp`` a block longer than its axis is cut to the axis
    length (the same single block, the same scale: the padding it drops is zeros), so the
    padding, and the memory, grow with the data and never with the block.  Stochastic rounding
    does not clamp: it draws one random number per padded position, so its draws - and the
    numbers of every run that used it - stay what they were.
    """

    def __init__(self, shape, axis: int, block, clamp: bool = True):
        self.shape, self.axis = tuple(shape), axis
        self.tiled = isinstance(block, tuple)
        if clamp and self.tiled:
            block = tuple(min(b, max(n, 1)) for b, n in zip(block, self.shape[-2:]))
        elif clamp:
            block = min(block, max(self.shape[axis], 1))
        self.block = block
        if self.tiled:
            (m, n), (r, c) = self.shape[-2:], block
            self.pads = (-m % r, -n % c)
            self.scale_shape = (*self.shape[:-2], -(-m // r), -(-n // c))
            self.row_size = r * ((n + self.pads[1]) // c) * c
        else:
            n, k = self.shape[axis], block
            self.pads = (-n % k,)
            self.moved_scale_shape = (*self.shape[:axis], *self.shape[axis + 1 :], -(-n // k))
            self.scale_shape = (*self.shape[:axis], -(-n // k), *self.shape[axis + 1 :])
            self.row_size = k
            # np.moveaxis(x, axis, -1) and back as transposes (moveaxis normalises its axes in Python
            # on every call, which costs more than the small operands' arithmetic); None: nothing to move
            nd = len(self.shape)
            last = axis == nd - 1
            self._to_last = None if last else (*range(axis), *range(axis + 1, nd), axis)
            self._from_last = None if last else (*range(axis), nd - 1, *range(axis, nd - 1))

    def to_blocks(self, x: np.ndarray) -> np.ndarray:
        if self.tiled:
            (r, c), (pr, pc) = self.block, self.pads
            if pr or pc:
                x = np.pad(x, [(0, 0)] * (x.ndim - 2) + [(0, pr), (0, pc)])
            m, n = x.shape[-2:]
            return np.ascontiguousarray(x).reshape(-1 if x.size else 0, r, n // c, c)
        x = x if self._to_last is None else x.transpose(self._to_last)
        if self.pads[0]:
            x = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, self.pads[0])])
        return np.ascontiguousarray(x).reshape(x.size // self.block, self.block)

    def from_blocks(self, xb: np.ndarray) -> np.ndarray:
        if self.tiled:
            lead, (m, n), (pr, pc) = self.shape[:-2], self.shape[-2:], self.pads
            x = xb.reshape(*lead, m + pr, n + pc)
            return x[..., :m, :n]
        moved = (*self.shape[: self.axis], *self.shape[self.axis + 1 :], self.shape[self.axis] + self.pads[0])
        x = xb.reshape(moved)[..., : self.shape[self.axis]]
        return x if self._from_last is None else x.transpose(self._from_last)

    def amax(self, xb: np.ndarray) -> np.ndarray:
        """float32 max |x| per block (NaN wins over inf, inf over finite), blocked scale layout."""
        bits = np.bitwise_and(xb.view(np.uint32), np.uint32(0x7FFFFFFF))  # |x| ordered as integers
        if self.tiled:
            return bits.max(axis=(1, 3), initial=0).view(np.float32)
        flat = bits.reshape(-1)
        if not flat.size:
            return flat.view(np.float32)
        return np.maximum.reduceat(flat, np.arange(0, flat.size, self.block)).view(np.float32)

    def count(self, mask: np.ndarray) -> np.ndarray:
        """Number of True per block (int64), blocked scale layout."""
        if self.tiled:
            return np.count_nonzero(mask, axis=(1, 3))
        k = self.block
        if k % 8 or k > 248 or not mask.size:
            return np.count_nonzero(mask, axis=1)
        # Eight booleans are the bytes of a uint64: add the words of a block, then sum its bytes with
        # one multiply (no byte carries: each holds at most k / 8 <= 31, the total at most k <= 248).
        words = mask.view(np.uint64)
        acc = words[:, 0].copy()
        for j in range(1, k // 8):
            acc += words[:, j]
        return ((acc * np.uint64(0x0101010101010101)) >> np.uint64(56)).astype(np.int64)

    def expand(self, s: np.ndarray) -> np.ndarray:
        """A per-block array broadcast against the blocked elements."""
        return s[:, None, :, None] if self.tiled else s[:, None]

    def scale_from_blocks(self, s: np.ndarray) -> np.ndarray:
        """Blocked scale layout -> the user's (the block axis back in place), contiguous."""
        if self.tiled:
            return s.reshape(self.scale_shape)
        s = s.reshape(self.moved_scale_shape)
        return np.ascontiguousarray(s if self._from_last is None else s.transpose(self._from_last))

    def scale_to_blocks(self, s: np.ndarray) -> np.ndarray:
        if self.tiled:
            return s.reshape(-1, s.shape[-1]) if s.size else s.reshape(0, self.scale_shape[-1])
        return (s if self._to_last is None else s.transpose(self._to_last)).reshape(-1)


# --------------------------------------------------------------------------------------------
# quantize


def quantize(x, fmt, axis: int = -1, *, block=None, scale_rounding: str | None = None,
             rounding: str = "nearest", pow2_scales: bool = False, seed=None, rng=None) -> BlockQuantized:
    """Quantize ``x`` into a block-scaled format, returning its elements and scales (a :class:`BlockQuantized`).

    :func:`~fpsim.formats.blockfast.fake_quantize` gives only the float32 values they stand for
    (``.dequantize()``), faster; :func:`fpsim.cast` rounds into a scalar format, with no scale.

    ``fmt``: ``mxfp8_e4m3`` (alias ``mxfp8``), ``mxfp8_e5m2``, ``mxfp6_e2m3`` (``mxfp6``),
    ``mxfp6_e3m2``, ``mxfp4_e2m1`` (``mxfp4``), ``mxint8`` (ocp_int8 elements: i / 64, saturating to
    [-2, 127/64]), ``nvfp4``, ``fp8_block`` (DeepSeek-V3; aliases
    ``fp8_blockwise``, ``deepseek_fp8``).  ``block``: elements per block along ``axis`` (default
    32 for MX, 16 for NVFP4, 128 for fp8_block), or a pair (rows, cols) for 2-D tiles over the last
    two axes (NVFP4 weights: (16, 16); DeepSeek weights: (128, 128)).  ``scale_rounding`` (MX
    only): ``floor`` (the default, the spec), ``ceil``, ``even``, ``rceil``, ``bump`` (floor, one up
    where floor would saturate the block's max; :mod:`.block_scales`).  ``rounding`` of the
    elements: any of ``fpsim.ROUNDING_MODES`` (``nearest``, ties to even, by default;
    ``stochastic`` seeded by ``seed`` or ``rng``); elements beyond the element's max saturate to it.  ``pow2_scales``
    (fp8_block only): round each decode scale up to a power of two.  ``seed`` (an integer >= 0)
    or ``rng`` (a numpy Generator) for stochastic rounding.

    NVFP4 takes a ``scale_rounding`` of its own: ``six`` (the default, TE's rule: each block's
    amax maps to 6) or ``four_over_six`` (alias ``4/6``; arXiv 2512.02010: to 6 or to 4, whichever
    errs less, with the tensor scale computed from 256 instead of 448; :mod:`.fouroversix`).

    Every argument is checked before anything is computed; a bad one is a ValueError or
    TypeError naming it.  The result's arrays are read-only.
    """
    bf, arr, axis, block, scale_rounding = checked(x, fmt, axis, block, scale_rounding, rounding, pow2_scales,
                                                   seed, rng)
    if rounding == "stochastic" and rng is None:
        rng = np.random.default_rng(seed) if seed is not None else None
    lay = _Layout(arr.shape, axis, block, clamp=rounding != "stochastic")
    _check_padding(lay, arr, block)
    got = quantize_compiled(bf, arr, lay, scale_rounding, rounding, pow2_scales, rng)
    elements, codes, tscale, under, sat, dec = got if got is not None else _quantize_numpy(
        bf, arr, lay, scale_rounding, rounding, pow2_scales, rng)
    stats = BlockStats(*(_read_only(a) for a in (under, sat, dec)))
    return BlockQuantized(bf, _read_only(elements), _read_only(codes), tscale, axis, block, scale_rounding, rounding,
                          bool(pow2_scales), stats)


def _quantize_numpy(bf: BlockFormat, arr: np.ndarray, lay: _Layout, rule, rounding: str, pow2: bool, rng):
    """:func:`~.blockcodes.quantize_compiled`'s arrays on the numpy path: the blocks a zero-padded copy
    (:class:`_Layout`), their maxima, the scale rule's scales, then the elements a chunk of rows at a time."""
    xb = lay.to_blocks(arr)
    amax = _chunks(lay, xb, lambda sl: lay.amax(xb[sl]))
    codes, factor, dec, tscale = bf.scale_rule.scales(bf.element, amax, rule, pow2, xb, lay.expand,
                                                      (1, 3) if lay.tiled else 1)
    with np.errstate(invalid="ignore", over="ignore"):
        top = amax * factor  # the largest scaled magnitude of each block
    enc = _Encoder(lay, bf.element, rounding, rng)
    elements = np.empty(xb.shape, dtype=bf.element.dtype)
    under, sat = np.zeros(amax.shape, np.int64), np.zeros(amax.shape, np.int64)
    for sl in _row_slices(lay, xb):
        elements[sl], under[sl], sat[sl] = enc(xb[sl], amax[sl], factor[sl], top[sl])
    return (np.ascontiguousarray(lay.from_blocks(elements)), lay.scale_from_blocks(codes), tscale,
            *(lay.scale_from_blocks(a) for a in (under, sat, dec)))


def checked(x, fmt, axis, block, scale_rounding, rounding, pow2_scales, seed, rng):
    """:func:`quantize`'s arguments checked (a ValueError or TypeError naming the bad one):
    ``(BlockFormat, x as float32, axis, block, the scale rule)``."""
    bf = get_block_format(fmt)
    check_seed(seed)
    if rng is not None and not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy Generator (np.random.default_rng(...)) or None, got {type(rng).__name__}")
    arr = _as_f32(x)
    return (bf, arr, *_check(arr, bf, axis, block, scale_rounding, rounding, pow2_scales))


def _read_only(a: np.ndarray) -> np.ndarray:
    """The result's arrays cannot be written: the object is frozen, and its stats describe them."""
    a.setflags(write=False)
    return a


# Rows of blocks are encoded a chunk of about this many elements at a time: full-size float32
# temporaries make the C allocator hand memory back to the kernel and fault it in again on every
# call, which costs more than the arithmetic (see kernels.f32_to_f16).
_CHUNK = 2**17


def _row_slices(lay: _Layout, xb: np.ndarray):
    rows = max(1, _CHUNK // max(lay.row_size, 1))
    return [slice(i, i + rows) for i in range(0, xb.shape[0], rows)]


def _chunks(lay: _Layout, xb: np.ndarray, fn) -> np.ndarray:
    parts = [fn(sl) for sl in _row_slices(lay, xb)]
    return np.concatenate(parts) if parts else lay.amax(xb)


class _Encoder:
    """Scales, rounds and counts one chunk of rows of blocks."""

    def __init__(self, lay: _Layout, elem: Format, rounding: str, rng):
        self.lay, self.elem, self.rounding, self.rng = lay, elem, rounding, rng
        self.mag_mask = np.uint8((1 << (elem.bits - 1)) - 1)
        self.emax = np.float32(elem.max)
        self.emin_neg = np.float32(-elem.max_negative)  # ocp_int8: -2 is a value, +2 is not

    def __call__(self, xb, amax, factor, top):
        lay, elem = self.lay, self.elem
        with np.errstate(invalid="ignore", over="ignore"):
            scaled = xb * lay.expand(factor)
        bad = ~np.isfinite(amax)
        bad_any = bool(bad.any())
        if bad_any and not elem.has_nan:
            scaled[np.broadcast_to(lay.expand(bad), scaled.shape)] = 0  # fp6 / fp4 hold no NaN: zeros
        if self.rounding == "nearest" and elem.is_ml_dtype:
            out = narrow_cast(scaled, elem, saturate=True)
        else:
            out = cast(scaled, elem, self.rounding, saturate=True, rng=self.rng)
        if bad_any and elem.has_nan:
            out[np.broadcast_to(lay.expand(bad), out.shape)] = np.nan
        # Only blocks holding a zero element can hold an underflow, and only blocks whose largest
        # scaled value lies beyond max can saturate: look at the elements of those blocks alone.
        zero = np.bitwise_and(out.view(np.uint8), self.mag_mask) == 0 if elem.is_ml_dtype else out == 0
        under = lay.count(zero)
        rows = np.flatnonzero(under if under.ndim == 1 else under.any(axis=1))
        if rows.size:
            under[rows] = lay.count(zero[rows] & (xb[rows] != 0))
        sat = np.zeros(amax.shape, np.int64)
        rows = np.flatnonzero(top > self.emax if top.ndim == 1 else (top > self.emax).any(axis=1))
        if rows.size:
            with np.errstate(invalid="ignore"):
                s = scaled[rows]
                sat[rows] = lay.count((s > self.emax) | (s < self.emin_neg))
        if bad_any:
            under[bad] = 0
            sat[bad] = 0
        return out, under, sat


def _as_f32(x) -> np.ndarray:
    arr = _as_float_array(x)
    if arr.dtype != np.float32:
        with np.errstate(over="ignore"):
            arr = arr.astype(np.float32)  # float64 rounds once, to nearest; low formats widen exactly
    return arr


def _check(arr, bf: BlockFormat, axis, block, scale_rounding, rounding, pow2):
    """Validate every argument (nothing is computed before); return the normalized axis, block
    and scale rounding."""
    if rounding not in ROUNDING_MODES:
        raise ValueError(f"unknown rounding {rounding!r}; known: {', '.join(ROUNDING_MODES)}")
    scale_rounding = bf.scale_rule.rounding(scale_rounding, bf.name)
    if not isinstance(pow2, bool | np.bool_):
        raise TypeError(f"pow2_scales must be True or False, got {pow2!r}")
    if pow2 and not bf.scale_rule.pow2_scales:
        raise ValueError(f"pow2_scales applies to fp8_block only, not {bf.name}")
    if not _is_int(axis):
        raise TypeError(f"axis must be an integer, got {axis!r}")
    if not -arr.ndim <= axis < arr.ndim:
        raise ValueError(f"axis {axis} does not exist: the input has {arr.ndim} dimension(s)")
    block = bf.block if block is None else block
    if isinstance(block, tuple | list):
        if len(block) != 2 or not all(_is_int(b) and b > 0 for b in block):
            raise ValueError(f"block must be a positive integer or a pair of positive integers, got {block!r}")
        if arr.ndim < 2:
            raise ValueError(f"2-D blocks {tuple(block)} need an input of at least 2 dimensions, got {arr.ndim}")
        if axis % arr.ndim != arr.ndim - 1:
            raise ValueError(f"2-D blocks cover the last two axes; axis must be -1, got {axis}")
        return arr.ndim - 1, (int(block[0]), int(block[1])), scale_rounding
    if not (_is_int(block) and block > 0):
        raise ValueError(f"block must be a positive integer or a pair of positive integers, got {block!r}")
    return axis % arr.ndim, int(block), scale_rounding


# Stochastic rounding draws for the padded blocks (see _Layout): past this many padded elements,
# and four times the data, a block is refused rather than allocated.
_MAX_PADDED = 2**26


def _check_padding(lay: _Layout, arr: np.ndarray, block) -> None:
    """ValueError naming ``block`` when the padded blocks would be far larger than the data (only
    an unclamped, stochastic layout can be)."""
    if lay.tiled:
        (m, n) = arr.shape[-2:]
        padded = arr.size // max(m * n, 1) * (m + lay.pads[0]) * (n + lay.pads[1])
    else:
        padded = arr.size // max(arr.shape[lay.axis], 1) * (arr.shape[lay.axis] + lay.pads[0])
    if padded > max(_MAX_PADDED, 4 * arr.size):
        raise ValueError(f"block {block!r} with stochastic rounding pads the input of shape {arr.shape} to "
                         f"{padded:,} elements (one random draw each); use a block no longer than the axis")


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool | np.bool_)
