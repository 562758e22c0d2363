"""``compare_seeds(..., jobs=N)`` / ``fpsim compare --seeds ... --jobs N``: the runs in worker
processes give the serial sweep's results, number for number."""

from __future__ import annotations

import dataclasses

import pytest

from fpsim.experiments import ReferenceTask, compare_seeds


def _numbers(by_seed):
    out = {}
    for seed, runs in by_seed.items():
        for name, r in runs.items():
            d = dataclasses.asdict(r)
            d.pop("seconds")
            out[seed, name] = repr(d)  # repr: NaN == NaN, and every float to the last bit
    return out


def test_parallel_sweep_equals_serial():
    task = ReferenceTask(n=512)
    recipes = ["fp32", "fp16-dynamic", "bf16-stochastic", "fp8-delayed"]
    serial = compare_seeds(recipes, [0, 3], task, steps=4, progress=False)
    parallel = compare_seeds(recipes, [0, 3], task, steps=4, progress=False, jobs=2)
    assert list(parallel) == [0, 3] and all(list(parallel[s]) == recipes for s in parallel)
    assert _numbers(parallel) == _numbers(serial)


def test_jobs_must_be_positive():
    with pytest.raises(ValueError):
        compare_seeds(["fp32"], [0], ReferenceTask(n=64), steps=1, progress=False, jobs=0)
