"""The format table: every float format fpsim simulates, described by its bit layout.

``ALL_FORMATS`` is the one table; ``FORMATS`` is its tensor formats (float32, float16,
bfloat16, the two fp8), ``ELEMENT_FORMATS`` the element types of block-scaled formats (fp8,
fp6, fp4) and float8_e8m0fnu is the MX block scale.

Every limit (``max``, ``tiny``, ``smallest_subnormal``, ``eps``) is *derived* from the layout,
and the tests pin each one to an exact literal.  Canonical names are ml_dtypes'/numpy's; short
aliases (``fp16``, ``bf16``, ``e4m3``, ...) are accepted wherever a format is named.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

__all__ = ["Format", "ALL_FORMATS", "FORMATS", "TENSOR_FORMATS", "tensor_format", "ELEMENT_FORMATS", "FP8_FORMATS", "LOW_FORMATS",
           "F32", "get_format", "format_names"]


@dataclass(frozen=True)
class Format:
    """A binary floating-point format, described by its bit layout.

    ``specials`` says what the top of the exponent range holds:

    - ``"ieee"``: the all-ones exponent is reserved for inf and NaN (float16, bfloat16,
      float32, float8_e5m2);
    - ``"nan"``: no inf; only the all-ones pattern (exponent and mantissa) is NaN and the rest
      of the top binade holds ordinary numbers (the "fn" formats float8_e4m3fn and, having no
      mantissa bits, float8_e8m0fnu, whose whole top binade is the one NaN pattern 0xFF);
    - ``"none"``: every pattern is a number, no inf and no NaN (the OCP MX element types
      float6_e2m3fn, float6_e3m2fn, float4_e2m1fn).  Rounding into them always saturates:
      there is nothing else to overflow to.

    ``signed=False`` drops the sign bit (float8_e8m0fnu: negative values are NaN).
    ``subnormals=False`` makes the all-zeros exponent an ordinary binade, so there are no
    subnormals and no zero (float8_e8m0fnu: 0x00 is 2**-127).
    """

    name: str
    dtype: np.dtype
    exponent_bits: int
    mantissa_bits: int
    specials: str = "ieee"
    signed: bool = True
    subnormals: bool = True
    aliases: tuple[str, ...] = field(default=())

    @property
    def bits(self) -> int:
        return int(self.signed) + self.exponent_bits + self.mantissa_bits

    @property
    def bias(self) -> int:
        return 2 ** (self.exponent_bits - 1) - 1

    @property
    def ieee_top(self) -> bool:
        """The all-ones exponent is reserved for inf/NaN, IEEE style."""
        return self.specials == "ieee"

    @property
    def has_inf(self) -> bool:
        return self.specials == "ieee"

    @property
    def has_nan(self) -> bool:
        return self.specials != "none"

    @property
    def has_zero(self) -> bool:
        return self.subnormals

    @property
    def saturates(self) -> bool:
        """No inf and no NaN to overflow to: every overflow (and +-inf) becomes +-max."""
        return self.specials == "none"

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal binade."""
        return (1 if self.subnormals else 0) - self.bias

    @property
    def emax(self) -> int:
        """Exponent of the largest finite binade."""
        top = 2**self.exponent_bits - 1 - self.bias
        if self.specials == "ieee" or (self.specials == "nan" and self.mantissa_bits == 0):
            return top - 1
        return top

    @property
    def max(self) -> float:
        """Largest finite value ("fn" formats with mantissa bits: the top pattern is NaN, so
        one step less)."""
        frac = 2.0 - 2.0 ** -self.mantissa_bits
        if self.specials == "nan" and self.mantissa_bits > 0:
            frac -= 2.0 ** -self.mantissa_bits
        return frac * 2.0**self.emax

    @property
    def tiny(self) -> float:
        """Smallest positive normal value."""
        return 2.0**self.emin

    @property
    def smallest_subnormal(self) -> float:
        """Smallest positive value (``tiny`` itself in a format without subnormals)."""
        return 2.0 ** (self.emin - self.mantissa_bits) if self.subnormals else self.tiny

    @property
    def eps(self) -> float:
        """The ulp of 1.0."""
        return 2.0 ** -self.mantissa_bits

    @property
    def flush_threshold(self) -> float:
        """|x| at or below this rounds to zero (to nearest): half the smallest subnormal.

        Exactly this value is a tie between 0 and the smallest subnormal and goes to the
        even neighbour, 0.  A format without zero (float8_e8m0fnu) flushes nothing: 0.0.
        """
        return self.smallest_subnormal / 2 if self.has_zero else 0.0

    @property
    def overflow_threshold(self) -> float:
        """|x| at or above this overflows when rounding to nearest: max + half an ulp of max
        (in a saturating format, it is clamped to max from there on)."""
        return self.max + 2.0 ** (self.emax - self.mantissa_bits) / 2

    @property
    def precision(self) -> int:
        """Significant bits of a normal number, hidden bit included."""
        return self.mantissa_bits + 1

    def __str__(self) -> str:
        return self.name


def _mx(name, e, m, **kw) -> Format:
    return Format(name, np.dtype(getattr(ml_dtypes, name)), e, m, **kw)


# One table.  The element and scale formats of block-scaled formats (OCP Microscaling Formats
# (MX) Specification v1.0, section 5: FP6 E2M3 / E3M2, FP4 E2M1, the E8M0 scale) come last.
ALL_FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("float32", np.dtype(np.float32), 8, 23, aliases=("fp32", "single")),
        Format("float16", np.dtype(np.float16), 5, 10, aliases=("fp16", "half")),
        Format("bfloat16", np.dtype(ml_dtypes.bfloat16), 8, 7, aliases=("bf16",)),
        _mx("float8_e4m3fn", 4, 3, specials="nan", aliases=("e4m3", "fp8_e4m3")),
        _mx("float8_e5m2", 5, 2, aliases=("e5m2", "fp8_e5m2")),
        _mx("float6_e2m3fn", 2, 3, specials="none", aliases=("e2m3", "fp6_e2m3")),
        _mx("float6_e3m2fn", 3, 2, specials="none", aliases=("e3m2", "fp6_e3m2")),
        _mx("float4_e2m1fn", 2, 1, specials="none", aliases=("e2m1", "fp4_e2m1", "fp4")),
        _mx("float8_e8m0fnu", 8, 0, specials="nan", signed=False, subnormals=False, aliases=("e8m0", "e8m0fnu")),
    )
}
# The formats a whole tensor is stored and computed in (what the figures, the bit explorer and the
# device checks iterate); the others exist as the elements and scales of block formats.
TENSOR_FORMATS = ("float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")
FORMATS: dict[str, Format] = {n: ALL_FORMATS[n] for n in TENSOR_FORMATS}
ELEMENT_FORMATS = ("float8_e4m3fn", "float8_e5m2", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn")
_ALIASES = {a: f.name for f in ALL_FORMATS.values() for a in f.aliases}
_BY_DTYPE = {f.dtype: f for f in ALL_FORMATS.values()}


def format_names() -> str:
    """The valid names, as an error message lists them."""
    aliases = ", ".join(_ALIASES)
    return f"{', '.join(ALL_FORMATS)} (aliases: {aliases})"


def get_format(fmt) -> Format:
    """Look a format up by name, alias, numpy dtype or Format; raise ValueError if unknown."""
    if isinstance(fmt, Format):
        return fmt
    if isinstance(fmt, str):
        key = fmt.strip().lower()
        key = _ALIASES.get(key, key)
        if key in ALL_FORMATS:
            return ALL_FORMATS[key]
        raise ValueError(f"unknown format {fmt!r}; known: {format_names()}")
    try:
        dt = np.dtype(fmt)
    except TypeError:
        raise ValueError(f"unknown format {fmt!r}; known: {format_names()}") from None
    if dt in _BY_DTYPE:
        return _BY_DTYPE[dt]
    raise ValueError(f"unknown format {fmt!r} (dtype {dt}); known: {format_names()}")


def tensor_format(fmt) -> Format:
    """:func:`get_format`, for what a Tensor may be stored in (``FORMATS``): a ValueError names an
    fp6 / fp4 / e8m0 format as what it is - an element or scale format of the block-scaled formats."""
    f = get_format(fmt)
    if f.name not in FORMATS:
        raise ValueError(f"{f.name} is not a tensor format but an element or scale format of the block-scaled "
                         f"formats (fpsim.quantize, lowp.BlockLinear); a tensor is stored in one of "
                         f"{', '.join(TENSOR_FORMATS)}")
    return f


FP8_FORMATS = ("float8_e4m3fn", "float8_e5m2")
LOW_FORMATS = ("float16", "bfloat16", *FP8_FORMATS)  # what the instruments compare by default
F32 = FORMATS["float32"]
