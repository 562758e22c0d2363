"""The one rule of rounding: every value the engine stores is rounded in tensor.round_result,
where the hooks see it - no side doors (Adam's moments, the backward seed, the narrow
accumulators, the optimizer's writes)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from helpers import small_task

from fpsim import nn, ops, state
from fpsim.backend import get_backend
from fpsim.experiments import get_recipe
from fpsim.tensor import tensor


def _events(fn):
    seen = []
    with state.hooked(seen.append):
        fn()
    return seen


@pytest.mark.parametrize("recipe", ["fp16-pure", "fp16-dynamic", "bf16-kahan", "bf16-stochastic", "fp16-amp",
                                    "fp8-delayed", "mxfp4-sr-rht"])
def test_after_the_first_step_every_rounding_of_a_training_step_goes_through_round_result(recipe, monkeypatch):
    """The backend's rounding functions, watched during a whole training step (the second: the
    first creates the optimizer's zero state): each call comes from round_result."""
    task = small_task(64)
    r = get_recipe(recipe)
    run = r.prepare(task.model(0), lr=1e-3)
    batch = task.batches(r, None)(0)
    loss_fn = lambda m: task.loss(m, batch, r)  # noqa: E731
    run.step(loss_fn)
    be = get_backend(None)
    callers = []
    for name in ("round", "round_saturating"):
        original = getattr(be, name)

        def watched(*a, _original=original, **k):
            callers.append(sys._getframe(1).f_code.co_name)
            return _original(*a, **k)

        monkeypatch.setattr(be, name, watched)
    run.step(loss_fn)
    assert callers and set(callers) <= {"round_result", "_round_special"}, sorted(set(callers))


def test_adam_stores_its_moments_as_the_hooks_saw_them_rounded():
    p = tensor(np.float32([0.1, -0.2, 3e-5]), "float16", requires_grad=True)
    from fpsim.optim import Adam

    opt = Adam([p], lr=1e-3)
    p.grad = tensor(np.float32([1e-3, 2e-4, -5e-8]), "float16")
    seen = _events(opt.step)
    last = {ev.op: ev for ev in seen}
    assert opt.state[0]["exp_avg"].data is last["adam.exp_avg"].stored
    assert opt.state[0]["exp_avg_sq"].data is last["adam.exp_avg_sq"].stored


def test_the_backward_seed_is_a_rounding_the_hooks_see():
    x = tensor(np.float32([1.0, 2.0]), "bfloat16", requires_grad=True)
    loss = (x * x).sum()
    seen = _events(loss.backward)
    seed = [ev for ev in seen if ev.op == "backward_seed"]
    assert len(seed) == 1 and seed[0].direction == "backward" and seed[0].fmt.name == "bfloat16"
    assert float(seed[0].stored.astype(np.float32)) == 1.0


def test_a_narrow_accumulator_rounds_every_partial_sum_where_the_hooks_see_it():
    """Counting by 1 in float16: 2048 + 1 rounds back to 2048 (ties to even) - each of the 3000
    partial sums is an event, and the monitor counts the inexact ones."""
    x = tensor(np.ones((3000, 1), np.float32), "float32")
    seen = _events(lambda: ops.sum(x, axis=0, acc="float16"))
    acc = [ev for ev in seen if ev.op == "sum" and ev.target == "accumulator"]
    assert len(acc) == 3000 and acc[-1].stored.astype(np.float32).tolist() == [2048.0]
    assert sum(int(ev.exact32[0] != ev.stored.astype(np.float32)[0]) for ev in acc) == 3000 - 2048
    m = nn.Linear(3, 2, seed=0)
    a = tensor(np.ones((1, 3), np.float32), "float32")
    seen = _events(lambda: ops.matmul(a, m.weight.T, acc="bfloat16"))
    assert [(ev.op, ev.target) for ev in seen].count(("matmul", "accumulator")) == 3


def test_module_to_rounds_each_parameter_where_the_hooks_see_it():
    """``Module.to(fmt)`` stores each parameter rounded once into fmt by round_result: one event a
    parameter (op ``to``, the parameter's name), whose stored value is the new data."""
    m = nn.Linear(3, 2, seed=0)
    before = {n: p.f32().copy() for n, p in m.named_parameters()}
    seen = _events(lambda: m.to("float16"))
    ours = [ev for ev in seen if ev.op == "to"]
    assert [ev.fmt.name for ev in ours] == ["float16"] * len(before)
    for ev, (name, p) in zip(ours, m.named_parameters()):
        assert ev.direction == "update" and p.fmt.name == "float16"
        assert np.array_equal(np.asarray(ev.exact32), before[name])
        assert np.array_equal(np.asarray(ev.stored).view(np.uint16), p.numpy().view(np.uint16))
        assert np.array_equal(p.numpy().view(np.uint16), before[name].astype(np.float16).view(np.uint16))
    assert _events(lambda: m.to("float16")) == []  # already in fp16: nothing rounded


def test_the_block_linears_narrow_accumulator_rounds_every_partial_sum_where_the_hooks_see_it(monkeypatch):
    """BlockScaling(accumulate=...): each GEMM's partial sums (one a step along its K: in-features
    forward, out-features for dgrad, tokens for wgrad) are rounded by round_result (op block.linear,
    target accumulator), each stored value ml_dtypes' rounding of the exact one; with mantissa bits
    (e8m13) the backend's rounding is called from round_result only."""
    import ml_dtypes

    from fpsim.lowp import BlockLinear, BlockScaling

    rng = np.random.default_rng(0)
    x = tensor(rng.standard_normal((5, 32)).astype(np.float32), requires_grad=True)
    layer = BlockLinear(nn.Linear(32, 3, seed=0), BlockScaling("mxfp8_e4m3", accumulate="bfloat16"))
    seen = _events(lambda: layer(x).sum().backward())
    acc = [ev for ev in seen if ev.target == "accumulator"]
    assert {(ev.op, ev.fmt.name) for ev in acc} == {("block.linear", "bfloat16")}
    assert [ev.direction for ev in acc] == ["forward"] * 32 + ["backward"] * (3 + 5)
    for ev in acc:
        ref = np.asarray(ev.exact32, np.float32).astype(ml_dtypes.bfloat16)
        assert np.array_equal(np.asarray(ev.stored).view(np.uint16), ref.view(np.uint16))
    be = get_backend(None)
    callers = []
    original = be.round

    def watched(*a, **k):
        callers.append(sys._getframe(1).f_code.co_name)
        return original(*a, **k)

    monkeypatch.setattr(be, "round", watched)
    layer13 = BlockLinear(nn.Linear(32, 3, seed=0), BlockScaling("mxfp8_e4m3", accumulate=13, promote_every=8))
    seen = _events(lambda: layer13(x).sum().backward())
    assert sum(ev.target == "accumulator" and ev.fmt.name == "e8m13" for ev in seen) == 32 + 3 + 5
    assert len(callers) >= 32 + 3 + 5 and set(callers) <= {"round_result", "_round_special"}
