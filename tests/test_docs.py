"""The documentation says what the code does: every test docs/guarantees.md cites exists, and the
numbers the pages quote are what the commands print today.

The README's default table is checked in experiments/test_experiments.py, beside the runs it shares.  Each
quoted-number test here runs the command a table names beside it (a subset of its recipes, where that is
enough) and checks the quoted cells against the run - so a change that moves the numbers fails here
until the table is regenerated.  fpsim defines every number itself (exact sums rounded once,
correctly rounded functions, its own normal draws: docs/guarantees.md), so the runs give the same
bits on every machine and at any BLAS thread count, and the quoted digits are exact, not
approximate."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.documentation import documentation

ROOT = Path(__file__).resolve().parent.parent

# -- docs/guarantees.md: every test the Guarantees page cites exists --------------------------------------


@pytest.mark.both_backends  # as it ran in the file it came from: on numpy and numpy-f32 (conftest.py)
def test_every_test_the_guarantees_section_cites_exists():
    root = ROOT
    section = (root / "docs" / "guarantees.md").read_text()
    cited = re.findall(r"`([^`]*test_[^`]*)`", section)
    assert len(cited) >= 15
    current = None
    for item in cited:
        m = re.fullmatch(r"(?:((?:\w+/)*test_\w+\.py)::)?(test_\w+\*?)|(?:tests/)?((?:\w+/)*test_\w+\.py)", item)
        assert m, f"cannot read the citation {item!r}"
        if m.group(3):
            assert (root / "tests" / m.group(3)).exists(), item
            continue
        file, name = m.group(1), m.group(2)
        current = file or current  # a bare name is in the file last named
        text = (root / "tests" / current).read_text()
        pattern = rf"def {re.escape(name.rstrip('*'))}" + (r"\w*" if name.endswith("*") else r"\(")
        assert re.search(pattern, text), f"{current}::{name}"


def test_every_test_file_and_script_the_pages_cite_exists():
    """A path under tests/ or scripts/ that README.md, ARCHITECTURE.md, labs/README.md or a page of docs/
    names is there: a test file moved or a script deleted leaves no page pointing at nothing.  A path
    after a revision (``git show 0dff2d0:scripts/x.py``) is history and not checked, nor is the
    CHANGELOG: it names what existed then."""
    pages = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", ROOT / "labs" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    cited = [(page, path) for page in pages
             for path in re.findall(r"(?<![\w/.:])((?:tests|scripts)/[\w/.*<>-]*[\w/])", page.read_text(encoding="utf-8"))]
    assert len(cited) >= 20
    missing = [f"{page.relative_to(ROOT)}: {path}" for page, path in cited if not (ROOT / path).exists()]
    assert not missing, missing


# -- the numbers the pages quote ---------------------------------------------------------------------------


def _compare(*args: str) -> dict:
    cmd = [sys.executable, "-m", "fpsim.tools.cli", "compare", *args, "--json", "--figure", "none", "--quiet"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_provoked_overflow_story_is_what_the_code_does():
    """`fpsim compare --task tinygpt --provoke-overflow`: fp16-master dies in the forward pass, and the
    step and op the tracer names are the ones the documentation tells."""
    r = _compare("--task", "tinygpt", "--provoke-overflow", "--recipes", "fp16-master")["fp16-master"]
    nf = r["first_nonfinite"]
    assert nf["kind"] == "forward overflow" and nf["direction"] == "forward"
    story = f"step {nf['step']}: `{nf['op']}` in `{nf['where']}` (forward)"
    assert story in documentation(), f"the tracer says {story!r}; the documentation tells another story"
    assert f"| fp16-master | diverged at step {r['died_at_step']} |" in documentation()
