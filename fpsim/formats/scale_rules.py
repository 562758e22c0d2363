"""The scale rule of a block format, as data: how its blocks' shared scales come from their maxima.

A :class:`~fpsim.formats.block.BlockFormat` carries one :class:`ScaleRule` (the model is gfloat's
``BlockFormatInfo`` with its scale callable): the rule computes each block's stored scale, the
float32 factor the elements are multiplied by before rounding and the float32 decode factor, from the
block's amax; it decodes stored scales back to factors; and its fields say what it takes (the
``scale_rounding`` names, ``pow2_scales``) and has (a tensor scale), which is all that quantize,
fake_quantize and the block-scaled Linear ask of a format.  The arithmetic of each rule is in
:mod:`.block_scales` and :mod:`.fouroversix`.

- :data:`E8M0_SCALE` (the MX formats): a power of two per block, stored as e8m0, by one of
  ``SCALE_ROUNDINGS`` (``floor``, the spec's, by default);
- :data:`NVFP4_SCALE`: an e4m3 scale per block under a float32 scale per tensor (TE's rule, or Four
  Over Six);
- :data:`FLOAT32_BLOCK_SCALE` (DeepSeek-V3's fp8 blocks): a float32 scale per block, the element's max
  over the amax, optionally cut to a power of two.

A new rule subclasses :class:`ScaleRule` (an abstract base class) and defines ``scales`` and
``decode``; a subclass that lacks either cannot be built (a TypeError naming the missing method).  A new
block format with an existing rule is one
``BlockFormat`` record (docs/pipeline.md, "Adding a format").
"""

from __future__ import annotations

import abc

import numpy as np

from . import block_scales as bs
from . import fouroversix as fos
from .kernels import fp8_to_f32
from .names import mode_name
from .table import Format

__all__ = ["ScaleRule", "E8M0Scale", "NVFP4Scale", "Float32BlockScale", "E8M0_SCALE", "NVFP4_SCALE",
           "FLOAT32_BLOCK_SCALE", "SCALE_ROUNDINGS"]

SCALE_ROUNDINGS = bs.SCALE_ROUNDINGS
_U32, _F32 = np.uint32, np.float32


class ScaleRule(abc.ABC):
    """How a block format's scales are found and read; the base takes no ``scale_rounding``.
    Abstract: a rule defines :meth:`scales` and :meth:`decode`.

    Fields: ``name`` (the rule's family name: ``mx``, ``nvfp4``, ``fp8_block``), ``roundings`` (the
    ``scale_rounding`` names it takes; empty: none), ``pow2_scales`` (whether quantize's
    ``pow2_scales`` applies), ``tensor_scale`` (a float32 scale per tensor above the block scales),
    ``tensor_core`` (float32 block scales applied after each block's product: a tensor-core chain can
    multiply the elements, as DeepSeek-V3 does), ``four_over_six`` (NVFP4's Four Over Six applies).
    """

    name = "?"
    roundings: tuple[str, ...] = ()
    pow2_scales = False
    tensor_scale = False
    tensor_core = False
    four_over_six = False

    def rounding(self, scale_rounding, format_name: str):
        """``scale_rounding`` as the rule's methods take it (a ValueError if the rule takes none of it)."""
        if scale_rounding is not None:
            raise ValueError(f"scale_rounding applies to the MX formats and nvfp4 only; {format_name} has its own "
                             "scale rule")
        return None

    @abc.abstractmethod
    def scales(self, elem: Format, amax, scale_rounding, pow2: bool, xb=None, expand=None, axes=None):
        """(stored scales, encode factor, decode factor, the tensor's decode factor or None) per block,
        from the float32 ``amax`` of each block (``xb``: the blocked elements, for rules that look
        at them; ``expand`` broadcasts a per-block array against them, ``axes`` are the block axes)."""

    def factors(self, elem: Format, amax, scale_rounding, pow2: bool):
        """(encode factor, decode factor) per block: what fake quantization multiplies by."""
        return self.scales(elem, amax, scale_rounding, pow2)[1:3]

    @abc.abstractmethod
    def decode(self, scales: np.ndarray, tensor_scale) -> np.ndarray:
        """The float32 factor each block's elements are multiplied by, from the stored scales alone."""

    def __repr__(self) -> str:
        return f"<scale rule {self.name}>"


class E8M0Scale(ScaleRule):
    """OCP MX v1.0: X = 2**E per block, stored as e8m0, E from the amax by ``scale_rounding``
    (``floor`` by default; :func:`.block_scales.mx_exponents`)."""

    name = "mx"
    roundings = SCALE_ROUNDINGS

    def rounding(self, scale_rounding, format_name: str):
        return "floor" if scale_rounding is None else mode_name(scale_rounding, SCALE_ROUNDINGS, "scale_rounding")

    def scales(self, elem, amax, scale_rounding, pow2, xb=None, expand=None, axes=None):
        codes, inv, dec = bs.mx_scales(amax, elem, scale_rounding)
        return codes, inv, dec, None

    def factors(self, elem, amax, scale_rounding, pow2):
        if scale_rounding != "floor":
            return super().factors(elem, amax, scale_rounding, pow2)
        # floor: the tables quantize looks up, by amax's exponent field (amax >= 0: no sign bit), without the codes
        field = amax.view(_U32) >> _U32(23)
        _, inv, dec = bs.mx_floor_tables(elem)
        return inv.take(field, mode="clip"), dec.take(field, mode="clip")  # fields < 256

    def decode(self, scales, tensor_scale):
        return fp8_to_f32(scales)  # the e8m0 power of two (NaN for code 0xFF)


class NVFP4Scale(ScaleRule):
    """NVFP4: per tensor S_enc = 448 * 6 / amax, per block an e4m3 decode scale (TE's rule, each
    block's amax to 6), or Four Over Six (``scale_rounding="four_over_six"``, alias ``4/6``)."""

    name = "nvfp4"
    roundings = fos.NVFP4_SCALE_RULES
    tensor_scale = True
    four_over_six = True

    def rounding(self, scale_rounding, format_name: str):
        if scale_rounding is None:
            return None
        key = scale_rounding.strip().lower() if isinstance(scale_rounding, str) else None
        key = "four_over_six" if key == "4/6" else key
        if key not in fos.NVFP4_SCALE_RULES:
            raise ValueError(f"unknown scale_rounding {scale_rounding!r} for {format_name}; known: "
                             f"{', '.join(fos.NVFP4_SCALE_RULES)} (alias 4/6)")
        return None if key == "six" else key

    def scales(self, elem, amax, scale_rounding, pow2, xb=None, expand=None, axes=None):
        top = _finite_max(amax)
        if scale_rounding == "four_over_six":
            s_enc = bs.nvfp4_tensor_scale(top, fos.FOUR_OVER_SIX_SCALE_MAX)
            codes, enc, dec, _ = fos.nvfp4_four_over_six(xb, amax, s_enc, expand, axes, elem)
            return codes, enc, dec, np.float32(1) / s_enc
        s_enc = bs.nvfp4_tensor_scale(top)
        codes, enc, dec = bs.nvfp4_scales(amax, s_enc)
        return codes, enc, dec, np.float32(1) / s_enc

    def decode(self, scales, tensor_scale):
        s = fp8_to_f32(scales)
        with np.errstate(over="ignore", invalid="ignore"):
            return s * _F32(tensor_scale)  # the e4m3 scale times the float32 tensor scale, one float32 product


def _finite_max(amax: np.ndarray):
    """The largest finite value of ``amax`` (float32, >= 0 or inf / NaN), 0.0 if none: one integer max
    of the bit patterns where all are finite (the common case), else of the finite ones."""
    if not amax.size:
        return 0.0
    bits = np.ascontiguousarray(amax).view(_U32)
    hi = bits.max()
    if hi < _U32(0x7F800000):
        return hi.view(_F32)
    finite = amax[np.isfinite(amax)]
    return finite.max() if finite.size else 0.0


class Float32BlockScale(ScaleRule):
    """DeepSeek-V3's fp8 blocks (TE's Float8BlockScaling): a float32 encode scale S = elem max / amax
    per block (with ``pow2_scales`` its exponent bits alone), the stored float32 decode scale 1 / S."""

    name = "fp8_block"
    pow2_scales = True
    tensor_core = True

    def scales(self, elem, amax, scale_rounding, pow2, xb=None, expand=None, axes=None):
        enc, dec = bs.fp8_block_scales(amax, pow2, elem.max)
        return dec, enc, dec, None

    def decode(self, scales, tensor_scale):
        if scales.dtype != np.float32:
            raise TypeError(f"fp8_block scales must be float32, got dtype {scales.dtype}")
        return scales


E8M0_SCALE = E8M0Scale()
NVFP4_SCALE = NVFP4Scale()
FLOAT32_BLOCK_SCALE = Float32BlockScale()
