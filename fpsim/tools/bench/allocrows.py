"""``fpsim bench``'s allocator section: what keeping freed memory (``fpsim.tools.allocator``) does to
a training step.

glibc reads its thresholds once, when a process starts, so the two sides cannot share a process:
the tiny GPT's fp32 step (the step section's model) is timed in fresh processes taken in turn, one
with glibc's default thresholds (every ``MALLOC_*`` variable removed from its environment) and one
with the two that ``keep_freed_memory`` sets (which side starts a pair alternates).  Each process
warms the step up, then times it; the row's ratio is the median over the pairs of (kept / default),
each side the median of its process's steps.  Below 1: keeping freed memory makes the step faster.
The bits do not change: where an array lives does not change what is computed.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

from ..allocator import MMAP_THRESHOLD, TRIM_THRESHOLD
from .rows import QUICK_GPT, Row, gpt_label, gpt_task

__all__ = ["allocator_rows"]

# one process: build the step, warm it up, time it; print the seconds of each timed step (JSON)
_CHILD = r"""
import json, sys, time
from fpsim.experiments.tinygpt import TinyGPTTask, training_step

step = training_step("fp32", TinyGPTTask(**json.loads(sys.argv[1])), backend="numpy")
for _ in range(int(sys.argv[2])):
    step()
seconds = []
for _ in range(int(sys.argv[3])):
    t = time.perf_counter()
    step()
    seconds.append(time.perf_counter() - t)
print(json.dumps(seconds))
"""


def _environments() -> tuple[dict, dict]:
    """(glibc's defaults, freed memory kept): this process's environment without any ``MALLOC_*``
    variable, and with fpsim's two thresholds."""
    default = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    kept = {**default, "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD), "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD)}
    return default, kept


def _median_step(env: dict, task_kwargs: dict, warmup: int, steps: int) -> float:
    """The median seconds of ``steps`` timed fp32 steps in a fresh process with environment ``env``."""
    done = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(task_kwargs), str(warmup), str(steps)],
                          env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the allocator section's timing process failed: {last}")
    return statistics.median(json.loads(done.stdout))


def allocator_rows(s, tick) -> list[Row]:
    """One row: the tiny GPT's fp32 step with freed memory kept against glibc's default thresholds,
    in fresh processes (``s``: the run's ``BenchSettings``; 1 pair of 2 steps with ``--quick``, else
    3 pairs of 25)."""
    task = gpt_task(s)
    name = f"fpsim fp32 {gpt_label(task)}, freed memory kept (fresh processes)"
    peer = "same step, glibc's default thresholds"
    tick("allocator")
    if not sys.platform.startswith("linux"):
        return [Row("allocator", name, peer, skipped="glibc's thresholds: Linux only")]
    pairs, steps = (1, 2) if s.quick else (3, 25)
    default, kept = _environments()
    task_kwargs = QUICK_GPT if s.quick else {}
    per_pair = []  # (kept, default) seconds; which side starts alternates, so a drift in load hits both
    for i in range(pairs):
        first, second = (kept, default) if i % 2 == 0 else (default, kept)
        a, b = (_median_step(env, task_kwargs, s.warmup, steps) for env in (first, second))
        per_pair.append((a, b) if i % 2 == 0 else (b, a))
    return [Row("allocator", name, peer, statistics.median(k for k, _ in per_pair),
                statistics.median(d for _, d in per_pair), statistics.median(k / d for k, d in per_pair),
                note=f"MALLOC_MMAP_THRESHOLD_={MMAP_THRESHOLD >> 20} MiB, MALLOC_TRIM_THRESHOLD_={TRIM_THRESHOLD >> 20} "
                     f"MiB (fpsim.tools.allocator); {pairs} pair(s) of processes, {steps} steps each")]
