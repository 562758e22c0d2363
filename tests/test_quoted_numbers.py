"""The numbers the documentation quotes are what the code prints today.

Each test runs the command a table names beside it (a subset of its recipes, where that is enough)
and checks the quoted cells against the run - so a change that moves the numbers fails here
until the table is regenerated.  With the BLAS thread count pinned the runs give the same bits on
any thread count, so the quoted digits are exact, not approximate."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
from support.reference_runs import reference_runs

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _documentation() -> str:
    """README.md and every page of docs/, where the tables live."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return "\n".join(p.read_text(encoding="utf-8") for p in pages if p.exists())


def _compare(*args: str) -> dict:
    cmd = [sys.executable, "-m", "fpsim.tools.cli", "compare", *args, "--json", "--figure", "none", "--quiet"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _row(doc: str, first_cell: str) -> str:
    """The table row whose first cell is ``first_cell`` (the first one, if several tables have it)."""
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.lstrip().startswith("|") and cells and cells[0] == first_cell:
            return line
    raise AssertionError(f"no table row starting with {first_cell!r} in README.md or docs/")


# The first cell of each default recipe's row in the README's table.
ROWS = {"fp32": "fp32", "fp16-master": "fp16-master", "fp16-static": "fp16-static (S = 1024)",
        "fp16-dynamic": "fp16-dynamic", "bf16-pure": "bf16-pure", "bf16-master": "bf16-master"}


@pytest.mark.slow
def test_the_default_comparison_table_is_what_fpsim_compare_prints():
    """`fpsim compare`'s table (150 steps, seed 0): the final losses and ratios quoted.  The runs are
    the ones ``fpsim compare`` makes (the same ``compare``, the same defaults), trained in this process
    and shared with test_experiments; test_determinism runs the command itself in fresh processes."""
    runs = reference_runs(ROWS)
    doc = _documentation()
    fp32 = runs["fp32"].final_loss
    for name, first_cell in ROWS.items():
        loss = runs[name].final_loss
        row = _row(doc, first_cell)
        assert f"{loss:.4e}" in row, f"{name}: the run ends at {loss:.4e}; the table says {row}"
        assert f"{loss / fp32:.3f}x" in row, f"{name}: the run's ratio is {loss / fp32:.3f}x; the table says {row}"


def test_the_provoked_overflow_story_is_what_the_code_does():
    """`fpsim compare --task tinygpt --provoke-overflow`: fp16-master dies in the forward pass, and the
    step and op the tracer names are the ones the documentation tells."""
    r = _compare("--task", "tinygpt", "--provoke-overflow", "--recipes", "fp16-master")["fp16-master"]
    nf = r["first_nonfinite"]
    assert nf["kind"] == "forward overflow" and nf["direction"] == "forward"
    story = f"step {nf['step']}: `{nf['op']}` in `{nf['where']}` (forward)"
    assert story in _documentation(), f"the tracer says {story!r}; the documentation tells another story"
    assert f"| fp16-master | diverged at step {r['died_at_step']} |" in _documentation()
