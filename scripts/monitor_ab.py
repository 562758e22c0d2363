"""The monitor's cost, old against new, in one process: the fp16-dynamic MLP step (``fpsim bench``'s
monitor row) with no monitor, inside a git revision's ``fpsim.monitor.Monitor`` and inside the working
tree's, interleaved (each round times four steps of each, the order alternating); prints, for each,
the median of the per-round ratios monitored / unmonitored, and new / old.  Both monitors count the
same step's events; ``tests/instruments/test_monitor_bits.py`` holds the counts to float64 references.

    python scripts/monitor_ab.py [revision] [recipe] [rounds]    # default HEAD fp16-dynamic 40
"""

import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import fpsim.monitor  # noqa: F401 - the working tree's, as sys.modules["fpsim.monitor"]
from fpsim.tools.allocator import keep_freed_memory
from fpsim.tools.bench.steps import fpsim_step


def _old_monitor(rev: str):
    src = subprocess.run(["git", "show", f"{rev}:fpsim/monitor.py"], capture_output=True, text=True,
                         check=True).stdout
    path = Path(tempfile.mkdtemp()) / "_monitor_old.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("fpsim._monitor_old", path)  # in fpsim: its relative imports work
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def main(rev="HEAD", recipe="fp16-dynamic", rounds=40):
    keep_freed_memory()
    old, new = _old_monitor(rev), sys.modules["fpsim.monitor"]
    step = fpsim_step(recipe, 128, backend="numpy")

    def inside(mod):
        def f():
            with mod.Monitor():
                step()
        return f

    fns = {"off": step, "old": inside(old), "new": inside(new)}
    for f in fns.values():
        for _ in range(3):
            f()
    ratios = {"old": [], "new": []}
    for i in range(int(rounds)):
        t = {}
        for k in (list(fns) if i % 2 else list(fns)[::-1]):
            s = time.perf_counter()
            for _ in range(4):
                fns[k]()
            t[k] = time.perf_counter() - s
        for k in ratios:
            ratios[k].append(t[k] / t["off"])
    for k, r in ratios.items():
        print(f"{k} ({rev if k == 'old' else 'working tree'}): monitored / unmonitored step, median "
              f"{statistics.median(r):.3f} (quartiles {np.percentile(r, 25):.3f}-{np.percentile(r, 75):.3f})")
    print(f"new / old: median {statistics.median(np.array(ratios['new']) / np.array(ratios['old'])):.3f}")


if __name__ == "__main__":
    main(*sys.argv[1:])
