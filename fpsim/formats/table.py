"""The format table: every float format fpsim simulates, described by its bit layout.

``ALL_FORMATS`` is the one table; ``FORMATS`` is its tensor formats (float32, float16,
bfloat16, the two fp8), ``ELEMENT_FORMATS`` the element types of block-scaled formats (fp8,
fp6, fp4) and float8_e8m0fnu is the MX block scale.

Every limit (``max``, ``tiny``, ``smallest_subnormal``, ``eps``) is *derived* from the layout,
and the tests pin each one to an exact literal; a Format is immutable, so each is computed on first
read and kept (the hot paths read them per call).  Canonical names are ml_dtypes'/numpy's; short
aliases (``fp16``, ``bf16``, ``e4m3``, ...) are accepted wherever a format is named.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

__all__ = ["Format", "P3109_FORMATS", "P3109_WIDTHS", "p3109_format", "OCP_INT8", "FLOAT64", "ALL_FORMATS", "FORMATS",
           "TENSOR_FORMATS", "tensor_format", "hand_built_problem", "promote", "ELEMENT_FORMATS", "FP8_FORMATS",
           "LOW_FORMATS", "F32", "get_format", "format_names"]


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

    - ``"p3109"``: the IEEE P3109 layout (:func:`p3109_format`): no -0 (a signed format's
      pattern 100...0 is its one NaN; an unsigned format's NaN is its all-ones pattern), and in
      an ``extended`` format the top pattern of each sign is +-inf.

    ``signed=False`` drops the sign bit (float8_e8m0fnu and unsigned P3109: negative values are
    NaN).  ``subnormals=False`` makes the all-zeros exponent an ordinary binade, so there are no
    subnormals and no zero (float8_e8m0fnu: 0x00 is 2**-127).  ``bias_override`` replaces the
    IEEE bias 2**(e-1) - 1 (P3109 and ocp_int8 define their own).  ``twos_complement``: the
    OCP MX INT8 element (:data:`OCP_INT8`), whose sign is two's complement, so -2 is a value and
    +2 is not.

    P3109 and ocp_int8 have no numpy dtype: their values are held exactly in float32 arrays
    (``dtype`` float32; float64 for the wide P3109 formats whose values float32 does not hold;
    :func:`fpsim.encode` gives their bit patterns).
    """

    name: str
    dtype: np.dtype
    exponent_bits: int
    mantissa_bits: int
    specials: str = "ieee"
    signed: bool = True
    subnormals: bool = True
    aliases: tuple[str, ...] = field(default=())
    bias_override: int | None = None
    extended: bool = False
    twos_complement: bool = False

    @property
    def bits(self) -> int:
        return int(self.signed) + self.exponent_bits + self.mantissa_bits

    @property
    def bias(self) -> int:
        if self.bias_override is not None:
            return self.bias_override
        return 2 ** (self.exponent_bits - 1) - 1

    @property
    def ieee_top(self) -> bool:
        """The all-ones exponent is reserved for inf/NaN, IEEE style."""
        return self.specials == "ieee"

    @property
    def has_inf(self) -> bool:
        return self.specials == "ieee" or (self.specials == "p3109" and self.extended)

    @property
    def has_nz(self) -> bool:
        """-0 is a value (not in P3109, not in ocp_int8, not in an unsigned format)."""
        return self.signed and self.specials != "p3109" and not self.twos_complement

    def __hash__(self) -> int:  # kept: promotion and the kernels' tables look formats up per op
        h = self.__dict__.get("_hash")
        if h is None:
            h = self.__dict__["_hash"] = hash((self.name, self.dtype, self._layout()))
        return h

    @functools.cached_property
    def is_ml_dtype(self) -> bool:
        """Stored in its own numpy / ml_dtypes dtype, whose bits are the format's: any dtype but
        float32 and float64, and those two for their own layouts.  False for P3109, ocp_int8 and a
        hand-built ``Format(..., np.float32, e, m)`` of another layout: their values are held in
        float32 (or float64) arrays, rounded onto the format's grid by :func:`fpsim.cast` (never by
        an ``astype``)."""
        own = _CARRIER_LAYOUTS.get(np.dtype(self.dtype))  # a type (np.float32) or a dtype
        return own is None or self._layout() == own

    def _layout(self) -> tuple:
        return (self.exponent_bits, self.mantissa_bits, self.specials, self.signed, self.subnormals,
                self.bias_override, self.extended, self.twos_complement)

    @property
    def max_negative(self) -> float:
        """The largest magnitude of a negative value: ``max``, except ocp_int8's 2."""
        return 2.0 ** self.emin if self.twos_complement else self.max

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

    @functools.cached_property
    def emin(self) -> int:
        """Exponent of the smallest normal binade."""
        return (1 if self.subnormals else 0) - self.bias

    @functools.cached_property
    def emax(self) -> int:
        """Exponent of the largest finite binade (floor(log2(max)))."""
        if self.specials == "p3109" or self.twos_complement:
            return math.frexp(self.max)[1] - 1
        top = 2**self.exponent_bits - 1 - self.bias
        if self.specials == "ieee" or (self.specials == "nan" and self.mantissa_bits == 0):
            return top - 1
        return top

    @functools.cached_property
    def max(self) -> float:
        """Largest finite value ("fn" formats with mantissa bits: the top pattern is NaN, so
        one step less; P3109: the largest magnitude pattern that is neither NaN nor inf)."""
        if self.specials == "p3109" or self.twos_complement:
            top = 2 ** (self.bits - int(self.signed)) - 1  # the largest magnitude pattern
            top -= int(not self.signed) + int(self.extended)  # an unsigned NaN, an inf
            return self.magnitude_of(top)
        frac = 2.0 - 2.0 ** -self.mantissa_bits
        if self.specials == "nan" and self.mantissa_bits > 0:
            frac -= 2.0 ** -self.mantissa_bits
        return frac * 2.0**self.emax

    def magnitude_of(self, pattern: int) -> float:
        """The magnitude a pattern of exponent and mantissa fields (sign bit excluded) encodes,
        read as a number: 0.m * 2**emin in the all-zeros exponent (subnormals), 1.m * 2**(E - bias)
        above.  Which patterns are NaN or inf is the caller's business."""
        m = self.mantissa_bits
        ef, mf = pattern >> m, pattern & ((1 << m) - 1)
        if ef == 0 and self.subnormals:
            return math.ldexp(mf, self.emin - m)
        return math.ldexp((1 << m) + mf, ef - self.bias - m)

    @functools.cached_property
    def tiny(self) -> float:
        """Smallest positive normal value."""
        return 2.0**self.emin

    @functools.cached_property
    def smallest_subnormal(self) -> float:
        """Smallest positive value (``tiny`` itself in a format without subnormals)."""
        return 2.0 ** (self.emin - self.mantissa_bits) if self.subnormals else self.tiny

    @functools.cached_property
    def eps(self) -> float:
        """The ulp of 1.0: 2^-mantissa_bits where 1.0 is normal; where it lies in the subnormal
        range (ocp_int8: i/64, so 1 + 1/64 follows 1) the subnormal spacing 2^(emin - mantissa_bits)."""
        return 2.0 ** (max(self.emin, 0) - self.mantissa_bits)

    @functools.cached_property
    def flush_threshold(self) -> float:
        """|x| at or below this rounds to zero (to nearest): half the smallest subnormal.

        Exactly this value is a tie between 0 and the smallest subnormal and goes to the
        even neighbour, 0.  A format without zero (float8_e8m0fnu) flushes nothing: 0.0.
        """
        return self.smallest_subnormal / 2 if self.has_zero else 0.0

    @functools.cached_property
    def overflow_threshold(self) -> float:
        """|x| at or above this overflows when rounding to nearest: max + half an ulp of max
        (in a saturating format, it is clamped to max from there on)."""
        return self.max + 2.0 ** (max(self.emax, self.emin) - self.mantissa_bits) / 2

    @property
    def precision(self) -> int:
        """Significant bits of a normal number, hidden bit included."""
        return self.mantissa_bits + 1

    def holds(self, other: Format) -> bool:
        """Whether every finite value of ``other`` is a value of this format (promotion's test).

        True where this format has at least ``other``'s mantissa bits, reaches down to its
        smallest subnormal and up to its max, and has a sign (and -0) where ``other`` does: then at
        every binade of ``other`` this format's spacing is at most ``other``'s and divides it."""
        return (self.mantissa_bits >= other.mantissa_bits and self.smallest_subnormal <= other.smallest_subnormal
                and self.max >= other.max and (self.signed or not other.signed)
                and (self.has_nz or not other.has_nz) and (self.has_nan or not other.has_nan))

    def __str__(self) -> str:
        return self.name


# the layouts of the two carriers, float32 and float64: a format of another layout held in one is not its dtype
_CARRIER_LAYOUTS = {np.dtype(np.float32): (8, 23, "ieee", True, True, None, False, False),
                    np.dtype(np.float64): (11, 52, "ieee", True, True, None, False, False)}


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

# --------------------------------------------------------------------------------------------
# IEEE P3109 (interim report v3, as gfloat's format_info_p3109 defines it) and the OCP MX INT8
# element: element formats only, their values held exactly in float32 arrays.

P3109_WIDTHS = range(2, 17)  # k; P3109_FORMATS lists k = 3..8, every other width is made when named
_P3109_LISTED = range(3, 9)
_P3109_NAME = re.compile(r"p3109_k(\d+)p(\d+)([su])([ef])")


def p3109_format(k: int, p: int, signed: bool = True, extended: bool = True) -> Format:
    """The P3109 format of width ``k`` bits and precision ``p`` (significand bits, the hidden one
    included), named as gfloat names it: ``p3109_k8p4se`` (``s``igned / ``u``nsigned,
    ``e``xtended with +-inf / ``f``inite).

    Signed: 1 sign, k - p exponent and p - 1 mantissa bits, bias 2**(k-p-1) (0 when p = k), NaN
    at 100...0 (there is no -0).  Unsigned: k - p + 1 exponent bits, bias 2**(k-p), NaN at the
    all-ones pattern.  Extended: the largest pattern of each sign below those is +-inf.  Every
    format has subnormals and a zero.  k = 2..16, p = 1..k; the values are held in float32, or in
    float64 where float32 does not hold them (k - p = 9..11 signed, 8..10 unsigned); a format whose
    values float64 does not hold either (k - p above 11 signed, 10 unsigned) is refused, as is a bad
    k or p, by a ValueError naming it.  One record per format (cached).
    """
    if not (isinstance(k, int) and k in P3109_WIDTHS):
        raise ValueError(f"P3109 width k must be one of {P3109_WIDTHS.start}..{P3109_WIDTHS.stop - 1}, got {k!r}")
    if not (isinstance(p, int) and 1 <= p <= k):
        raise ValueError(f"P3109 precision p must be 1..k = 1..{k}, got {p!r}")
    return _p3109(k, p, bool(signed), bool(extended))


@functools.cache
def _p3109(k: int, p: int, signed: bool, extended: bool) -> Format:
    name = f"p3109_k{k}p{p}{'s' if signed else 'u'}{'e' if extended else 'f'}"
    ebits, m = k - p + int(not signed), p - 1
    bias = 2 ** (k - p - 1) if signed and k > p else (0 if signed else 2 ** (k - p))
    top = 2 ** (k - int(signed)) - 1 - int(not signed) - int(extended)  # the largest finite magnitude pattern
    e_top, e_low = max(top >> m, 1) - bias, 1 - bias - m  # its binade; the smallest subnormal's exponent
    for carrier, (hi, lo) in _CARRIER_RANGE.items():
        if e_top <= hi and e_low >= lo:
            return Format(name, carrier, ebits, m, specials="p3109", signed=signed, bias_override=bias,
                          extended=extended)
    raise ValueError(f"{name}: its values span 2**{e_low} .. 2**{e_top + 1}, beyond float64, which holds the wide "
                     f"P3109 formats (k - p at most 11 signed, 10 unsigned)")


# a carrier -> (the largest binade, the smallest subnormal's exponent) it holds exactly
_CARRIER_RANGE = {np.dtype(np.float32): (127, -149), np.dtype(np.float64): (1023, -1074)}
P3109_FORMATS: dict[str, Format] = {
    f.name: f for f in (p3109_format(k, p, s, e) for k in _P3109_LISTED for p in range(1, k + 1)
                        for s in (True, False) for e in (True, False))
}
# OCP MX v1.0 section 5.3.3: an 8-bit two's complement integer with an implicit scale 2**-6, so the
# values are i / 64 for i = -128..127: [-2, 1 + 63/64] (gfloat's format_info_ocp_int8).
OCP_INT8 = Format("ocp_int8", np.dtype(np.float32), 0, 7, specials="none", bias_override=0, twos_complement=True,
                  aliases=("mxint8_element",))
# IEEE binary64, for reference: cast / round_to / encode / decode / ulp / classify take it by name (gfloat's
# binary64); no tensor is stored in it, and a float64 array's dtype still names no format (it is read as numbers).
FLOAT64 = Format("float64", np.dtype(np.float64), 11, 52, aliases=("fp64", "double", "binary64"))
_OTHER = {f.name: f for f in (OCP_INT8, FLOAT64)} | {a: f for f in (OCP_INT8, FLOAT64) for a in f.aliases}


def format_names() -> str:
    """The valid names, as an error message lists them."""
    aliases = ", ".join(_ALIASES)
    return (f"{', '.join(ALL_FORMATS)}, ocp_int8, float64, the IEEE P3109 formats p3109_k<k>p<p><s|u><e|f> for "
            f"k = 2..16, p = 1..k, e.g. p3109_k8p4se (aliases: {aliases}, {', '.join(FLOAT64.aliases)})")


def get_format(fmt) -> Format:
    """Look a format up by name, alias, numpy dtype or Format; raise ValueError if unknown."""
    if isinstance(fmt, Format):
        return fmt
    if isinstance(fmt, str):
        key = fmt.strip().lower()
        key = _ALIASES.get(key, key)
        if key in ALL_FORMATS:
            return ALL_FORMATS[key]
        if key in _OTHER:
            return _OTHER[key]
        if key in P3109_FORMATS:
            return P3109_FORMATS[key]
        m = _P3109_NAME.fullmatch(key)
        if m:  # any other width, made (and kept) here; a bad k or p is a ValueError naming it
            return p3109_format(int(m[1]), int(m[2]), m[3] == "s", m[4] == "e")
        raise ValueError(f"unknown format {fmt!r}; known: {format_names()}")
    try:
        dt = np.dtype(fmt)
    except TypeError:
        raise ValueError(f"unknown format {fmt!r}; known: {format_names()}") from None
    if dt in _BY_DTYPE:
        return _BY_DTYPE[dt]
    raise ValueError(f"unknown format {fmt!r} (dtype {dt}); known: {format_names()}")


def tensor_format(fmt) -> Format:
    """:func:`get_format`, for what a Tensor may be stored in: the table's ``FORMATS``, or a
    hand-built :class:`Format` (:func:`hand_built_problem` says which); a ValueError names an fp6 /
    fp4 / e8m0 format as what it is - an element or scale format of the block-scaled formats.

    A hand-built format with an ml_dtypes dtype (``Format("float8_e3m4", ml_dtypes.float8_e3m4, 3,
    4)``) is stored in that dtype; one held in float32 (``Format("e3m4", np.float32, 3, 4)``) in
    float32 arrays whose values the engine rounds onto the format's grid - the same numbers, 4 bytes a
    value in memory (``Tensor.nbytes`` still counts the format's bits)."""
    f = get_format(fmt)
    if f in _HAND_BUILT_OK:
        return f
    if f is FLOAT64:
        raise ValueError("float64 is not a tensor format: fpsim holds it for reference (fpsim.cast, round_to, encode, "
                         f"ulp, classify); a tensor is stored in one of {', '.join(TENSOR_FORMATS)}")
    if f not in _TABLE_RECORDS and f.specials != "p3109":
        problem = hand_built_problem(f)
        if problem:
            raise ValueError(f"{f.name} cannot be a tensor format: {problem}")
        _HAND_BUILT_OK.add(f)
        return f
    if not f.is_ml_dtype:
        raise ValueError(f"{f.name} is not a tensor format but an element format (P3109 and ocp_int8 values are "
                         f"held in float32: fpsim.cast, fpsim.round_to, fpsim.encode, fpsim.quantize); a tensor is "
                         f"stored in one of {', '.join(TENSOR_FORMATS)}")
    if f.name not in FORMATS:
        raise ValueError(f"{f.name} is not a tensor format but an element or scale format of the block-scaled "
                         f"formats (fpsim.quantize, lowp.BlockLinear); a tensor is stored in one of "
                         f"{', '.join(TENSOR_FORMATS)}")
    return f


_TABLE_RECORDS = {*ALL_FORMATS.values(), OCP_INT8, *P3109_FORMATS.values()}
_HAND_BUILT_OK: set = set()


def hand_built_problem(f: Format) -> str:
    """Why a hand-built format cannot hold a tensor ("" if it can).  The ops compute in float32 and
    make -0, NaN and overflow, so a tensor format is signed, has zero, -0 and NaN, and every value
    is a float32 value; it may not take a table format's name (two formats would answer to it)."""
    if f.name in ALL_FORMATS or f.name in _ALIASES or f.name in _OTHER or _P3109_NAME.fullmatch(f.name):
        return f"the name {f.name!r} is a table format's; give a hand-built format a name of its own"
    if f.specials not in ("ieee", "nan") or not (f.signed and f.subnormals) or f.twos_complement:
        return ("a tensor format needs a sign, subnormals and zero, -0 and NaN (specials 'ieee' or 'nan'); "
                f"this one has specials={f.specials!r}, signed={f.signed}, subnormals={f.subnormals}")
    if f.mantissa_bits > 23 or f.emax > 127 or f.emin - f.mantissa_bits < -149:
        return "its values are not all float32 values (the ops compute in float32): at most 8 exponent and 23 mantissa bits"
    return ""


# Promotion: the result of an op on tensors of several formats is the first format, in this order,
# that holds every input's values (Format.holds): the inputs themselves (an input that holds the
# others wins), then the table's tensor formats from the narrowest: fp8, float16, bfloat16, float32.
# So float16 + bfloat16 -> float32, e4m3 + e5m2 -> float16, fp8 + bfloat16 -> bfloat16 (PyTorch's
# pairs; PyTorch refuses the fp8 pair), and a hand-built float8_e3m4 + float16 -> float16.
_PROMOTED: dict = {}


def promote(*fmts: Format) -> Format:
    """The format an op on tensors in ``fmts`` computes into: the narrowest format that holds all
    of their values (the rule above; derived from the formats' fields, so a format added to the table
    or built by hand mixes with the others).  Cached per tuple of formats: it runs for every op."""
    first = fmts[0]
    if all(f is first for f in fmts):
        return first
    out = _PROMOTED.get(fmts)
    if out is None:
        out = _PROMOTED[fmts] = _promote(tuple(dict.fromkeys(fmts)))
    return out


def _promote(fmts: tuple[Format, ...]) -> Format:
    by_width = sorted(FORMATS.values(), key=lambda f: f.bits)  # stable: the table's order within a width
    for cand in (*fmts, *by_width):
        if all(cand.holds(f) for f in fmts):
            return cand
    return F32  # not reached: float32 holds every tensor format


FP8_FORMATS = ("float8_e4m3fn", "float8_e5m2")
LOW_FORMATS = ("float16", "bfloat16", *FP8_FORMATS)  # what the instruments compare by default
F32 = FORMATS["float32"]
