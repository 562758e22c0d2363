"""The format table: every float format fpsim simulates, described by its bit layout.

Every limit (``max``, ``tiny``, ``smallest_subnormal``, ``eps``) is *derived* from the layout,
and the tests pin each one to an exact literal.  Canonical names are ml_dtypes'/numpy's; short
aliases (``fp16``, ``bf16``, ``e4m3``, ...) are accepted wherever a format is named.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

__all__ = ["Format", "FORMATS", "FP8_FORMATS", "LOW_FORMATS", "F32", "get_format", "format_names"]


@dataclass(frozen=True)
class Format:
    """A binary floating-point format, described by its bit layout.

    ``ieee_top`` says whether the all-ones exponent is reserved for inf/NaN (IEEE style:
    float16, bfloat16, float32, e5m2).  float8_e4m3fn ("fn" = finite, NaN only) uses that
    exponent for ordinary numbers and gives up only the all-ones mantissa there, for NaN.
    """

    name: str
    dtype: np.dtype
    exponent_bits: int
    mantissa_bits: int
    ieee_top: bool = True
    aliases: tuple[str, ...] = field(default=())

    @property
    def bits(self) -> int:
        return 1 + self.exponent_bits + self.mantissa_bits

    @property
    def bias(self) -> int:
        return 2 ** (self.exponent_bits - 1) - 1

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal binade."""
        return 1 - self.bias

    @property
    def emax(self) -> int:
        """Exponent of the largest finite binade."""
        top = 2**self.exponent_bits - 1 - self.bias
        return top - 1 if self.ieee_top else top

    @property
    def has_inf(self) -> bool:
        return self.ieee_top

    @property
    def max(self) -> float:
        """Largest finite value (e4m3fn: its top mantissa pattern is NaN, so one step less)."""
        frac = 2.0 - 2.0 ** -self.mantissa_bits
        if not self.ieee_top:
            frac -= 2.0 ** -self.mantissa_bits
        return frac * 2.0**self.emax

    @property
    def tiny(self) -> float:
        """Smallest positive normal value."""
        return 2.0**self.emin

    @property
    def smallest_subnormal(self) -> float:
        return 2.0 ** (self.emin - self.mantissa_bits)

    @property
    def eps(self) -> float:
        """The ulp of 1.0."""
        return 2.0 ** -self.mantissa_bits

    @property
    def flush_threshold(self) -> float:
        """|x| at or below this rounds to zero (to nearest): half the smallest subnormal.

        Exactly this value is a tie between 0 and the smallest subnormal and goes to the
        even neighbour, 0.
        """
        return self.smallest_subnormal / 2

    @property
    def overflow_threshold(self) -> float:
        """|x| at or above this overflows when rounding to nearest: max + half an ulp of max."""
        return self.max + 2.0 ** (self.emax - self.mantissa_bits) / 2

    @property
    def precision(self) -> int:
        """Significant bits of a normal number, hidden bit included."""
        return self.mantissa_bits + 1

    def __str__(self) -> str:
        return self.name


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("float32", np.dtype(np.float32), 8, 23, aliases=("fp32", "single")),
        Format("float16", np.dtype(np.float16), 5, 10, aliases=("fp16", "half")),
        Format("bfloat16", np.dtype(ml_dtypes.bfloat16), 8, 7, aliases=("bf16",)),
        Format(
            "float8_e4m3fn",
            np.dtype(ml_dtypes.float8_e4m3fn),
            4,
            3,
            ieee_top=False,
            aliases=("e4m3", "fp8_e4m3"),
        ),
        Format("float8_e5m2", np.dtype(ml_dtypes.float8_e5m2), 5, 2, aliases=("e5m2", "fp8_e5m2")),
    )
}
_ALIASES = {a: f.name for f in FORMATS.values() for a in f.aliases}
_BY_DTYPE = {f.dtype: f for f in FORMATS.values()}


def format_names() -> str:
    """The valid names, as an error message lists them."""
    aliases = ", ".join(_ALIASES)
    return f"{', '.join(FORMATS)} (aliases: {aliases})"


def get_format(fmt) -> Format:
    """Look a format up by name, alias, numpy dtype or Format; raise ValueError if unknown."""
    if isinstance(fmt, Format):
        return fmt
    if isinstance(fmt, str):
        key = fmt.strip().lower()
        key = _ALIASES.get(key, key)
        if key in FORMATS:
            return FORMATS[key]
        raise ValueError(f"unknown format {fmt!r}; known: {format_names()}")
    try:
        dt = np.dtype(fmt)
    except TypeError:
        raise ValueError(f"unknown format {fmt!r}; known: {format_names()}") from None
    if dt in _BY_DTYPE:
        return _BY_DTYPE[dt]
    raise ValueError(f"unknown format {fmt!r} (dtype {dt}); known: {format_names()}")

FP8_FORMATS = ("float8_e4m3fn", "float8_e5m2")
LOW_FORMATS = ("float16", "bfloat16", *FP8_FORMATS)  # what the instruments compare by default
F32 = FORMATS["float32"]
