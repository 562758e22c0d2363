"""``fpsim reproduce``: the field's published numerical findings, each in miniature.

One module per finding, each registering its record (``base.py``: claim, source, the source's
number, a sweep or a measurement, extract, verdict, figure) in :data:`FINDINGS`.  This package
imports every module in it (:mod:`pkgutil`), so the catalogue is discovered, not listed: a new
finding is one new file.  :func:`catalogue` gives the findings in the catalogue's order (their
``order`` fields), :func:`get_finding` looks one up; ``runner.py`` runs one through the
pipeline; ``table.py`` writes ``docs/findings.md`` from a set of results.
"""

from __future__ import annotations

import importlib
import pkgutil

from .base import FINDINGS, VERDICTS, Finding, FindingResult, Sweep

__all__ = ["FINDINGS", "Finding", "FindingResult", "Sweep", "VERDICTS", "catalogue", "get_finding"]

# the package's own machinery; every other module is a finding and registers itself on import
_MACHINERY = {"base", "figures", "result", "runner", "runs", "samples", "table"}

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    if _info.name not in _MACHINERY:
        importlib.import_module(f"{__name__}.{_info.name}")


def catalogue() -> list[Finding]:
    """Every registered finding, in the catalogue's order (``order``, then name)."""
    return sorted(FINDINGS.values(), key=lambda f: (f.order, f.name))


def get_finding(name) -> Finding:
    """A finding by name (or the record itself); ValueError listing the names if there is none."""
    if isinstance(name, Finding):
        return name
    if isinstance(name, str) and name not in FINDINGS:
        raise ValueError(f"unknown finding {name!r}; known: {', '.join(f.name for f in catalogue())}")
    return FINDINGS.get(name)
