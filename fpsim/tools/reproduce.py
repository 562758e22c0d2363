"""``fpsim reproduce``: the field's published numerical findings, each reproduced in miniature.

``fpsim reproduce --list``: one line per finding (name, claim, source, running time here).
``fpsim reproduce NAME [--quick] [--seeds ...] [--json] [--figure PATH]``: runs one, with
progress on stderr; prints the claim, the source's number, fpsim's number and the verdict with
its reason, and draws the finding's figure.  ``fpsim reproduce --all [--jobs N]``: runs every
finding, printing each as it finishes and drawing every figure into ``figures/findings/`` (or the
folder ``--figure`` names).  ``fpsim reproduce --table docs/findings.md [--quick] [--jobs N]``:
runs every finding and writes the whole table.  With ``--jobs N`` the training runs of all findings (and
the sampling findings' measurements) share N worker processes - or a Dask cluster with
``--scheduler`` - each on fpsim's pinned BLAS thread count, so every number is the one a serial
run prints; each figure is drawn here from the finding's record and its result's plain data.
The names, the list and the table come from the registry of findings
(``fpsim.experiments.findings.FINDINGS``): a new finding module shows up in all of them.
"""

from __future__ import annotations

import sys
from pathlib import Path

from . import catalogue

__all__ = ["add_parser", "main"]  # add_arguments too, for the CLI's table of tools (as every tool has)

HELP = "reproduce a published numerical finding in miniature (--list names them)"


def add_arguments(p) -> None:
    from ..experiments.findings import catalogue  # the registry: the help names every finding

    p.add_argument("name", nargs="?", help=f"the finding to run; one of: {', '.join(f.name for f in catalogue())}")
    p.add_argument("--list", action="store_true", help="one line per finding: name, claim, source, running time here")
    p.add_argument("--quick", action="store_true", help="shorter runs (about 15 s each; what the tests run)")
    p.add_argument("--seeds", type=int, nargs="+", default=None,
                   help="seeds of the runs (default: the finding's own - 0 1 2 for the training-dynamics findings, "
                        "0 for the others - and 0 with --quick)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--figure", metavar="PATH",
                   help="where to draw the figure (default figures/findings/NAME.png; with --all a folder, "
                        "default figures/findings; 'none' for no figure)")
    p.add_argument("--all", action="store_true", help="run every finding, print each result and draw each figure")
    p.add_argument("--table", metavar="PATH", help="run every finding and write the Markdown table to PATH")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="with --all or --table: the runs of every finding on N worker processes (same numbers)")
    p.add_argument("--scheduler", metavar="ADDRESS", default=None,
                   help="with --all or --table: run them on the Dask cluster whose scheduler is at ADDRESS "
                        "(tcp://host:8786; pip install 'fpsim[cluster]')")


def add_parser(subparsers):
    """``fpsim reproduce`` on an argparse subparsers object; returns the parser."""
    sp = subparsers.add_parser("reproduce", help=HELP, description=__doc__.split("\n\n")[0])
    add_arguments(sp)
    sp.set_defaults(func=main)
    return sp


def _progress(line: str) -> None:
    print(f"fpsim reproduce: {line}", file=sys.stderr, flush=True)


def _list() -> int:
    from ..experiments.findings import catalogue

    for f in catalogue():
        quick, full = f.runtime
        note = "" if f.available() else f"  [needs {f.needs}: not here]"
        print(f"{f.name:27s} {f.claim} [{f.source}; about {quick:.0f} s quick, {full:.0f} s full]{note}")
    return 0


def _print(result, finding) -> None:
    print(f"{finding.name}{' (quick)' if result.quick else ''}, seeds {' '.join(map(str, result.seeds))}: "
          f"{result.seconds:.1f} s")
    print(f"  claim:    {finding.claim}")
    print(f"  source:   {finding.source}: {finding.source_number}")
    print(f"  fpsim:    {result.measured}")
    print(f"  verdict:  {result.verdict} - {result.reason}")


def _table(args) -> int:
    from ..experiments.findings import table

    path = Path(args.table)
    if path.parent and not path.parent.exists():
        raise OSError(f"--table: the folder {path.parent} does not exist")
    try:
        results = catalogue.run_every(args.quick, args.seeds, args.jobs, None, _progress,
                                      scheduler=getattr(args, "scheduler", None))
    except catalogue.CatalogueStopped as e:
        print(f"fpsim reproduce: {e}; {path} not written (the verdicts above are the finished findings')",
              file=sys.stderr)
        return 130
    path.write_text(table.markdown(results, args.quick, args.seeds))
    print(f"fpsim reproduce: wrote {path} ({sum(r is not None for r in results.values())} findings run)",
          file=sys.stderr)
    return 0


def _all(args) -> int:
    from ..experiments.findings import FINDINGS

    folder = None if (args.figure or "").lower() == "none" else Path(args.figure or "figures/findings")
    if folder is not None and folder.exists() and not folder.is_dir():
        print(f"fpsim reproduce: error: --figure {folder} is a file; with --all it names a folder", file=sys.stderr)
        return 2

    def done(result):
        _print(result, FINDINGS[result.name])

    try:
        results = catalogue.run_every(args.quick, args.seeds, args.jobs, folder, _progress, on_done=done,
                                      scheduler=getattr(args, "scheduler", None))
    except catalogue.CatalogueStopped as e:
        print(f"fpsim reproduce: {e} (their results are above)", file=sys.stderr)
        return 130
    skipped = [n for n, r in results.items() if r is None]
    if skipped:
        print(f"fpsim reproduce: not run here (a module is missing): {', '.join(skipped)}", file=sys.stderr)
    return 0


def main(args) -> int:
    from ..experiments.findings import get_finding

    if args.list:
        return _list()
    if args.jobs < 1:
        print(f"fpsim reproduce: error: --jobs must be at least 1, got {args.jobs}", file=sys.stderr)
        return 2
    if args.table:
        return _table(args)
    if args.all:
        return _all(args)
    if not args.name:
        print("fpsim reproduce: error: name a finding (fpsim reproduce --list shows them), or give --list, --all "
              "or --table PATH", file=sys.stderr)
        return 2
    finding = get_finding(args.name)
    if not finding.available():
        print(f"fpsim reproduce: error: {finding.name} needs {finding.needs}, which this installation does not have",
              file=sys.stderr)
        return 2
    fig_path = None if (args.figure or "").lower() == "none" else Path(args.figure or f"figures/findings/{finding.name}.png")
    _progress(f"{finding.name}{' (quick)' if args.quick else ''}: {finding.claim}")
    from ..experiments.executors import SweepStopped

    try:
        result = finding.reproduce(args.quick, args.seeds, _progress)
    except SweepStopped as e:
        print(f"fpsim reproduce: {finding.name}: {e}", file=sys.stderr)
        return 130
    if args.json:
        from .jsonout import dumps, finite

        notes = {}
        out = finite(result.to_json(), notes)  # NaN / inf as null, and where
        if notes:
            out["non_finite"] = notes
        print(dumps(out, indent=1))
    else:
        _print(result, finding)
    if fig_path is not None and catalogue.save_figure(finding, result, fig_path):
        print(f"fpsim reproduce: figure: {fig_path}", file=sys.stderr)
    return 0

