"""``fpsim labs``: the lab notebooks - listed, or run and written as HTML with their outputs.

``fpsim labs --html DIR`` runs every lab (``--lab 1 9`` for some) top to bottom in a fresh kernel
with nbclient, as the test suite does, and writes each, outputs and figures included, as one
self-contained HTML file (nbconvert's ``HTMLExporter``: every figure an inline PNG), plus
``DIR/index.html`` linking them, so that a lab can be read before anything is installed.  The
kernels run as the tests run them: no display (matplotlib's Agg) and no widgets, so lab 01's bit
explorer and the sliders print what the widget would show instead of leaving a blank.  One line
per lab says how long it took.  A lab that fails is named with its cell and error; the others
still run, their HTML is kept, and the exit status is 1.

The pages need no network: every ``$...$`` and ``$$...$$`` of the Markdown cells is written as
MathML (latex2mathml), which browsers typeset natively, and the page loads no script from a CDN
(nbconvert's MathJax, require.js and mermaid loaders are left out).  Without ``--html`` the command
lists the labs; ``--copy DIR`` writes a fresh set into DIR (:mod:`.labs_files`).

nbclient, nbformat, nbconvert, latex2mathml and a Jupyter kernel come with ``pip install "fpsim[labs]"``;
they are imported only when the command runs.
"""

from __future__ import annotations

import html
import os
import re
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from .. import state
from .labs_files import copy_labs, lab_files, notebook_client

# add_arguments too, for the CLI's table of tools (as every tool has)
__all__ = ["main", "lab_files", "select_labs", "run_lab", "title_of", "write_html", "write_labs", "LabError",
           "latex_to_mathml"]

CELL_TIMEOUT = 600  # seconds one cell may take


class LabError(Exception):
    """A lab that did not run to its end: which lab, which cell, what it raised."""


def add_arguments(p) -> None:
    p.add_argument("--html", metavar="DIR", help="run the labs and write DIR/NN_name.html for each (outputs and "
                                                 "figures included, math as MathML, no network needed) and "
                                                 "DIR/index.html linking them")
    p.add_argument("--copy", metavar="DIR", help="write a fresh set of the notebooks (and their README) into DIR, "
                                                 "to open with: jupyter lab DIR; a notebook already there that "
                                                 "differs (your answers) is kept unless --overwrite")
    p.add_argument("--overwrite", action="store_true", help="with --copy: replace notebooks that differ from the "
                                                            "shipped ones (your edits in them are lost)")
    p.add_argument("--lab", type=int, nargs="+", metavar="N", help="only these labs, by number (--lab 1 9)")
    p.add_argument("--labs-dir", metavar="DIR", help="the folder holding the notebooks (default: the ones this "
                                                     "fpsim ships, or labs/ of a checkout)")


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
    """nbformat, nbclient and nbconvert's HTMLExporter, or one ValueError saying how to get them
    (latex2mathml too: the pages' math)."""
    try:
        import latex2mathml.converter  # noqa: F401
        import nbclient
        import nbformat
        from nbconvert import HTMLExporter
    except ImportError as e:
        raise ValueError(f"fpsim labs --html runs the notebooks with nbclient and writes them with nbconvert and "
                         f"latex2mathml; {e.name or e} is not installed here (pip install \"fpsim[labs]\")") from None
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
    nbformat, _, _ = _modules()
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as e:  # missing, not JSON, not a notebook
        raise LabError(f"{path.name}: not a readable notebook ({type(e).__name__}: {str(e).splitlines()[0][:200]})") \
            from None
    client = notebook_client(nb, timeout=CELL_TIMEOUT, kernel_name=kernel_name,
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


# nbconvert's lab page without the scripts it loads from a CDN: MathJax (the math is MathML here),
# require.js (for widget and JavaScript outputs, which the labs run without) and mermaid
_OFFLINE_TEMPLATE = "fpsim_offline.html.j2"
_OFFLINE_SOURCE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""
_ESCAPED_IN_TEXT = re.compile(r"(<mtext[^>]*>)(.*?)(</mtext>)", re.S)


def latex_to_mathml(tex: str, display: str = "inline") -> str:
    """The TeX formula ``tex`` (without its dollars) as one ``<math>`` element (latex2mathml), ``display``
    "inline" or "block", without the xmlns HTML does not need; ``\\_`` and ``\\%`` inside ``\\text{}``
    become the plain characters."""
    from latex2mathml.converter import convert

    # no xmlns: HTML puts <math> in the MathML namespace by itself, and nbconvert's heading anchors
    # (an ElementTree round trip) would write a namespaced <ns0:math> that no browser typesets
    out = convert(tex, display=display).replace(' xmlns="http://www.w3.org/1998/Math/MathML"', "", 1)
    return _ESCAPED_IN_TEXT.sub(lambda m: m[1] + re.sub(r"\\([_%&#$])", r"\1", m[2]) + m[3], out)


def _exporter():
    """An HTMLExporter for nbconvert's lab template whose Markdown cells write their math as MathML
    and whose page loads no script from the network."""
    _, _, HTMLExporter = _modules()
    from jinja2 import DictLoader, pass_context
    from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath

    class MathMLRenderer(IPythonRenderer):
        def inline_math(self, body: str) -> str:
            return latex_to_mathml(body)

        def block_math(self, body: str) -> str:
            return latex_to_mathml(body, display="block")

    class OfflineHTMLExporter(HTMLExporter):
        @pass_context
        def markdown2html(self, context, source):  # nbconvert's own, with the renderer above
            cell = context.get("cell", {})
            renderer = MathMLRenderer(escape=False, attachments=cell.get("attachments", {}),
                                      embed_images=self.embed_images,
                                      path=context.get("resources", {}).get("metadata", {}).get("path", ""),
                                      anchor_link_text=self.anchor_link_text,
                                      exclude_anchor_links=self.exclude_anchor_links, **self.lexer_options)
            return MarkdownWithMath(renderer=renderer).render(source)

    return OfflineHTMLExporter(template_name="lab", template_file=_OFFLINE_TEMPLATE,
                               extra_loaders=[DictLoader({_OFFLINE_TEMPLATE: _OFFLINE_SOURCE})])


def write_html(nb, out: Path) -> Path:
    """``nb`` (run or not) as one HTML file at ``out``: nbconvert's lab template, figures as inline
    PNG, math as MathML, no script from the network."""
    body, _ = _exporter().from_notebook_node(nb)
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


def _html_folder(out_dir) -> Path:
    """``--html DIR`` made (if missing) and checked writable before any lab runs; a file there, or a
    folder that cannot be made or written, is one ValueError saying so."""
    from .outputs import FILE, folder_problem

    out_dir = Path(out_dir)
    problem = folder_problem(out_dir)
    if problem == FILE:
        raise ValueError(f"--html {out_dir}: that is a file; --html wants a folder (made if missing) to write "
                         "NN_name.html and index.html into")
    if problem:
        raise ValueError(f"--html {out_dir}: cannot write a folder there ({problem}); --html wants a "
                         "folder (made if missing) to write NN_name.html and index.html into")
    return out_dir


def write_labs(paths: list[Path], out_dir, err=None) -> int:
    """Run each lab of ``paths``, write its HTML into ``out_dir`` and the index; one line per lab
    on ``err`` (default: stderr).  Returns 0, or 1 if a lab failed (the others are still written)."""
    _modules()
    err = err or sys.stderr
    out_dir = _html_folder(out_dir)
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


def _copy(paths: list[Path], target, overwrite: bool) -> int:
    """``fpsim labs --copy DIR``: the notebooks written into DIR, what was kept, and how to open them."""
    written, kept = copy_labs(paths, target, overwrite=overwrite)
    print(f"{len(written)} files written to {target}" + (f", {len(kept)} kept" if kept else ""), file=sys.stderr)
    for k in kept:
        print(f"kept {k}: it differs from the lab this fpsim ships (your answers?); --overwrite replaces it",
              file=sys.stderr)
    print(f"open them with: jupyter lab {target}", file=sys.stderr)
    return 0


def main(args) -> int:
    paths = select_labs(lab_files(args.labs_dir), args.lab)
    if args.copy is not None and args.html is not None:
        raise ValueError("--copy and --html: one at a time (copy the notebooks, or write them as HTML)")
    if args.overwrite and args.copy is None:
        raise ValueError("--overwrite replaces notebooks written by --copy DIR; give --copy DIR too")
    if args.copy is not None:
        return _copy(paths, args.copy, args.overwrite)
    if args.html is None:
        for p in paths:
            print(p.name)
        print(f"(the labs in {paths[0].parent}; fpsim labs --copy DIR writes a fresh set to open with "
              f"jupyter lab DIR; --html DIR runs them and writes each with its outputs as HTML)", file=sys.stderr)
        return 0
    return write_labs(paths, args.html)
