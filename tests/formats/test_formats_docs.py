"""docs/formats.md's block-quantize snippet runs, and its comments name what the code returns."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

import fpsim

PAGE = Path(__file__).resolve().parents[2] / "docs" / "formats.md"


def _block_snippet() -> str:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    found = [b for b in blocks if "q.stats.totals()" in b]
    assert len(found) == 1, "docs/formats.md: one python block showing q.stats.totals()"
    return found[0]


def test_the_block_quantize_snippet_runs_and_its_totals_comment_names_the_keys_returned():
    code = _block_snippet()
    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32) * np.float32(1e3)
    ns = {"fpsim": fpsim, "x": x}
    exec(compile(code, str(PAGE), "exec"), ns)
    q = ns["q"]
    comment = next(ln for ln in code.splitlines() if ln.startswith("q.stats.totals()")).split("#", 1)[1]
    assert re.findall(r'"(\w+)":', comment) == list(q.stats.totals())  # was "per block: ... the scale used"
    t = q.stats.totals()
    assert t["blocks"] == 8 and t["underflow"] == int(q.stats.underflow.sum())
    # every q.stats.<field> the snippet names is a per-block array shaped like the scales
    for name in re.findall(r"q\.stats\.(\w+)\b(?!\()", code):
        if name != "totals":
            assert np.shape(getattr(q.stats, name)) == q.scales.shape, name
