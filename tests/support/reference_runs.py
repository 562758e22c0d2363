"""The reference task's default runs and the findings' quick runs, each made once per session and shared.

``test_experiments``, ``test_bf16_updates`` and ``test_fp8`` read full 150-step
runs of the reference task (seed 0, the defaults of ``fpsim compare``).  Each recipe is trained
once here, by the same ``compare`` the command calls; a recipe trains alone exactly as
it trains beside others (every run starts from the same weights and data; ``test_determinism``
checks that serial and parallel sweeps give the same bits).  ``test_findings`` and each finding's own
module read the finding's quick run on seed 0, as ``fpsim reproduce NAME --quick`` makes it.
Under ``pytest -n`` the workers share them (``support.shared_runs``): a run is made once in the
session, whichever module asks first.

The runs are shared objects: tests read them and never change them.
"""

from __future__ import annotations

from fpsim.experiments import compare
from fpsim.experiments.findings import get_finding
from support.shared_runs import shared

__all__ = ["reference_runs", "quick_run"]


def _one(recipe: str):
    return compare([recipe], progress=False)[recipe]


def reference_runs(recipes) -> dict:
    """``{recipe: RunResult}``: what ``compare(recipes, progress=False)`` returns, each run trained once."""
    return {name: shared(("reference run", name), lambda name=name: _one(name)) for name in recipes}


def quick_run(name: str):
    """The finding's quick run on seed 0: ``get_finding(name).reproduce(quick=True, seeds=(0,))``, made once."""
    return shared(("quick run", name), lambda: get_finding(name).reproduce(quick=True, seeds=(0,)))
