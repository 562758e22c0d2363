"""Text a lab prints, made to fit: JupyterLab wraps an output line longer than about 100
characters mid-word and mid-number, so the labs print long sentences broken between words
(:func:`wrapped`), the way :func:`fpsim.experiments.format_table` with ``width=100`` breaks its
notes, and leave the lines of a table as they are."""

from __future__ import annotations

from ..experiments.report import split_table_text, wrap_line

__all__ = ["WIDTH", "wrapped"]

WIDTH = 100  # the widest line a lab prints


def wrapped(lines, width: int = WIDTH) -> str:
    """``lines`` (a string, or an iterable of lines such as a figure's ``notes``) as one string in
    which every sentence longer than ``width`` is broken between words, each continuation indented
    two spaces past its line's indent; a table wider than ``width`` (as :func:`~fpsim.textable.text_table`
    prints it, in one of the strings) is split by columns, each part starting with its first column."""
    if isinstance(lines, str):
        lines = [lines]
    return "\n".join(wrap_line(line, width) for text in lines for line in split_table_text(str(text), width).split("\n"))
