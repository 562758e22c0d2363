"""Text a lab prints, made to fit: JupyterLab wraps an output line longer than about 100
characters mid-word and mid-number, so the labs print long sentences broken between words
(:func:`wrapped`), the way :func:`fpsim.experiments.format_table` with ``width=100`` breaks its
notes, and leave the lines of a table as they are."""

from __future__ import annotations

from ..experiments.report import wrap_line

__all__ = ["WIDTH", "wrapped"]

WIDTH = 100  # the widest line a lab prints


def wrapped(lines, width: int = WIDTH) -> str:
    """``lines`` (a string, or an iterable of lines such as a figure's ``notes``) as one string in
    which every sentence longer than ``width`` is broken between words, each continuation indented
    two spaces past its line's indent; a table's lines (columns two spaces apart) stay whole."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    return "\n".join(wrap_line(str(line), width) for line in lines)
