"""The plain-text tables every command prints: a header, a rule of dashes, one line per row;
and the one way their cells write a share as a percentage (:func:`percent`)."""

from __future__ import annotations

__all__ = ["text_table", "percent"]


def text_table(cols, rows, right=()) -> list[str]:
    """Lines of a table with columns as wide as their widest cell, two spaces apart; the
    column indices in ``right`` are right-aligned (numbers), the rest left-aligned.  Trailing
    spaces are dropped."""
    rows = [[str(v) for v in r] for r in rows]
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(cols)]
    right = set(right)

    def line(cells):
        return "  ".join(v.rjust(w) if i in right else v.ljust(w) for i, (v, w) in enumerate(zip(cells, widths))).rstrip()

    return [line(cols), "  ".join("-" * w for w in widths), *(line(r) for r in rows)]


def percent(part, whole=1, digits: int = 2, *, zero: str | None = None, small: bool = False) -> str:
    """``100 * part / whole`` with ``digits`` decimals and a percent sign.

    ``percent(1, 8)`` is ``"12.50%"``; a fraction is ``percent(0.0625, digits=1)`` (``"6.2%"``).
    ``"-"`` when ``whole`` is 0 (a share of nothing).  ``zero``: what to write instead when
    ``part`` is 0 (e.g. ``"0"``); ``small=True``: a share below ``10**-digits`` percent keeps 3
    significant digits (``"0.00123%"``) instead of showing as zero.
    """
    if whole == 0:
        return "-"
    if zero is not None and part == 0:
        return zero
    p = 100.0 * part / whole
    if small and p < 10.0**-digits:
        return f"{p:.3g}%"
    return f"{p:.{digits}f}%"
