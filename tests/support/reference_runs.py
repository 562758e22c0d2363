"""The reference task's default runs, trained once per test process and shared.

``test_experiments``, ``test_bf16_updates`` and ``test_fp8`` read full 150-step
runs of the reference task (seed 0, the defaults of ``fpsim compare``).  Each recipe is trained
once per process here, by the same ``compare`` the command calls; a recipe trains alone exactly as
it trains beside others (every run starts from the same weights and data; ``test_determinism``
checks that serial and parallel sweeps give the same bits).  Under ``pytest -n`` the modules
share the runs where pytest-xdist gives them the same worker process; each module's tests run in
one worker (``--dist loadscope``), so a module never trains a run twice.

The runs are shared objects: tests read them and never change them.
"""

from __future__ import annotations

import functools

from fpsim.experiments import compare

__all__ = ["reference_runs"]


@functools.cache
def _one(recipe: str):
    return compare([recipe], progress=False)[recipe]


def reference_runs(recipes) -> dict:
    """``{recipe: RunResult}``: what ``compare(recipes, progress=False)`` returns, each run trained once."""
    return {name: _one(name) for name in recipes}
