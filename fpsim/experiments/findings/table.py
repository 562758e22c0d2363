"""``docs/findings.md``: the whole catalogue as one Markdown table, written from results.

:func:`markdown` turns results into the page (``fpsim reproduce --table PATH`` runs every finding
with ``tools/catalogue.py`` and calls it).  A finding that cannot run here (it needs a module this
installation lacks) gets a row saying so, not a number.
"""

from __future__ import annotations

import platform
import time

from . import catalogue
from .base import FindingResult

__all__ = ["markdown"]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(results: dict, quick: bool, seeds=(0,)) -> str:
    """The page: a header saying how it was made, then one row per finding - name, claim, source,
    the source's number, fpsim's number, verdict and reason, and the seconds it took.  ``seeds``
    None: each finding ran on its own seeds (``Finding.seeds``; seed 0 when quick)."""
    mode = ("`--quick` runs (shorter trainings and smaller samples than the full runs: numbers and verdicts "
            "can differ from a full run's)" if quick else "full runs")
    lines = [
        "# Published numerical findings, reproduced in miniature",
        "",
        f"Written by `fpsim reproduce --table docs/findings.md{' --quick' if quick else ''}"
        f"{'' if seeds is None else ' --seeds ' + ' '.join(map(str, seeds))}` from {mode}"
        f"{' (each finding on its own seeds)' if seeds is None else ''}, on {platform.machine()} with Python "
        f"{platform.python_version()}, {time.strftime('%Y-%m-%d', time.gmtime())}.  Each row: a claim from a named "
        "source, the number the source reports, the number fpsim measures in its miniature, and the verdict "
        "(`reproduced`, `partly`, or `not at this scale`) with its reason.  `fpsim reproduce NAME` runs one "
        "finding and draws its figure; `fpsim reproduce --all --jobs 2` runs every one, two at a time, with the "
        "same numbers as one at a time; `fpsim reproduce --list` lists them.  Full runs over several seeds: "
        "[findings_full.md](findings_full.md).",
        "",
        "| finding | claim | source | the source's number | fpsim's number | verdict | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in catalogue():
        name = f.name
        r: FindingResult | None = results.get(name)
        if r is None:
            got, verdict, secs = (f"not run: needs `{f.needs}`" if not f.available() else "not run: stopped"), "-", "-"
        else:
            got, verdict, secs = r.measured, f"**{r.verdict}**: {r.reason}", f"{r.seconds:.0f}"
        lines.append("| " + " | ".join(_cell(c) for c in (f"`{name}`", f.claim, f.source, f.source_number, got,
                                                            verdict, secs)) + " |")
    return "\n".join(lines) + "\n"
