"""Where the commands write: a folder made if missing and checked writable before any work, so a
command that cannot keep its output says so in one line before it computes anything
(``fpsim reproduce``, ``fpsim labs --html``, ``fpsim figures``)."""

from __future__ import annotations

import tempfile
from pathlib import Path

__all__ = ["FILE", "folder_problem"]

FILE = "a file"  # what folder_problem says where a file stands in the folder's place


def folder_problem(folder) -> str | None:
    """None when ``folder`` is a folder a file can be written into - made if missing (parents too),
    and a temporary file made and removed there to see; else why not: :data:`FILE` where a file
    stands there, or the system's reason (``"Permission denied"``, ``"Read-only file system"``)."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        return FILE
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".fpsim-", suffix=".tmp"):
            pass
    except OSError as e:
        return str(e.strerror or e)
    return None
