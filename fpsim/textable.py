"""The plain-text tables every command prints: a header, a rule of dashes, one line per row."""

from __future__ import annotations

__all__ = ["text_table"]


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
