"""docs/pipeline.md's "Adding a format": the page's whole file, run in a fresh interpreter (its
registration leaves this process's BLOCK_FORMATS as it is), then used by name - cast, tensors,
quantize and a block-scaled training run - each result held against ml_dtypes or plain float64."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np

DOC = Path(__file__).resolve().parents[2] / "docs" / "pipeline.md"

USE = """
import json, runpy, sys
import numpy as np
import fpsim
from fpsim import lowp, nn, optim

page = runpy.run_path(sys.argv[1])  # registers e3m4_block, as importing the file would
E3M4 = page["E3M4"]
out = {"script": __import__("subprocess").run([sys.executable, sys.argv[1]], capture_output=True, text=True).stdout}
x = np.linspace(-40, 40, 64, dtype=np.float32)
out["cast"] = fpsim.cast(np.array([1e9, 0.3, -3.1, 1e-3], np.float32), E3M4).astype(np.float32).tolist()
a = fpsim.tensor([1.3, -0.7], E3M4, requires_grad=True)
out["promoted"] = [(a * fpsim.tensor([0.5, 2.0], f)).fmt.name for f in ("fp16", "bf16", "e4m3", "fp32")]
q = fpsim.quantize(x, "e3m4_block")
out["scales"], out["deq"] = q.scales.tolist(), q.dequantize().tolist()
rng = np.random.default_rng(0)
xs, ys = rng.standard_normal((32, 8)).astype(np.float32), rng.standard_normal((32, 4)).astype(np.float32)
model = nn.MLP([8, 16, 4], seed=0)
out["swapped"] = lowp.convert(model, lowp.BlockScaling("e3m4_block"))
opt = optim.SGD(model.parameters(), lr=0.05)
losses = []
for _ in range(20):
    loss = ((model(fpsim.tensor(xs)) - fpsim.tensor(ys)) ** 2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    losses.append(loss.item())
out["losses"] = losses
print(json.dumps(out))
"""


def _page_code() -> str:
    part = DOC.read_text().split("\n## Adding a format\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", part, re.S)
    assert len(blocks) == 1, "the section holds one complete file of code"
    return blocks[0]


def test_the_pages_formats_cast_compute_quantize_and_train(tmp_path):
    page = tmp_path / "my_formats.py"
    page.write_text(_page_code())
    use = tmp_path / "use.py"
    use.write_text(USE)
    proc = subprocess.run([sys.executable, str(use), str(page)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["script"].split() == ["[inf", "0.296875]", "float16", "[4.", "4.]", "9.0"]  # what the page says
    e3m4 = ml_dtypes.float8_e3m4
    want = np.array([1e9, 0.3, -3.1, 1e-3], np.float32).astype(e3m4).astype(np.float32)
    assert np.array_equal(np.array(out["cast"], np.float32), want, equal_nan=True)
    assert out["promoted"] == ["float16", "bfloat16", "float16", "float32"]
    x = np.linspace(-40, 40, 64, dtype=np.float32)
    assert out["scales"] == [4.0, 4.0]  # 40 / 15.5 = 2.58 -> 4: the smallest power of two that fits
    deq = np.clip(x / 4, -15.5, 15.5).astype(e3m4).astype(np.float32) * 4  # exact: /4 and *4
    assert np.array_equal(np.array(out["deq"], np.float32), deq)
    assert out["swapped"] == ["0", "2"]
    losses = out["losses"]
    assert all(np.isfinite(losses)) and losses[-1] < 0.9 * losses[0]
