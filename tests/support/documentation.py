"""The documentation's text and its tables, for the tests that check quoted numbers against runs."""

from __future__ import annotations

import pathlib

__all__ = ["documentation", "row"]

ROOT = pathlib.Path(__file__).resolve().parents[2]


def documentation() -> str:
    """README.md and every page of docs/, where the tables live."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return "\n".join(p.read_text(encoding="utf-8") for p in pages if p.exists())


def row(doc: str, first_cell: str) -> str:
    """The table row whose first cell is ``first_cell`` (the first one, if several tables have it)."""
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.lstrip().startswith("|") and cells and cells[0] == first_cell:
            return line
    raise AssertionError(f"no table row starting with {first_cell!r} in README.md or docs/")
