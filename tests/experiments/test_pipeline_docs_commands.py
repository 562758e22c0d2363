"""docs/pipeline.md's commands print what the page says they print: "Adding a recipe"'s command,
run from a folder holding the section's file, prints the table the page quotes (its time column
aside), and the Dask snippet prints its table instead of ending silently."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "pipeline.md"


def _section(heading: str) -> str:
    return DOC.read_text().split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def _fenced(part: str, lang: str) -> list[str]:
    """The fenced blocks of ``part`` opened with ```` ```lang ```` (``""``: no language), in order."""
    blocks = re.findall(r"^```(\w*)\n(.*?)^```$", part, re.S | re.M)
    return [text for kind, text in blocks if kind == lang]


@pytest.mark.slow
def test_the_recipe_sections_command_prints_the_table_the_page_shows(tmp_path):
    part = _section("Adding a recipe")
    (code,), (command,), (shown,) = _fenced(part, "python"), _fenced(part, "sh"), _fenced(part, "")
    (tmp_path / "mxfp8_inner.py").write_text(code)
    argv = shlex.split(command.strip())
    assert argv[:2] == ["python", "-c"] and len(argv) == 3
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    table = done.stdout.split("\n\n", 1)[0].splitlines()
    assert [ln.rsplit(None, 1)[0] for ln in table] == shown.rstrip("\n").splitlines()  # all but the time column
    # no terminal here: one line per finished recipe, as the page says, named for the command
    assert [ln.split(" done in")[0] for ln in done.stderr.splitlines() if " done in " in ln] == [
        "fpsim compare: fp32", "fpsim compare: mxfp8-inner"]
    assert "half a minute" in part  # the page says how long it runs


def test_the_dask_snippet_prints_its_table_and_says_how_long_it_runs():
    (code,) = [b for b in _fenced(_section("Sweeps: recipes x seeds x settings"), "python") if "LocalCluster" in b]
    guarded = code.split('if __name__ == "__main__":', 1)[1]
    assert "print(format_seed_table(by_seed))" in guarded and "half a minute" in guarded
    compile(code, "dask_sweep.py", "exec")
