"""docs/pipeline.md's "Adding a finding": the page's whole file of a new finding, run in a fresh
interpreter (registering it there leaves this process's catalogue as it is) through ``fpsim
reproduce``'s own machinery - the list, a quick run with its JSON and figure, the table - and its
verdict checked against the numbers the run printed."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "pipeline.md"

RUN = """
import runpy, sys
from fpsim.experiments.findings import table
from fpsim.tools.cli import main

module = runpy.run_path(sys.argv[1])
assert main(["reproduce", "--list"]) == 0
assert main(["reproduce", module["NAME"], "--quick", "--json", "--figure", sys.argv[2]]) == 0
rows = [line for line in table.markdown({}, quick=True).splitlines() if line.startswith("| `")]
assert rows[-1].startswith("| `" + module["NAME"] + "` |"), rows[-1]  # the table's last row: its order
"""


def _section() -> str:
    text = DOC.read_text()
    part = text.split("\n## Adding a finding\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", part, re.S)
    assert len(blocks) == 1, "the section holds one complete file of code"
    return blocks[0]


def test_the_pages_finding_runs_through_fpsim_reproduce(tmp_path):
    code = _section()
    path = tmp_path / "bf16_pure_stalls.py"
    path.write_text(code)
    fig = tmp_path / "fig.png"
    done = subprocess.run([sys.executable, "-c", RUN, str(path), str(fig)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    listing, result = done.stdout.split("{", 1)
    assert "bf16-pure-stalls" in listing and "fp16-loss-scaling" in listing  # beside the catalogue's own
    got = json.loads("{" + result)
    assert got["name"] == "bf16-pure-stalls" and got["quick"] and got["seeds"] == [0]
    assert got["numbers"]["steps"] == 10.0 and got["numbers"]["fp32_stalled"] == 0.0
    assert 0.01 < got["numbers"]["stalled"] < 0.5 and got["verdict"] == "reproduced"
    assert fig.stat().st_size > 1000  # the standard loss-ratio figure, drawn from the result's series
    # the verdict is the page's rule applied to the numbers the run printed
    ns: dict = {}
    exec(compile(code.replace("FINDING = FINDINGS.register(", "FINDING = ("), str(path), "exec"), ns)
    assert ns["verdict"](got["numbers"]) == (got["verdict"], got["reason"])
    assert ns["FINDING"].sweep.recipes == ("fp32", "bf16-pure")
