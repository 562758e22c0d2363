"""The optimizer-state-formats finding: its verdict on fixed numbers, its recipes building the
optimizers they name (Muon for the hidden matrices, Adam for the rest, each with the state format),
the state's bytes per parameter counted from the model, and the quick run's numbers pinned."""

import math

import numpy as np
import pytest
from support.reference_runs import quick_run

from fpsim.experiments.findings import FINDINGS, optstate
from fpsim.optim import Adam, Muon
from fpsim.optim_state import Stored


def _numbers(**over):
    n = {f"{r.name}_ratio": 1.0 for r in optstate.RECIPES}
    n["adam-int8-linear_ratio"] = 1.37
    n.update(over)
    return n


@pytest.mark.parametrize("numbers, expected", [
    (_numbers(), "reproduced"),
    (_numbers(**{"adam-int8-linear_ratio": math.inf}), "reproduced"),
    (_numbers(**{"muon-int8-linear_ratio": 1.2}), "partly"),
    (_numbers(**{"llmc-bf16_ratio": 1.08}), "partly"),
    (_numbers(**{"adam-int8-linear_ratio": 1.01}), "not at this scale"),
])
def test_verdict_on_fixed_numbers(numbers, expected):
    verdict, reason = optstate.verdict(numbers)
    assert verdict == expected and reason and "\n" not in reason
    assert FINDINGS[optstate.NAME].verdict is optstate.verdict


def test_the_recipes_build_the_optimizers_they_name_with_the_state_format():
    task = optstate.StateTask()
    rec = next(r for r in optstate.RECIPES if r.name == "muon-int8-linear")
    run = rec.prepare(task.model(0), lr=task.lr, seed=0)
    muon, adam = run.opt.parts
    assert isinstance(muon, Muon) and type(adam) is Adam
    assert muon.state_format.name == "int8-linear" and adam.state_format.name == "float32"
    names = {id(p): n for n, p in run.model.named_parameters()}
    assert all(p.ndim == 2 and not names[id(p)].startswith(("tok_emb", "pos_emb", "head")) for p in muon.params)
    assert {id(p) for p in muon.params + adam.params} == set(names)
    run.step(lambda m: task.loss(m, task.batch_at(0), rec))
    assert all(isinstance(s["momentum_buffer"], Stored) for s in muon.state)
    run.opt.lr = 1e-3
    assert muon.lr == adam.lr == 1e-3
    llmc = next(r for r in optstate.RECIPES if r.name == optstate.LLMC)
    run = llmc.prepare(task.model(0), lr=task.lr, seed=0)
    assert run.opt.master is None and run.opt.update_rounding == "stochastic"
    assert run.opt.params[0].fmt.name == "bfloat16" and run.opt.state_format.name == "bfloat16-sr"


def test_state_bytes_per_parameter_from_the_model():
    task = optstate.StateTask()
    shapes = {n: p.shape for n, p in task.model(0).named_parameters()}
    n = sum(int(np.prod(s)) for s in shapes.values())
    assert optstate.state_bytes_per_param(task, "adam", "float32") == 8.0
    assert optstate.state_bytes_per_param(task, "adam", "bfloat16-sr") == 4.0
    matrices = sum(int(np.prod(s)) for k, s in shapes.items() if len(s) == 2 and not k.startswith(
        optstate.MATRIX_SKIP))
    assert optstate.state_bytes_per_param(task, "muon", "float32") == (4 * matrices + 8 * (n - matrices)) / n
    blocks = sum(2 * math.ceil(int(np.prod(s)) / 2048) for s in shapes.values())
    assert optstate.state_bytes_per_param(task, "adam", "int8-dynamic") == (2 * n + 4 * blocks) / n
    mblocks = sum(math.ceil(int(np.prod(s)) / 2048) for k, s in shapes.items() if len(s) == 2 and not k.startswith(
        optstate.MATRIX_SKIP))
    assert optstate.state_bytes_per_param(task, "muon", "int8-linear") == (matrices + 4 * mblocks
                                                                            + 8 * (n - matrices)) / n


@pytest.mark.slow
def test_quick_run_numbers_are_pinned():
    assert FINDINGS[optstate.NAME] is optstate.FINDING
    r = quick_run(optstate.NAME)  # made once in the session, shared with test_findings
    assert r.verdict == "reproduced" and r.numbers["steps"] == 40
    pinned = {"adam-int8-linear_ratio": 1.3692088117605985, "adam-int8-dynamic_ratio": 1.000167821466498,
              "muon-int8-linear_ratio": 1.0003187625075487, "llmc-bf16_ratio": 1.0004876890230967,
              "adam-e4m3-coat_ratio": 0.9998667416697292, "adam-int8-dynamic_bytes": 2.0161149825783973,
              "muon-int8-linear_bytes": 1.7587108013937283}
    assert {k: r.numbers[k] for k in pinned} == pinned
    assert set(r.series["curves"]) == {rec.name for rec in optstate.RECIPES}
