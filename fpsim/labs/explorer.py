"""Bits you can click (lab 01): one number in one format, bit by bit.

:class:`BitExplorer` is the model: a format and a bit pattern.  Toggle any bit and read the
value, its category (zero, subnormal, normal, inf, nan), its two neighbours and the ulp; type a
number and see the pattern it rounds to; switch the format and the value is rounded into the
new one.  Every value is decoded by numpy / ml_dtypes from the pattern itself.

:func:`explore` shows it: with ipywidgets in a Jupyter kernel, a row of buttons (one per bit,
coloured by field; click one to flip it), a box to type a number into and a format menu; without them it prints
the same description for the starting value - the plain-code fallback.  In code::

    e = BitExplorer("float16", 1.0)
    e.toggle(1)          # bit 0 is the sign, then the exponent bits, then the mantissa bits
    print(e.describe())
"""

from __future__ import annotations

import math

import numpy as np

from ..checks import check_integer
from ..formats import FORMATS, UINT_VIEWS, cast, get_format, ulp

__all__ = ["BitExplorer", "explore", "EXPLORER_FORMATS"]

EXPLORER_FORMATS = tuple(FORMATS)  # float32, float16, bfloat16, float8_e4m3fn, float8_e5m2
_UINT = {8 * n: v for n, v in UINT_VIEWS.items()}  # bits -> the unsigned view
_FIELD_COLORS = {"sign": "#d9d9d9", "exponent": "#9ecae1", "mantissa": "#fdd0a2"}


class BitExplorer:
    """A bit pattern of one format.  ``bits`` is the pattern as an unsigned integer; bit index
    ``i`` counts from the left as the pattern is written: 0 is the sign, then the exponent bits,
    then the mantissa bits."""

    def __init__(self, fmt="float16", value: float = 1.0):
        self.format = get_format(fmt)
        self.bits = 0
        self.set_value(value)

    # -- changing it ---------------------------------------------------------------------

    def set_value(self, x) -> BitExplorer:
        """Round ``x`` once to nearest into the format (as :func:`fpsim.cast`) and keep its pattern."""
        stored = np.asarray(cast(np.float64(float(x)), self.format)).reshape(())
        self.bits = int(stored.view(_UINT[self.format.bits]))
        return self

    def set_bits(self, bits: int) -> BitExplorer:
        """Take the pattern ``bits`` (an integer with at most ``format.bits`` bits)."""
        self.bits = check_integer(bits, f"a {self.format.name} pattern", 0, 2**self.format.bits - 1)
        return self

    def toggle(self, i: int) -> BitExplorer:
        """Flip bit ``i`` (0 = the sign bit, counting to the right)."""
        n = self.format.bits
        check_integer(i, f"the bit index of a {self.format.name} pattern", 0, n - 1)
        self.bits ^= 1 << (n - 1 - int(i))
        return self

    def set_format(self, fmt) -> BitExplorer:
        """Switch to ``fmt``, rounding the current value into it (NaN stays NaN)."""
        v = self.value
        self.format = get_format(fmt)
        return self.set_value(v)

    # -- reading it ----------------------------------------------------------------------

    @property
    def value(self) -> float:
        """The pattern's value, decoded by numpy / ml_dtypes (a Python float, exact)."""
        return float(np.array(self.bits, dtype=_UINT[self.format.bits]).view(self.format.dtype).astype(np.float64))

    @property
    def sign(self) -> int:
        return self.bits >> (self.format.bits - 1)

    @property
    def exponent(self) -> int:
        f = self.format
        return (self.bits >> f.mantissa_bits) & ((1 << f.exponent_bits) - 1)

    @property
    def mantissa(self) -> int:
        return self.bits & ((1 << self.format.mantissa_bits) - 1)

    @property
    def category(self) -> str:
        """zero, subnormal, normal, inf or nan."""
        v = self.value
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf"
        if v == 0:
            return "zero"
        return "subnormal" if abs(v) < self.format.tiny else "normal"

    @property
    def bit_string(self) -> str:
        """The pattern with the fields separated by spaces, e.g. ``0 01111 0000000000``."""
        f = self.format
        s = format(self.bits, f"0{f.bits}b")
        return f"{s[0]} {s[1:1 + f.exponent_bits]} {s[1 + f.exponent_bits:]}"

    @property
    def hex(self) -> str:
        return f"0x{self.bits:0{self.format.bits // 4}X}"

    def field_of(self, i: int) -> str:
        """Which field bit ``i`` belongs to: sign, exponent or mantissa."""
        return "sign" if i == 0 else "exponent" if i <= self.format.exponent_bits else "mantissa"

    def _step(self, up: bool) -> float | None:
        """The neighbouring number of the format above (``up``) or below the value; None past
        the largest finite number in that direction, for inf and for NaN."""
        f = self.format
        v = self.value
        if math.isnan(v) or math.isinf(v):
            return None
        if v == 0:
            return f.smallest_subnormal if up else -f.smallest_subnormal
        away = (v > 0) == up  # moving away from zero: the magnitude's pattern grows by one
        mag = self.bits & ((1 << (f.bits - 1)) - 1)
        mag = mag + 1 if away else mag - 1
        n = np.array((self.bits & (1 << (f.bits - 1))) | mag, dtype=_UINT[f.bits]).view(f.dtype).astype(np.float64)
        n = float(n)
        if not math.isfinite(n):
            return None
        return n

    @property
    def neighbours(self) -> tuple[float | None, float | None]:
        """(the next number below, the next number above); None where there is none."""
        return self._step(False), self._step(True)

    @property
    def ulp(self) -> float:
        """The gap from |value| to the next number away from zero (:func:`fpsim.ulp`); NaN for NaN."""
        return float(ulp(self.value, self.format))

    def formula(self) -> str:
        f = self.format
        sign = "-" if self.sign else "+"
        den = 2**f.mantissa_bits
        cat = self.category
        if cat == "normal":
            return f"{sign}(1 + {self.mantissa}/{den}) x 2^({self.exponent} - {f.bias}) = {self.value!r}"
        if cat == "subnormal":
            return f"{sign}(0 + {self.mantissa}/{den}) x 2^{f.emin} = {self.value!r}   (no hidden 1)"
        if cat == "zero":
            return f"{sign}0: exponent and mantissa all zero"
        if cat == "inf":
            return f"{sign}inf: exponent all ones, mantissa zero"
        if f.has_inf:
            return "NaN: exponent all ones, mantissa not zero"
        return "NaN: float8_e4m3fn keeps only S 1111 111 for NaN (it has no inf)"

    def describe(self) -> str:
        """Everything about the pattern, as text (what the widget shows)."""
        below, above = self.neighbours
        show = lambda x: "none" if x is None else repr(x)
        sig = (self.format.mantissa_bits + 1 if self.category == "normal"
               else self.mantissa.bit_length() if self.category == "subnormal" else 0)
        return "\n".join([
            f"{self.format.name}: {self.bit_string}  ({self.hex})",
            f"  value       {self.value!r}  ({self.category}" + (f", {sig} significant bits)" if sig else ")"),
            f"  fields      sign {self.sign}, exponent {self.exponent} (bias {self.format.bias}), "
            f"mantissa {self.mantissa}",
            f"  formula     {self.formula()}",
            f"  neighbours  {show(below)} below, {show(above)} above",
            f"  ulp         {self.ulp!r} (the gap to the next number away from zero)",
        ])

    def __repr__(self) -> str:
        return f"BitExplorer({self.format.name!r}, {self.value!r})"


def explore(value: float = 0.1, fmt="float16"):
    """The bit explorer: widgets when :func:`fpsim.labs.widgets_available`, else the printed
    description of ``value`` in ``fmt`` (what the widget shows first).  Returns None."""
    from . import widgets_available

    if not widgets_available():
        print(BitExplorer(fmt, value).describe())
        print("(no widgets here: with ipywidgets in Jupyter each bit is a button to click. In code:\n"
              f" BitExplorer({get_format(fmt).name!r}, {value!r}).toggle(i), set_value(x), set_format(name))")
        return None
    _widget(BitExplorer(fmt, value))
    return None


def _bit_button(w, model: BitExplorer, i: int, ch: str, on_click):
    """Bit ``i`` (showing ``ch``) as a plain ``Button`` coloured by its field; a click calls
    ``on_click(i, button)``.  Not a ``ToggleButton``: its style has no ``button_color``, so a
    colour set on it is never sent to the browser and every bit shows grey."""
    b = w.Button(description=ch, tooltip=f"bit {i}: {model.field_of(i)}", layout=w.Layout(width="32px", padding="0px"))
    b.style.button_color = _FIELD_COLORS[model.field_of(i)]
    b.style.font_weight = "bold" if ch == "1" else "normal"
    b.on_click(lambda button, i=i: on_click(i, button))
    return b


def _widget(model: BitExplorer) -> None:
    import ipywidgets as w
    from IPython.display import display

    fmt_menu = w.Dropdown(options=list(EXPLORER_FORMATS), value=model.format.name, description="format")
    number = w.Text(value=repr(model.value), description="number", continuous_update=False)
    row = w.HBox()
    out = w.HTML()
    busy = {"on": False}

    def refresh():
        busy["on"] = True
        try:
            s = format(model.bits, f"0{model.format.bits}b")
            row.children = [_bit_button(w, model, i, ch, on_toggle) for i, ch in enumerate(s)]
            number.value = repr(model.value)
            out.value = "<pre>" + model.describe() + "</pre>"
        finally:
            busy["on"] = False

    def on_toggle(i, _button=None):
        if not busy["on"]:
            model.toggle(i)
            refresh()

    def on_number(change):
        if busy["on"]:
            return
        try:
            model.set_value(float(change["new"]))
        except ValueError:
            out.value = f"<pre>not a number: {change['new']!r}</pre>"
            return
        refresh()

    def on_format(change):
        if not busy["on"]:
            model.set_format(change["new"])
            refresh()

    number.observe(on_number, names="value")
    fmt_menu.observe(on_format, names="value")
    refresh()
    display(w.VBox([w.HBox([fmt_menu, number]), row, out]))
