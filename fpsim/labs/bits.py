"""A float's bits, field by field: sign, exponent, mantissa (lab 01, and lab 02's subnormal).

``fields(x, fmt)`` rounds ``x`` once into ``fmt`` (as :func:`fpsim.cast` does) and reads the
stored bit pattern back: the raw fields, what they mean, and the formula that turns them into
the value.  ``from_fields`` goes the other way, by writing the bit pattern and letting numpy /
ml_dtypes decode it - so the two directions check each other.  ``bit_figure`` draws the
fields as coloured boxes, one row per format.

Reading the fields (every format fpsim knows, bias = 2**(exponent_bits - 1) - 1):

- exponent field 0: zero (mantissa 0) or a SUBNORMAL: value = (-1)**s * m * 2**(emin - M),
  i.e. 0.m * 2**emin with no hidden 1, so only ``m.bit_length()`` significant bits;
- otherwise a NORMAL number: value = (-1)**s * (1 + m / 2**M) * 2**(e - bias);
- the all-ones exponent is inf (mantissa 0) or NaN in IEEE-style formats; float8_e4m3fn
  ("finite") uses it for ordinary numbers and keeps only S.1111.111 for NaN.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

import numpy as np

from ..checks import check_integer
from ..formats import FORMATS, UINT_VIEWS, Format, cast, classify, get_format

__all__ = ["FloatBits", "fields", "from_fields", "show", "bit_figure"]

_UINT = {8 * n: v for n, v in UINT_VIEWS.items()}  # bits -> the unsigned view
WIDTH = 100  # a printed row fits in this many characters: JupyterLab wraps a longer line mid-number
_CATEGORY_NAMES = ("zero", "subnormal", "normal", "inf", "nan")


@dataclass(frozen=True)
class FloatBits:
    """One value stored in one format, taken apart.

    ``value`` is what the bits hold (``source`` rounded once into ``format``, as a Python
    float - exact, since every format here fits in float64); ``sign``, ``exponent`` and
    ``mantissa`` are the raw unsigned fields; ``category`` is zero / subnormal / normal /
    inf / nan.
    """

    format: Format
    source: float
    value: float
    bits: int
    sign: int
    exponent: int
    mantissa: int
    category: str

    @property
    def bit_string(self) -> str:
        """The pattern with the fields separated by spaces, e.g. ``0 01111 0000000000``."""
        f = self.format
        e = format(self.exponent, f"0{f.exponent_bits}b")
        m = format(self.mantissa, f"0{f.mantissa_bits}b")
        return f"{self.sign} {e} {m}"

    @property
    def hex(self) -> str:
        return f"0x{self.bits:0{self.format.bits // 4}X}"

    @property
    def power(self) -> int | None:
        """The power of two the significand is multiplied by: e - bias for a normal number,
        emin for a subnormal (not e - bias: the exponent field 0 means emin, without the
        hidden 1); None for zero, inf and NaN."""
        if self.category == "normal":
            return self.exponent - self.format.bias
        if self.category == "subnormal":
            return self.format.emin
        return None

    @property
    def significant_bits(self) -> int:
        """How many bits of the value are significant: mantissa_bits + 1 (the hidden 1) for a
        normal number; for a subnormal only those from the mantissa's leading 1 down."""
        if self.category == "normal":
            return self.format.mantissa_bits + 1
        if self.category == "subnormal":
            return self.mantissa.bit_length()
        return 0

    def formula(self) -> str:
        """How the fields make the value, written out with the numbers of this pattern."""
        f = self.format
        sign = "-" if self.sign else "+"
        den = 2**f.mantissa_bits
        if self.category == "normal":
            return f"{sign}(1 + {self.mantissa}/{den}) x 2^({self.exponent} - {f.bias}) = {self.value!r}"
        if self.category == "subnormal":
            return (f"{sign}(0 + {self.mantissa}/{den}) x 2^{f.emin} "
                    f"= {sign}{self.mantissa} x 2^{f.emin - f.mantissa_bits} = {self.value!r}")
        if self.category == "zero":
            return f"{sign}0 (exponent and mantissa all zero)"
        if self.category == "inf":
            return f"{sign}inf (exponent all ones, mantissa zero)"
        if f.has_inf:
            return "NaN (exponent all ones, mantissa non-zero)"
        return "NaN (float8_e4m3fn: exponent and mantissa all ones)"

    def __str__(self) -> str:
        """One row: name, bits, hex, category and formula; where that passes :data:`WIDTH`
        characters (float32's 32-bit pattern), the formula goes on the next lines, indented under
        the bits and broken between its terms; float64's 64 bits go on a line of their own."""
        head = f"{self.format.name:<14} {self.bit_string:<34} {self.hex:<10} {self.category:<9}"
        row = f"{head} {self.formula()}"
        if len(row) <= WIDTH:
            return row
        pad = " " * 15
        if len(head.rstrip()) > WIDTH:  # float64's 64 bits: the pattern on a line of its own
            head = f"{self.format.name:<14} {self.hex:<10} {self.category}\n{pad}{self.bit_string}"
        formula = textwrap.wrap(self.formula(), WIDTH, initial_indent=pad, subsequent_indent=pad + "  ",
                                break_long_words=False, break_on_hyphens=False)
        return "\n".join([head.rstrip(), *formula])


def fields(x, fmt, rounding: str = "nearest") -> FloatBits:
    """Round the number ``x`` once into ``fmt`` and split the stored bits into their fields."""
    f = get_format(fmt)
    arr = np.asarray(x)
    if arr.size != 1:
        raise ValueError(f"fields() takes one number, got an array of shape {arr.shape}")
    stored = np.asarray(cast(arr.reshape(()), f, rounding))
    bits = int(stored.view(_UINT[f.bits]))
    m_mask = (1 << f.mantissa_bits) - 1
    e_mask = (1 << f.exponent_bits) - 1
    cat = _CATEGORY_NAMES[int(classify(stored, f).category)]
    return FloatBits(
        format=f,
        source=float(arr.reshape(()).astype(np.float64)),
        value=float(stored.astype(np.float64)),
        bits=bits,
        sign=bits >> (f.bits - 1),
        exponent=(bits >> f.mantissa_bits) & e_mask,
        mantissa=bits & m_mask,
        category=cat,
    )


def from_fields(sign: int, exponent: int, mantissa: int, fmt) -> float:
    """The value of the bit pattern with these raw fields, decoded by numpy / ml_dtypes
    (not by fpsim's formula): a check on :func:`fields` and on a learner's own decoder."""
    f = get_format(fmt)
    for name, v, width in (("sign", sign, 1), ("exponent", exponent, f.exponent_bits),
                           ("mantissa", mantissa, f.mantissa_bits)):
        check_integer(v, f"{name} field of {f.name}", 0, 2**width - 1)
    bits = (int(sign) << (f.bits - 1)) | (int(exponent) << f.mantissa_bits) | int(mantissa)
    return float(np.array(bits, dtype=_UINT[f.bits]).view(f.dtype).astype(np.float64))


def show(x, formats=tuple(FORMATS)) -> str:
    """One line per format: ``x``'s stored bits, category and decoding (a printable table)."""
    return "\n".join(str(fields(x, fmt)) for fmt in formats)


_FIELD_COLORS = {"sign": "#d9d9d9", "exponent": "#9ecae1", "mantissa": "#fdd0a2"}


def bit_figure(x, formats=tuple(FORMATS), ax=None, *, title=None, path=None):
    """``x`` stored in each format, drawn as one row of bit boxes: grey sign, blue exponent,
    orange mantissa; the stored value and its category at the right of each row."""
    from ..tools import plots

    plt = plots.pyplot()
    rows = [fields(x, fmt) for fmt in formats]
    widest = max(r.format.bits for r in rows)
    if ax is None:
        with plt.rc_context(plots.STYLE):
            fig, ax = plt.subplots(figsize=(min(22, 3.5 + 0.42 * widest + 4), 0.9 + 0.75 * len(rows)))
    else:
        fig = ax.figure
    with plt.rc_context(plots.STYLE):
        for i, r in enumerate(rows):
            y = len(rows) - 1 - i
            s = format(r.bits, f"0{r.format.bits}b")
            kinds = ["sign"] + ["exponent"] * r.format.exponent_bits + ["mantissa"] * r.format.mantissa_bits
            for j, (bit, kind) in enumerate(zip(s, kinds)):
                ax.add_patch(plt.Rectangle((j, y + 0.1), 0.92, 0.8, facecolor=_FIELD_COLORS[kind],
                                           edgecolor=plots.FORMAT_COLORS[r.format.name], lw=1.2))
                ax.text(j + 0.46, y + 0.5, bit, ha="center", va="center", fontsize=11, family="monospace")
            ax.text(-0.4, y + 0.5, r.format.name, ha="right", va="center", fontsize=12,
                    color=plots.FORMAT_COLORS[r.format.name])
            ax.text(widest + 0.6, y + 0.5, f"{r.value!r}  ({r.category})", ha="left", va="center", fontsize=12)
        for kind, color in _FIELD_COLORS.items():
            ax.add_patch(plt.Rectangle((0, 0), 0, 0, facecolor=color, label=kind))
        ax.set_xlim(-7, widest + 14)
        ax.set_ylim(-0.2, len(rows) + 0.1)
        ax.axis("off")
        ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, fontsize=11, frameon=False)
        ax.set_title(title or f"{x!r} stored in each format", pad=28)
    return plots.finish_figure(fig, path)
