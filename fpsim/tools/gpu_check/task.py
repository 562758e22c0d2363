"""``fpsim gpu-check``, part 2: the reference task trained on numpy and on the device.

For each recipe, from the same initial weights: the loss curves (their largest relative
difference against a stated tolerance), the skipped steps and loss scales, the per-op
rounding-event counts of ``fpsim.monitor`` over the first steps, and the time per step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ... import backend as _backend
from ...experiments import ReferenceTask, get_recipe, train
from ...monitor import COUNTERS, monitor
from ...textable import text_table

__all__ = ["LOSS_RTOL", "LOSS_RTOL_LOW", "COUNT_RTOL", "TaskCheck", "task_check", "format_task_table", "max_rel"]


LOSS_RTOL = {"fp32": 1e-3}
LOSS_RTOL_LOW = 2e-2
COUNT_RTOL = 1e-3


@dataclass
class TaskCheck:
    """One recipe of the reference task on both backends."""

    recipe: str
    steps: int
    ref_losses: list
    dev_losses: list
    max_rel_diff: float
    rtol: float
    ref_step_s: float
    dev_step_s: float
    skipped_equal: bool
    scales_equal: bool
    count_keys: int = 0
    count_n_mismatch: int = 0  # keys whose n differ (must be 0)
    count_worst: list = field(default_factory=list)  # [(key, counter, ref, dev)] the largest differences
    count_ok: bool = True
    failure: str = ""

    @property
    def ok(self) -> bool:
        return self.max_rel_diff <= self.rtol and self.count_ok and not self.failure


def max_rel(a, b) -> float:
    """The largest relative difference |a - b| / |a| of two loss curves (NaN on both sides
    agrees; NaN on one side, or curves of different lengths, is inf)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return math.inf
    with np.errstate(invalid="ignore", divide="ignore"):
        d = np.abs(a - b) / np.maximum(np.abs(a), np.finfo(np.float64).tiny)
    d = np.where(np.isnan(a) & np.isnan(b), 0.0, d)
    return float(np.nanmax(np.where(np.isnan(d), np.inf, d))) if d.size else 0.0


def _compare_counts(ref: dict, dev: dict):
    """(keys, keys whose n differ, worst differences, ok) for two Monitor.counts dicts."""
    worst = []
    n_bad = 0
    ok = set(ref) == set(dev)
    for key in sorted(set(ref) | set(dev)):
        a, b = ref.get(key), dev.get(key)
        if a is None or b is None:
            worst.append((key, "missing", a is not None, b is not None))
            continue
        if a[0] != b[0]:
            n_bad += 1
            ok = False
        for name, x, y in zip(COUNTERS[1:], a[1:], b[1:]):
            if x != y:
                worst.append((key, name, x, y))
                if abs(x - y) > COUNT_RTOL * a[0] + 1:
                    ok = False
    worst.sort(key=lambda w: -abs(w[2] - w[3]) if isinstance(w[2], int) else 0)
    return len(ref), n_bad, worst[:5], ok


def task_check(device, recipes=("fp32", "fp16-dynamic", "bf16-master"), task=None, *, steps: int = 50,
               monitor_steps: int = 3, seed: int = 0, reference=None, progress=None) -> list[TaskCheck]:
    """Train the reference task under each recipe on ``reference`` (numpy) and ``device`` from
    the same initial weights; compare loss curves, skipped steps, loss scales, rounding-event
    counts (``fpsim.monitor`` over ``monitor_steps`` steps) and time per step.  The device run
    is preceded by a one-step warm-up (CuPy compiles its kernels on first use)."""
    task = task or ReferenceTask()
    ref_be = _backend.get_backend(reference)
    dev_be = _backend.get_backend(device)
    out = []
    for name in recipes:
        r = get_recipe(name)
        if progress:
            progress(f"task {r.name}")
        train(task, r, seed, steps=1, measure_at=(), backend=dev_be)  # warm-up
        a = train(task, r, seed, steps=steps, measure_at=(), backend=ref_be)
        b = train(task, r, seed, steps=steps, measure_at=(), backend=dev_be)
        with monitor() as ma:
            train(task, r, seed, steps=monitor_steps, measure_at=(), backend=ref_be)
        with monitor() as mb:
            train(task, r, seed, steps=monitor_steps, measure_at=(), backend=dev_be)
        keys, n_bad, worst, cok = _compare_counts(ma.counts, mb.counts)
        rtol = LOSS_RTOL.get(r.name, LOSS_RTOL_LOW)
        out.append(TaskCheck(
            recipe=r.name, steps=steps, ref_losses=a.losses, dev_losses=b.losses,
            max_rel_diff=max_rel(a.losses, b.losses), rtol=rtol,
            ref_step_s=a.seconds / max(len(a.losses), 1), dev_step_s=b.seconds / max(len(b.losses), 1),
            skipped_equal=a.skipped == b.skipped, scales_equal=a.scales == b.scales,
            count_keys=keys, count_n_mismatch=n_bad, count_worst=worst, count_ok=cok,
            # diverging in the same way on both is agreement; diverging on one only is not
            failure="" if a.failure == b.failure else f"numpy: {a.failure or 'trained'}; device: {b.failure or 'trained'}"))
    return out


def format_task_table(checks: list[TaskCheck], ref_name: str, dev_name: str) -> str:
    cols = ["recipe", "steps", f"final loss {ref_name}", f"final loss {dev_name}", "max rel. diff", "tolerance",
            "skips/scales equal", "monitor keys (n differ)", f"step {ref_name}", f"step {dev_name}", "ok"]
    body = []
    for c in checks:
        body.append([c.recipe, str(c.steps), f"{c.ref_losses[-1]:.6e}" if c.ref_losses else "-",
                     f"{c.dev_losses[-1]:.6e}" if c.dev_losses else "-", f"{c.max_rel_diff:.2e}", f"{c.rtol:g}",
                     f"{'yes' if c.skipped_equal else 'NO'}/{'yes' if c.scales_equal else 'NO'}",
                     f"{c.count_keys} ({c.count_n_mismatch})", f"{1e3 * c.ref_step_s:.1f} ms",
                     f"{1e3 * c.dev_step_s:.1f} ms", "yes" if c.ok else "NO"])
    lines = text_table(cols, body)
    for c in checks:
        for key, counter, x, y in c.count_worst:
            lines.append(f"  {c.recipe}: monitor {'/'.join(s or '-' for s in key)} {counter}: {ref_name} {x}, "
                         f"{dev_name} {y}")
        if c.failure:
            lines.append(f"  {c.recipe}: {c.failure}")
    return "\n".join(lines)
