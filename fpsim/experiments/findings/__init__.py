"""``fpsim reproduce``: the field's published numerical findings, each in miniature.

One module per finding, each holding its claim, its source and the source's number, a
``run(quick, seeds, progress)`` that measures fpsim's number and a ``verdict(numbers)`` that
decides ``reproduced`` / ``partly`` / ``not at this scale`` (``base.py`` says what these are).
:data:`FINDINGS` is the catalogue, by name; :func:`get_finding` looks one up; ``table.py``
writes ``docs/findings.md`` from a set of results.  Adding a finding is one new module and one
line here.
"""

from __future__ import annotations

from . import (
    fouroversix,
    fp8scale,
    kahan,
    lossscale,
    mismatch,
    mxlayernorm,
    mxscale,
    nvfp4round,
    outliers,
    overflow,
    promotion,
    proxies,
    ptq,
    sqrt3,
    unitscaling,
)
from .base import VERDICTS, Finding, FindingResult

__all__ = ["FINDINGS", "Finding", "FindingResult", "VERDICTS", "get_finding"]

FINDINGS: dict[str, Finding] = {m.FINDING.name: m.FINDING for m in (
    lossscale, overflow, kahan, fp8scale,  # what fpsim reproduced before the catalogue
    mismatch, promotion, mxscale, fouroversix, nvfp4round, sqrt3,  # numerical findings: accumulation, block formats, RL
    proxies, outliers, unitscaling, mxlayernorm, ptq,  # training dynamics, over seeds
)}


def get_finding(name) -> Finding:
    """A finding by name; ValueError listing the names if there is none."""
    if isinstance(name, Finding):
        return name
    if name not in FINDINGS:
        raise ValueError(f"unknown finding {name!r}; known: {', '.join(FINDINGS)}")
    return FINDINGS[name]
