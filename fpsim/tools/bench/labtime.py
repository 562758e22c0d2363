"""How long a learner waits (``fpsim bench --labs``): each lab notebook run top to bottom, and its
slowest cell.

``time_labs()`` runs every notebook in ``labs/`` (or the ``paths`` given) in a fresh kernel with
nbclient, as the test suite does, and reports for each the wall time from kernel start to the
last cell and the longest single cell.  The labs' README quotes these numbers; rerun this to
check them on your own machine.  nbclient and a Jupyter kernel are needed only when this is
called (they come with ``pip install -e ".[labs]"`` or ``".[test]"``).
"""

from __future__ import annotations

import os
import time
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

from ... import state
from ..labs_files import notebook_client, notebook_dir

__all__ = ["LabTime", "CellTime", "LabFailed", "lab_paths", "resolve_labs", "time_lab", "time_labs", "timing_table",
           "print_lab_times", "kernel_environment"]


class LabTime(NamedTuple):
    """One lab: its file name, seconds from kernel start to the end of the last cell, and
    seconds of its slowest cell."""

    name: str
    seconds: float
    slowest_cell: float


class CellTime(NamedTuple):
    """One code cell: its index in the notebook, seconds the kernel spent on it, first line."""

    index: int
    seconds: float
    first_line: str


def kernel_environment(**extra):
    """What a lab's kernel inherits (the tests run the labs the same way): no display (Agg, unless
    ``MPLBACKEND`` says otherwise), and the plain-code fallback of every slider and of the bit
    explorer (a widget would swallow an error); plus ``extra``.  Restored afterwards."""
    return state.environment({"MPLBACKEND": os.environ.get("MPLBACKEND") or "Agg", "FPSIM_LABS_NO_WIDGETS": "1",
                              **extra})


def lab_paths(directory=None) -> list[Path]:
    """The lab notebooks (``NN_*.ipynb``) in ``directory``, by number.  Default: the ones this fpsim
    has (``fpsim.tools.labs_files.notebook_dir``: a wheel's or a checkout's)."""
    d = Path(directory) if directory is not None else notebook_dir()
    return sorted(d.glob("[0-9][0-9]_*.ipynb"))


def resolve_labs(names, directory=None) -> list[Path]:
    """The notebooks ``fpsim bench --labs NAME ...`` names: a NAME that is a file is that file; any
    other is one of :func:`lab_paths` by number (``8``, ``08``), by name (``08_fp8_in_miniature``)
    or by file name (``08_fp8_in_miniature.ipynb``).  A NAME that is neither is a ValueError, before
    anything runs, naming it and the labs there are."""
    paths = None
    out = []
    for name in names:
        text = str(name)
        if Path(text).is_file():
            out.append(Path(text))
            continue
        if paths is None:
            try:
                paths = lab_paths(directory)
            except ValueError:  # this fpsim has no labs: only files can be named
                paths = []
        key = text[:-len(".ipynb")] if text.endswith(".ipynb") else text
        match = [p for p in paths if p.stem == key or (key.isdigit() and int(key) == int(p.name[:2]))]
        if not match:
            known = ", ".join(p.stem for p in paths) or "none here"
            raise ValueError(f"--labs {text}: no such notebook, nor a lab of that number or name; the labs are "
                             f"{known} (name one by number, name or path)")
        out.append(match[0])
    return out


def _seconds(meta: dict) -> float | None:
    t = meta.get("execution", {})
    start, end = t.get("iopub.execute_input"), t.get("shell.execute_reply")
    if not (start and end):
        return None
    parse = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00"))
    return (parse(end) - parse(start)).total_seconds()


class LabFailed(Exception):
    """A lab that did not run to its end: which one, at which cell, and the error's first line."""


def _notebook_modules():
    """nbclient and nbformat, or one ValueError saying how to get them."""
    try:
        import nbclient
        import nbformat
    except ImportError as e:
        raise ValueError(f"fpsim bench --labs runs the notebooks with nbclient and nbformat; {e.name or e} is not "
                         "installed here (pip install -e '.[labs]')") from None
    return nbclient, nbformat


def _failed_cell(nb) -> str:
    """'cell N: Error: message' of the first code cell holding an error output."""
    for i, c in enumerate(nb.cells):
        for o in c.get("outputs", []) if c.cell_type == "code" else []:
            if o.get("output_type") == "error":
                return f"cell {i}: {o.get('ename', 'error')}: {str(o.get('evalue', '')).splitlines()[0][:200]}"
    return "a cell"


def time_lab(path, timeout: int = 600, kernel_name: str = "python3") -> tuple[LabTime, list[CellTime]]:
    """Run one notebook top to bottom in a fresh kernel (its folder as working directory) and
    time it.  Returns the :class:`LabTime` and one :class:`CellTime` per code cell.  A notebook
    that cannot be read, or a kernel that does not exist, is a ValueError naming it; a cell that
    raises (or times out, or kills the kernel) is a :class:`LabFailed` naming the lab and cell."""
    _, nbformat = _notebook_modules()
    path = Path(path)
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as e:  # missing, not JSON, not a notebook
        raise ValueError(f"{path}: not a readable notebook ({type(e).__name__}: {str(e).splitlines()[0][:200]})") from None
    client = notebook_client(nb, timeout=timeout, kernel_name=kernel_name, record_timing=True,
                             resources={"metadata": {"path": str(path.parent)}})
    with kernel_environment():
        t0 = time.perf_counter()
        try:
            client.execute()
        except KeyError as e:  # jupyter_client's NoSuchKernel
            raise ValueError(f"{path.name}: no Jupyter kernel {kernel_name!r} here ({e}); install ipykernel") from None
        except Exception as e:  # CellExecutionError, CellTimeoutError, DeadKernelError
            where = _failed_cell(nb) if type(e).__name__ == "CellExecutionError" else type(e).__name__
            raise LabFailed(f"{path.name} failed at {where}") from None
        total = time.perf_counter() - t0
    cells = []
    for i, c in enumerate(nb.cells):
        if c.cell_type != "code":
            continue
        s = _seconds(c.get("metadata", {}))
        first = next((ln for ln in c.source.splitlines() if ln.strip()), "")
        cells.append(CellTime(i, s if s is not None else float("nan"), first[:60]))
    slowest = max((c.seconds for c in cells if c.seconds == c.seconds), default=0.0)
    return LabTime(path.name, total, slowest), cells


def time_labs(paths=None, timeout: int = 600, kernel_name: str = "python3") -> list[LabTime]:
    """(lab name, seconds, slowest cell seconds) for every lab notebook, run one after the
    other.  ``paths``: notebook files; default :func:`lab_paths`."""
    paths = lab_paths() if paths is None else [Path(p) for p in paths]
    return [time_lab(p, timeout=timeout, kernel_name=kernel_name)[0] for p in paths]


def timing_table(times) -> str:
    """A plain-text table of :class:`LabTime` rows."""
    from ...textable import text_table

    rows = [[t.name, f"{t.seconds:.1f} s", f"{t.slowest_cell:.2f} s"] for t in times]
    return "\n".join(text_table(["lab", "whole notebook", "slowest cell"], rows, right=(1, 2)))


def print_lab_times(paths=None, as_json: bool = False) -> int:
    """``fpsim bench --labs``: time every lab (or ``paths``) and print the table, or strict JSON.
    A lab that fails is one line on stderr naming it and its cell, the others still run; the
    exit status is then 1.  A name that is no notebook and no lab (:func:`resolve_labs`) is a
    ValueError before any lab runs (the command's usage error, exit 2)."""
    import sys

    from ..jsonout import dumps

    _notebook_modules()
    paths = lab_paths() if paths is None else resolve_labs(paths)
    times, failed = [], []
    for p in paths:
        try:
            times.append(time_lab(p)[0])
        except (LabFailed, ValueError) as e:  # the others still run; each failure is named below
            failed.append(str(e))
    if as_json:
        print(dumps([t._asdict() for t in times] + [{"failed": f} for f in failed], indent=1))
    elif times:
        print(timing_table(times))
    for f in failed:
        print(f"fpsim bench --labs: {f}", file=sys.stderr)
    return 1 if failed else 0
