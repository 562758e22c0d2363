"""The numbers the documentation quotes are what the code prints today.

The README's default table is checked in experiments/test_experiments.py, beside the runs it shares.  Each
test here runs the command a table names beside it (a subset of its recipes, where that is enough)
and checks the quoted cells against the run - so a change that moves the numbers fails here
until the table is regenerated.  fpsim defines every number itself (exact sums rounded once,
correctly rounded functions, its own normal draws: docs/guarantees.md), so the runs give the same
bits on every machine and at any BLAS thread count, and the quoted digits are exact, not
approximate."""

from __future__ import annotations

import json
import subprocess
import sys

from support.documentation import documentation


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
