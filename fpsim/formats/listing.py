"""The table of formats ``fpsim formats`` prints: one row of limits per format, the tensor and
block-element formats by default, and with ``include_all`` ocp_int8, float64 and the IEEE P3109
formats of k = 3..8 bits (the other widths, 2 and 9..16, are named on demand)."""

from __future__ import annotations

from ..textable import text_table
from .table import ALL_FORMATS, FLOAT64, OCP_INT8, P3109_FORMATS, Format

__all__ = ["FORMAT_COLUMNS", "format_rows", "format_row", "format_tables"]

FORMAT_COLUMNS = ["format", "bits", "exp", "man", "bias", "max", "tiny (min normal)", "smallest subnormal",
                  "eps = ulp(1)", "flush to 0 at |x| <=", "inf?"]


def format_row(f: Format) -> list[str]:
    """One format's limits, as text (the columns of :data:`FORMAT_COLUMNS`)."""
    if f.tiny > f.max:
        tiny = "- (all subnormal)"
    else:
        tiny = f"2^{f.emin} = {f.tiny:.6g}"
    if f.specials == "p3109":
        nan = 2 ** (f.bits - 1) if f.signed else 2**f.bits - 1
        specials = ("yes" if f.has_inf else "no") + f", NaN 0x{nan:02X}" + (", no -0" if f.signed else ", unsigned")
    elif f.twos_complement:
        specials = "no, no NaN (saturates to [-2, max]; two's complement)"
    else:
        specials = "yes" if f.has_inf else "no (NaN only)" if f.has_nan else "no, no NaN (saturates)"
    return [f.name, str(f.bits), str(f.exponent_bits), str(f.mantissa_bits), str(f.bias), f"{f.max:.6g}", tiny,
            f"2^{f.emin - f.mantissa_bits} = {f.smallest_subnormal:.6g}" if f.subnormals else "- (none)",
            f"2^{max(f.emin, 0) - f.mantissa_bits} = {f.eps:.6g}",
            _flush(f), specials]


def _flush(f: Format) -> str:
    if not f.has_zero:
        return "- (no zero)"
    if f.flush_threshold == 0:  # float64's: half its smallest subnormal is no float64 number
        return f"2^{f.emin - f.mantissa_bits - 1}"
    return f"{f.flush_threshold:.6g}"


def format_rows(include_all: bool = False) -> list[list[str]]:
    """A row per format: the ones ``fpsim formats`` lists today (``ALL_FORMATS``), and with
    ``include_all`` (``fpsim formats --all``) ocp_int8, float64 and the 132 P3109 formats of k = 3..8 after them."""
    formats = list(ALL_FORMATS.values())
    if include_all:
        formats += [OCP_INT8, FLOAT64, *P3109_FORMATS.values()]
    return [format_row(f) for f in formats]


def format_tables(include_all: bool = False, width: int = 100) -> str:
    """The table of :func:`format_rows` split by columns into as many tables as it takes for no line
    to pass ``width`` characters (each starting with the format's name), for a notebook or a narrow
    terminal: the same cells as ``fpsim formats``, none cut."""
    rows = format_rows(include_all)

    def table(cols):
        return text_table([FORMAT_COLUMNS[i] for i in cols], [[r[i] for i in cols] for r in rows])

    groups = [[0]]
    for i in range(1, len(FORMAT_COLUMNS)):
        if max(len(line) for line in table(groups[-1] + [i])) > width and len(groups[-1]) > 1:
            groups.append([0])
        groups[-1].append(i)
    return "\n\n".join("\n".join(table(g)) for g in groups)
