"""docs/pipeline.md's "Adding a task" and "Adding a recipe": each section's one file of code, saved
as a file and run in a fresh interpreter (registering there leaves this process's registries as
they are), then trained through ``train`` and through ``fpsim compare``'s own machinery (its help,
``--task`` / ``--recipes``, the table and the JSON); and the page's Dask snippet runs as a script."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "pipeline.md"


def _blocks(heading: str) -> list[str]:
    part = DOC.read_text().split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", part, re.S)


def _section(heading: str) -> str:
    blocks = _blocks(heading)
    assert len(blocks) == 1, f"{heading}: the section holds one complete file of code"
    return blocks[0]


def _run(tmp_path, name: str, code: str, script: str) -> str:
    (tmp_path / f"{name}.py").write_text(code)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


TASK_RUN = """
import contextlib, io, json
import line_fit
from fpsim.experiments import TASKS, train
from fpsim.tools.cli import main

assert TASKS.get("line-fit") is line_fit.LineFit
r = train("line-fit", "fp32", 0)
print(json.dumps({"losses": r.losses, "slope": r.metrics["slope"]}))
help = io.StringIO()
with contextlib.redirect_stdout(help), contextlib.suppress(SystemExit):
    main(["compare", "--help"])
print(" ".join(help.getvalue().split()))
assert main(["compare", "--task", "line-fit", "--quiet", "--figure", "none"]) == 0
"""


def test_the_pages_task_registers_trains_and_runs_in_fpsim_compare(tmp_path):
    out = _run(tmp_path, "line_fit", _section("Adding a task"), TASK_RUN)
    first, help_text, table = out.split("\n", 2)
    got = json.loads(first)
    # the reference: SGD on w, b by hand in float64 (w x + b against 3 x, the mean squared error)
    x = np.linspace(-1, 1, 64, dtype=np.float32).astype(np.float64)
    from fpsim import nn

    w, b = (float(p.f32().ravel()[0]) for p in nn.Sequential(nn.Linear(1, 1, seed=0)).parameters())
    losses = []
    for _ in range(50):
        e = w * x + b - 3 * x
        losses.append(np.mean(e**2))
        w, b = w - 0.1 * np.mean(2 * e * x), b - 0.1 * np.mean(2 * e)
    np.testing.assert_allclose(got["losses"], losses, rtol=1e-4)
    assert got["slope"] == pytest.approx(w, rel=1e-4)
    assert "line-fit: Fit y = 3x on 64 points in [-1, 1] with one Linear layer, full batch (default recipes " \
           "fp32 fp16-pure bf16-pure)" in help_text
    header = table.splitlines()[0].split()
    assert header[:5] == ["recipe", "final", "loss", "vs", "fp32"] and "slope" in header
    assert [line.split()[0] for line in table.splitlines()[2:5]] == ["fp32", "fp16-pure", "bf16-pure"]


RECIPE_RUN = """
import contextlib, io, json
import mxfp8_inner
from fpsim import lowp
from fpsim.experiments import RECIPES, ReferenceTask, train
from fpsim.tools.cli import main

rec = RECIPES.get("mxfp8-inner")
assert rec is mxfp8_inner.RECIPE
run = rec.prepare(ReferenceTask(n=64).model(0), lr=1e-2)
print(json.dumps([type(m).__name__ for _, m in run.model.named_modules()
                  if isinstance(m, (lowp.BlockLinear,)) or type(m).__name__ == "Linear"]))
a = train(ReferenceTask(n=256), "mxfp8-inner", 0, steps=3)
b = train(ReferenceTask(n=256), "mxfp8", 0, steps=3)
print(json.dumps([a.losses, b.losses]))
help = io.StringIO()
with contextlib.redirect_stdout(help), contextlib.suppress(SystemExit):
    main(["compare", "--help"])
print(" ".join(help.getvalue().split()))
assert main(["compare", "--recipes", "fp32", "mxfp8-inner", "--steps", "2", "--quiet", "--json", "--figure", "none"]) == 0
"""


def test_the_pages_recipe_registers_and_runs_through_train_and_fpsim_compare(tmp_path):
    out = _run(tmp_path, "mxfp8_inner", _section("Adding a recipe"), RECIPE_RUN)
    kinds, losses, help_text, result = out.split("\n", 3)
    # four Linears: the first and the last stay nn.Linear, the two inner ones become BlockLinear
    assert json.loads(kinds) == ["Linear", "BlockLinear", "BlockLinear", "Linear"]
    inner, every = json.loads(losses)
    assert inner[0] != every[0] and all(np.isfinite(inner))  # another recipe than mxfp8 on every Linear
    assert "mxfp8-inner" in help_text.split("known: ")[1]
    got = json.loads(result)
    assert list(got) == ["fp32", "mxfp8-inner"] and len(got["mxfp8-inner"]["losses"]) == 2


def test_the_pages_dask_snippet_is_a_script_that_guards_its_cluster():
    """Saved as a script, the snippet starts its cluster under ``if __name__ == "__main__":`` (Dask's
    worker processes import the file again); imported, it starts nothing."""
    dask = [b for b in _blocks("Sweeps: recipes x seeds x settings") if "LocalCluster" in b]
    assert len(dask) == 1
    code = dask[0]
    assert 'if __name__ == "__main__":' in code
    guarded = code.split('if __name__ == "__main__":', 1)[1]
    assert "LocalCluster(" in guarded and "LocalCluster(" not in code.split('if __name__', 1)[0].split("import")[-1]
    compile(code, "dask_sweep.py", "exec")
