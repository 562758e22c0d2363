"""``fpsim labs``: the lab notebooks - listed, or run and written as HTML with their outputs.

``fpsim labs --html DIR`` runs every lab (``--lab 1 9`` for some) top to bottom in a fresh kernel
with nbclient, as the test suite does, and writes each, outputs and figures included, as one
self-contained HTML file (nbconvert's ``HTMLExporter``: every figure an inline PNG), plus
``DIR/index.html`` linking them, so that a lab can be read before anything is installed.  The
kernels run as the tests run them: no display (matplotlib's Agg) and no widgets, so lab 01's bit
explorer and the sliders print what the widget would show instead of leaving a blank.  One line
per lab says how long it took.  A lab that fails is named with its cell and error; the others
still run, their HTML is kept, and the exit status is 1.

nbclient, nbformat, nbconvert and a Jupyter kernel come with ``pip install -e ".[labs]"``; they
are imported only when the command runs.
"""

from __future__ import annotations

import html
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from .. import state

# add_arguments too, for the CLI's table of tools (as every tool has)
__all__ = ["main", "lab_files", "select_labs", "run_lab", "title_of", "write_html", "write_labs", "LabError"]

CELL_TIMEOUT = 600  # seconds one cell may take


class LabError(Exception):
    """A lab that did not run to its end: which lab, which cell, what it raised."""


def add_arguments(p) -> None:
    p.add_argument("--html", metavar="DIR", help="run the labs and write DIR/NN_name.html for each (outputs and "
                                                 "figures included) and DIR/index.html linking them")
    p.add_argument("--lab", type=int, nargs="+", metavar="N", help="only these labs, by number (--lab 1 9)")
    p.add_argument("--labs-dir", metavar="DIR", help="the folder holding the notebooks (default: labs/ of this "
                                                     "checkout)")


def lab_files(directory=None) -> list[Path]:
    """The notebooks ``NN_*.ipynb`` in ``directory`` (default: ``labs/`` beside the package), by number."""
    d = Path(directory) if directory is not None else Path(__file__).resolve().parents[2] / "labs"
    if not d.is_dir():
        raise ValueError(f"--labs-dir: {d} is not a folder")
    return sorted(d.glob("[0-9][0-9]_*.ipynb"))


def select_labs(paths: list[Path], numbers=None) -> list[Path]:
    """``paths`` whose number is in ``numbers`` (all for None); an unknown number is a ValueError naming it."""
    if not paths:
        raise ValueError("no lab notebooks (NN_*.ipynb) found")
    if numbers is None:
        return paths
    by_number = {int(p.name[:2]): p for p in paths}
    unknown = [n for n in numbers if n not in by_number]
    if unknown:
        known = ", ".join(f"{n:02d}" for n in sorted(by_number))
        raise ValueError(f"--lab {' '.join(map(str, unknown))}: no such lab; the labs are {known}")
    return [by_number[n] for n in dict.fromkeys(numbers)]


def _modules():
    """nbformat, nbclient and nbconvert's HTMLExporter, or one ValueError saying how to get them."""
    try:
        import nbclient
        import nbformat
        from nbconvert import HTMLExporter
    except ImportError as e:
        raise ValueError(f"fpsim labs --html runs the notebooks with nbclient and writes them with nbconvert; "
                         f"{e.name or e} is not installed here (pip install -e '.[labs]')") from None
    return nbformat, nbclient, HTMLExporter


def title_of(nb, path: Path) -> str:
    """The notebook's first Markdown heading ("Lab 08 - fp8 in miniature"), else its file name."""
    for c in nb.cells:
        if c.cell_type == "markdown":
            for line in c.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return path.stem


def _failed_cell(nb) -> str:
    """'cell N (first line): Error: message' of the first code cell holding an error output."""
    for i, c in enumerate(nb.cells):
        for o in c.get("outputs", []) if c.cell_type == "code" else []:
            if o.get("output_type") == "error":
                first = next((ln for ln in c.source.splitlines() if ln.strip()), "")[:60]
                evalue = (str(o.get("evalue", "")).splitlines() or [""])[0][:200]
                return f"cell {i} ({first!r}): {o.get('ename', 'error')}: {evalue}"
    return "a cell"


def run_lab(path: Path, kernel_name: str = "python3"):
    """The notebook at ``path``, run top to bottom in a fresh kernel (its folder as working
    directory, matplotlib's Agg, no widgets); a :class:`LabError` naming the lab and the cell
    if one raises, times out or kills the kernel."""
    nbformat, nbclient, _ = _modules()
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as e:  # missing, not JSON, not a notebook
        raise LabError(f"{path.name}: not a readable notebook ({type(e).__name__}: {str(e).splitlines()[0][:200]})") \
            from None
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name=kernel_name,
                                     resources={"metadata": {"path": str(path.parent)}})
    env = {"MPLBACKEND": os.environ.get("MPLBACKEND") or "Agg", "FPSIM_LABS_NO_WIDGETS": "1"}
    with state.environment(env):
        try:
            client.execute()
        except KeyError as e:  # jupyter_client's NoSuchKernel
            raise ValueError(f"no Jupyter kernel {kernel_name!r} here ({e}); pip install ipykernel") from None
        except Exception as e:  # CellExecutionError, CellTimeoutError, DeadKernelError
            where = _failed_cell(nb) if type(e).__name__ == "CellExecutionError" else f"a cell ({type(e).__name__})"
            raise LabError(f"{path.name} failed at {where}") from None
    return nb


def write_html(nb, out: Path) -> Path:
    """``nb`` (run) as one HTML file at ``out``: nbconvert's lab template, figures as inline PNG."""
    _, _, HTMLExporter = _modules()
    body, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    out.write_text(body, encoding="utf-8")
    return out


def _index(done: list, failed: list) -> str:
    """index.html: one row per lab written (link, title, seconds), then the labs that failed."""
    rows = "\n".join(f'<tr><td><a href="{html.escape(f.name)}">{html.escape(f.stem)}</a></td>'
                     f"<td>{html.escape(title)}</td><td>{s:.1f} s</td></tr>" for f, title, s in done)
    bad = "".join(f"<li>{html.escape(m)}</li>" for m in failed)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>fpsim labs</title></head><body>\n"
            f"<h1>fpsim labs</h1>\n<p>Each lab run top to bottom in a fresh kernel by <code>fpsim labs --html</code>"
            f" on {when}; the exercises are left unanswered, so their checks say \"not attempted yet\".</p>\n"
            f"<table>\n<tr><th>file</th><th>lab</th><th>ran in</th></tr>\n{rows}\n</table>\n"
            + (f"<h2>Failed</h2>\n<ul>{bad}</ul>\n" if failed else "") + "</body></html>\n")


def write_labs(paths: list[Path], out_dir, err=None) -> int:
    """Run each lab of ``paths``, write its HTML into ``out_dir`` and the index; one line per lab
    on ``err`` (default: stderr).  Returns 0, or 1 if a lab failed (the others are still written)."""
    _modules()
    err = err or sys.stderr
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    done, failed = [], []
    for k, path in enumerate(paths, 1):
        print(f"[{k}/{len(paths)}] running {path.name}", file=err, flush=True)  # a kernel may write lines too
        t0 = time.perf_counter()
        try:
            nb = run_lab(path)
        except LabError as e:
            print(f"[{k}/{len(paths)}] {path.name} FAILED after {time.perf_counter() - t0:.1f} s", file=err, flush=True)
            failed.append(str(e))
            continue
        target = write_html(nb, out_dir / f"{path.stem}.html")
        seconds = time.perf_counter() - t0
        done.append((target, title_of(nb, path), seconds))
        print(f"[{k}/{len(paths)}] {path.name}: {seconds:.1f} s -> {target}", file=err, flush=True)
    (out_dir / "index.html").write_text(_index(done, failed), encoding="utf-8")
    for m in failed:
        print(f"fpsim labs: {m}; no HTML written for it", file=err)
    print(f"{len(done)} of {len(paths)} labs written; open {out_dir / 'index.html'}", file=err)
    return 1 if failed else 0


def main(args) -> int:
    paths = select_labs(lab_files(args.labs_dir), args.lab)
    if args.html is None:
        for p in paths:
            print(p.name)
        print("(fpsim labs --html DIR runs them and writes each with its outputs as HTML)", file=sys.stderr)
        return 0
    return write_labs(paths, args.html)
