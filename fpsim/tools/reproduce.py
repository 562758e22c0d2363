"""``fpsim reproduce``: the field's published numerical findings, each reproduced in miniature.

``fpsim reproduce --list``: one line per finding (name, claim, source, running time here).
``fpsim reproduce NAME [--quick] [--seeds ...] [--json] [--figure PATH] [--jobs N]``: runs one,
with progress on stderr; prints the claim, the source's number, fpsim's number and the verdict
with its reason, and draws the finding's figure (``--figure`` a file, or a folder to draw
``NAME.png`` in).  ``fpsim reproduce --all [--jobs N]``: runs every finding, printing each as it
finishes and drawing every figure into ``figures/findings/`` (or the folder ``--figure`` names).
``fpsim reproduce --table docs/findings.md [--quick] [--jobs N]``: runs every finding and writes
the whole table (figures only where ``--figure`` names a folder).  With ``--jobs N`` the training
runs (of one finding, or of all findings, with the sampling findings' measurements) share N worker
processes - or a Dask cluster with ``--scheduler`` - each on fpsim's pinned BLAS thread count, so
every number is the one a serial run prints; each figure is drawn here from the finding's record
and its result's plain data.  Where the output goes is checked before any run: a folder given as
``--table``, or a place that cannot be written, is one line and exit 2.  SIGINT or SIGTERM stops
the runs: what finished is reported (the findings, or one finding's runs, without a verdict), a
``--table`` run writes the finished findings to ``PATH``'s ``.partial`` file, and the exit status
is 128 + the signal (130, 143).  ``--json`` prints one JSON object (with ``--all`` / ``--table``:
every finding's result in it).
The names, the list and the table come from the registry of findings
(``fpsim.experiments.findings.FINDINGS``): a new finding module shows up in all of them.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from . import catalogue

__all__ = ["add_parser", "main"]  # add_arguments too, for the CLI's table of tools (as every tool has)

HELP = "reproduce a published numerical finding in miniature (--list names them)"


class _Refused(Exception):
    """An argument refused before any run: one line, exit 2."""


def _seed(text: str) -> int:
    """``--seeds``' type: a whole number >= 0 (argparse names the option in its message)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a seed is a whole number >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a seed is a whole number >= 0, got {text!r}")
    return value


def add_arguments(p) -> None:
    from ..experiments.findings import catalogue  # the registry: the help names every finding

    p.add_argument("name", nargs="?", help=f"the finding to run; one of: {', '.join(f.name for f in catalogue())}")
    p.add_argument("--list", action="store_true", help="one line per finding: name, claim, source, running time here "
                   "(NAME: that one's; --json: one object)")
    p.add_argument("--quick", action="store_true", help="shorter runs (about 15 s each; what the tests run)")
    p.add_argument("--seeds", type=_seed, nargs="+", default=None, metavar="SEED",
                   help="seeds of the runs, whole numbers >= 0 (default: the finding's own - 0 1 2 for the "
                        "training-dynamics findings, 0 for the others - and 0 with --quick)")
    p.add_argument("--json", action="store_true",
                   help="print the result as one JSON object (with --all or --table: every finding's result in it)")
    p.add_argument("--figure", metavar="PATH",
                   help="NAME: the figure's file (a folder: NAME.png in it; default figures/findings/NAME.png); "
                        "with --all or --table: the folder each finding's figure is drawn into as NAME.png (default "
                        "figures/findings with --all, no figures with --table alone); 'none': no figure")
    p.add_argument("--all", action="store_true", help="run every finding, print each result and draw each figure")
    p.add_argument("--table", metavar="PATH",
                   help="run every finding and write the Markdown table to the file PATH (checked before any run; "
                        "a stop writes the findings that finished to PATH's .partial file)")
    p.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="the training runs on N worker processes (default 1), the same numbers: one finding's "
                        "runs, or with --all / --table the runs of every finding (a finding that trains nothing "
                        "measures here)")
    p.add_argument("--scheduler", metavar="ADDRESS", default=None,
                   help="run them on the Dask cluster whose scheduler is at ADDRESS instead of --jobs "
                        "(tcp://host:8786; pip install 'fpsim[cluster]')")


def add_parser(subparsers):
    """``fpsim reproduce`` on an argparse subparsers object; returns the parser."""
    sp = subparsers.add_parser("reproduce", help=HELP, description=__doc__.split("\n\n")[0])
    add_arguments(sp)
    sp.set_defaults(func=main)
    return sp


def _progress(line: str) -> None:
    catalogue.check_stop()  # a signal whose exception a finaliser dropped stops the run here
    print(f"fpsim reproduce: {line}", file=sys.stderr, flush=True)


def _list(args) -> int:
    """``--list``: one line per finding (NAME: that finding's alone); ``--json``: one object,
    ``findings``, a record per finding."""
    from ..experiments.findings import catalogue, get_finding

    findings = [get_finding(args.name)] if args.name else catalogue()
    if args.json:
        _print_json({"findings": [{"name": f.name, "claim": f.claim, "source": f.source,
                                   "seconds_quick": f.runtime[0], "seconds_full": f.runtime[1],
                                   "available": bool(f.available()), "needs": f.needs} for f in findings]})
        return 0
    for f in findings:
        quick, full = f.runtime
        note = "" if f.available() else f"  [needs {f.needs}: not here]"
        print(f"{f.name:27s} {f.claim} [{f.source}; about {quick:.0f} s quick, {full:.0f} s full]{note}")
    return 0


def _print(result, finding) -> None:
    print(f"{finding.name}{' (quick)' if result.quick else ''}, seeds {' '.join(map(str, result.seeds))}: "
          f"{result.seconds:.1f} s", flush=True)
    print(f"  claim:    {finding.claim}")
    print(f"  source:   {finding.source}: {finding.source_number}")
    print(f"  fpsim:    {result.measured}")
    print(f"  verdict:  {result.verdict} - {result.reason}", flush=True)


def _print_json(out: dict) -> None:
    """``out`` as strict JSON on stdout: NaN / inf as null, and where (``non_finite``)."""
    from .jsonout import dumps, finite

    notes: dict = {}
    out = finite(out, notes)
    if notes:
        out["non_finite"] = notes
    print(dumps(out, indent=1), flush=True)


# ---- where the output goes, checked before any run ------------------------------------------------

def _writable(folder: Path, what: str) -> None:
    """``folder`` made if missing, and a file written and removed in it; else refused naming ``what``."""
    from .outputs import FILE, folder_problem

    problem = folder_problem(folder)
    if problem == FILE:
        raise _Refused(f"{what}: {folder} is a file, not a folder")
    if problem:
        raise _Refused(f"{what}: cannot write into {folder}: {problem}")


def _image_suffixes() -> set:
    from matplotlib.figure import Figure

    return set(Figure().canvas.get_supported_filetypes())


def _figure_file(text: str | None, name: str) -> Path | None:
    """One finding's figure: a file; a folder (one that exists, or written with a trailing /) gets
    ``NAME.png`` in it, a name without a suffix ``.png``; None for 'none'."""
    if text is not None and text.lower() == "none":
        return None
    path = Path(text or f"figures/findings/{name}.png")
    if path.is_dir() or (text or "").endswith(("/", os.sep)):
        path = path / f"{name}.png"
    elif not path.suffix:
        path = path.with_suffix(".png")
    kinds = _image_suffixes()
    if path.suffix[1:].lower() not in kinds:
        raise _Refused(f"--figure {text}: matplotlib cannot write {path.suffix!r} files; use one of "
                       f"{', '.join('.' + k for k in sorted(kinds))}")
    _writable(path.parent, f"--figure {text or path}")
    return path


def _figure_folder(text: str | None, default: str | None) -> Path | None:
    """The folder ``--all`` / ``--table`` draw every figure into (``default`` where none is given)."""
    if (text or "").lower() == "none" or (text is None and default is None):
        return None
    folder = Path(text or default)
    if folder.exists() and not folder.is_dir():
        raise _Refused(f"--figure {folder} is a file; with --all or --table it names a folder (each finding's "
                       "figure is drawn into it as NAME.png)")
    if not folder.exists() and folder.suffix[1:].lower() in _image_suffixes():
        raise _Refused(f"--figure {folder}: with --all or --table it names a folder, not an image file "
                       "(each finding's figure is drawn into it as NAME.png)")
    _writable(folder, f"--figure {folder}")
    return folder


def _table_file(text: str) -> Path:
    """``--table``'s file, refused now where it could not be written after the runs."""
    path = Path(text)
    if path.is_dir() or text.endswith(("/", os.sep)):
        raise _Refused(f"--table {text} is a folder; name the Markdown file to write (e.g. {path / 'findings.md'})")
    if not path.parent.exists():
        raise _Refused(f"--table {text}: the folder {path.parent} does not exist")
    if path.exists() and not os.access(path, os.W_OK):
        raise _Refused(f"--table {text}: the file is not writable")
    _writable(path.parent, f"--table {text}")
    return path


def _partial(path: Path) -> Path:
    """Where a stopped ``--table`` run writes what finished: ``findings.partial.md`` beside ``findings.md``."""
    return path.with_name(f"{path.stem}.partial{path.suffix or '.md'}")


def _write(path: Path, text: str) -> None:
    """``text`` into ``path`` whole or not at all (a temporary file beside it, then renamed)."""
    tmp = path.with_name(f".{path.name}.fpsim-tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


# ---- every finding: --all and --table ---------------------------------------------------------------

def _every_json(results: dict, quick: bool, stopped: str | None) -> dict:
    from ..experiments.findings import FINDINGS

    return {"quick": bool(quick), "stopped": stopped,
            "findings": {n: None if r is None else r.to_json() for n, r in results.items()},
            "not_run_here": [n for n, r in results.items() if r is None and not FINDINGS[n].available()]}


def _table_text(results: dict, args, stopped: str | None) -> str:
    from ..experiments.findings import table

    page = table.markdown(results, args.quick, args.seeds)
    if stopped is None:
        return page
    title, _, rest = page.partition("\n")
    return (f"{title}\n\n**Partial**: {stopped}; the rows saying 'not run' did not finish (`fpsim reproduce "
            f"--table` writes the whole table).\n{rest}")


def _stopped_every(e, args, table_path: Path | None) -> int:
    """A stopped ``--all`` / ``--table``: the finished findings kept (the partial table, the JSON),
    then one line; exit 128 + the signal (1 where a worker process died)."""
    where = ""
    if table_path is not None and any(r is not None for r in e.results.values()):
        partial = _partial(table_path)
        _write(partial, _table_text(e.results, args, str(e)))
        where = f"; the findings that finished are in {partial} ({table_path} unchanged)"
    if args.json:
        _print_json(_every_json(e.results, args.quick, str(e)))
    elif args.all:
        where += " (their results are above)"
    print(f"fpsim reproduce: {e}{where}", file=sys.stderr)
    return 128 + e.signum if e.signum else 1


def _every(args) -> int:
    from ..experiments.findings import FINDINGS

    table_path = _table_file(args.table) if args.table else None
    folder = _figure_folder(args.figure, "figures/findings" if args.all else None)
    on_done = None if args.json or not args.all else (lambda r: _print(r, FINDINGS[r.name]))
    try:
        results = catalogue.run_every(args.quick, args.seeds, args.jobs, folder, _progress, on_done=on_done,
                                      scheduler=getattr(args, "scheduler", None))
    except catalogue.CatalogueStopped as e:
        return _stopped_every(e, args, table_path)
    if table_path is not None:
        _write(table_path, _table_text(results, args, None))
        print(f"fpsim reproduce: wrote {table_path} ({sum(r is not None for r in results.values())} findings run)",
              file=sys.stderr)
    if args.json:
        _print_json(_every_json(results, args.quick, None))
    skipped = [n for n, r in results.items() if r is None]
    if skipped:
        print(f"fpsim reproduce: not run here (a module is missing): {', '.join(skipped)}", file=sys.stderr)
    return 0


# ---- one finding --------------------------------------------------------------------------------

def _runs_of(finding, quick: bool, seeds: tuple) -> list:
    """(label, RunSpec) of every run of the finding, each once ("arm: recipe, seed s" with several sweeps)."""
    from ..experiments.findings.runner import plan

    out: dict = {}
    for sweep, recipe, spec in plan(finding, quick, seeds):
        arm = f"{sweep}: " if len(finding.sweeps) > 1 else ""
        out.setdefault(spec, f"{arm}{recipe}, seed {spec.seed}")
    return [(label, spec) for spec, label in out.items()]


def _stopped_one(e, finding, args, seeds, runs) -> int:
    """One finding stopped: the runs that finished (no verdict: it reads every run), then one line."""
    from ..experiments.executors import SweepStopped

    done = e.done if isinstance(e, SweepStopped) else {}
    signum = e.signum if isinstance(e, SweepStopped) else catalogue.stopped_by(e)
    reason = e.reason if isinstance(e, SweepStopped) else (
        f"stopped by {signal.Signals(signum).name} after 0 of {len(runs)} runs" if runs
        else f"stopped by {signal.Signals(signum).name} during its measurement")
    finished = [(label, done[spec]) for label, spec in runs if spec in done]
    if args.json:
        _print_json({"name": finding.name, "quick": bool(args.quick), "seeds": list(seeds), "stopped": reason,
                     "verdict": None, "runs": [{"run": label, "recipe": r.recipe, "steps": len(r.losses),
                                                "final_loss": r.final_loss, "died_at": r.died_at,
                                                "seconds": r.seconds} for label, r in finished]})
    elif finished:
        print(f"{finding.name}{' (quick)' if args.quick else ''}: {len(finished)} of {len(runs)} runs finished "
              "(no verdict: it needs every run)")
        for label, r in finished:
            died = "" if r.died_at is None else f", died at step {r.died_at}"
            print(f"  {label}: {len(r.losses)} steps, final loss {r.final_loss:.4g}{died}")
        sys.stdout.flush()
    print(f"fpsim reproduce: {finding.name}: {reason}", file=sys.stderr)
    return 128 + signum if signum else 1


def _run_one(finding, args, seeds, runs):
    """The finding's result: its runs here, or on ``--jobs`` workers / ``--scheduler``'s cluster."""
    from ..experiments.findings.runner import reproduce

    scheduler = getattr(args, "scheduler", None)
    if not runs or (args.jobs <= 1 and scheduler is None):
        if not runs and (args.jobs > 1 or scheduler is not None):
            _progress(f"{finding.name} trains nothing: its measurement runs here (--jobs / --scheduler do not apply)")
        return reproduce(finding, args.quick, seeds, _progress)
    with catalogue.pool(args.jobs, scheduler, len(runs)) as (executor, env):
        _progress(f"{len(runs)} runs on {catalogue.describe_pool(executor, scheduler, args.jobs)}")
        return reproduce(finding, args.quick, seeds, _progress, executor, env)


def _one(args) -> int:
    from ..experiments.executors import SweepStopped
    from ..experiments.findings import get_finding

    finding = get_finding(args.name)
    if not finding.available():
        raise _Refused(f"{finding.name} needs {finding.needs}, which this installation does not have")
    try:
        seeds = finding.seeds_for(args.quick, args.seeds)
    except ValueError as e:
        raise _Refused(f"--seeds: {e}") from None
    fig_path = _figure_file(args.figure, finding.name)
    runs = _runs_of(finding, args.quick, seeds)
    try:
        with catalogue.stop_on_signals():
            _progress(f"{finding.name}{' (quick)' if args.quick else ''}: {finding.claim}")
            result = _run_one(finding, args, seeds, runs)
    except (KeyboardInterrupt, SweepStopped) as e:
        return _stopped_one(e, finding, args, seeds, runs)
    if args.json:
        _print_json(result.to_json())
    else:
        _print(result, finding)
    if fig_path is not None and catalogue.save_figure(finding, result, fig_path):
        print(f"fpsim reproduce: figure: {fig_path}", file=sys.stderr)
    return 0


def _refusal(args) -> str | None:
    """What is wrong with the combination of arguments, in one line (None: nothing)."""
    if args.jobs is not None and args.jobs < 1:
        return f"--jobs must be at least 1, got {args.jobs}"
    if getattr(args, "scheduler", None) is not None and args.jobs not in (None, 1):
        return (f"--jobs does not apply with --scheduler: the Dask cluster's workers run the runs "
                f"(leave --jobs {args.jobs} out)")
    if args.name and (args.all or args.table):
        return (f"give a finding's name or {'--all' if args.all else '--table'}, not both (NAME runs that one "
                "finding; --all and --table run every finding)")
    if not (args.name or args.all or args.table):
        return "name a finding (fpsim reproduce --list shows them), or give --list, --all or --table PATH"
    seeds = list(args.seeds or ())
    bad = [s for s in seeds if not isinstance(s, int) or s < 0]
    if bad:
        return f"--seeds: a seed is a whole number >= 0, got {bad[0]!r}"
    if len(set(seeds)) != len(seeds):
        return f"--seeds repeats a seed: {' '.join(map(str, seeds))}"
    return None


def main(args) -> int:
    if args.list:
        try:
            return _list(args)
        except ValueError as e:  # an unknown NAME
            print(f"fpsim reproduce: error: {e}", file=sys.stderr)
            return 2
    refusal = _refusal(args)
    args.jobs = args.jobs or 1  # None: --jobs not given
    try:
        if refusal is not None:
            raise _Refused(refusal)
        return _every(args) if args.table or args.all else _one(args)
    except _Refused as e:
        print(f"fpsim reproduce: error: {e}", file=sys.stderr)
        return 2
