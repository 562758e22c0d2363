"""The tiny-GPT task: its data, its schedule, every recipe through ``compare``, the forward
overflow it provokes (fp16 dies in the forward pass, autocast and bfloat16 live), the table, and
the default run reaching its accuracy."""

import math
from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np
import pytest

from fpsim.experiments import (
    OVERFLOW,
    TASKS,
    TINYGPT_RECIPES,
    RunResult,
    TinyGPTTask,
    compare,
    format_table,
    get_recipe,
    train,
)
from fpsim.experiments.tinygpt import SEP
from fpsim.trace import FORWARD

SMALL = TinyGPTTask(n_digits=5, batch=8, steps=3, d_model=16, n_layers=1, n_heads=2, eval_size=16, warmup=2)


def test_data_is_generated_and_deterministic():
    t = TinyGPTTask()
    seq = t.batch_at(7)
    assert seq.shape == (32, 33) and t.context == 32 and t.vocab_size == 11
    assert (seq[:, 16] == SEP).all() and seq[:, :16].max() <= 9
    assert (seq[:, 17:] == np.sort(seq[:, :16], axis=1)).all()
    assert np.array_equal(seq, TinyGPTTask().batch_at(7)) and not np.array_equal(seq, t.batch_at(8))
    assert np.array_equal(t.eval_batch(), TinyGPTTask().eval_batch())
    assert not np.array_equal(replace(t, data_seed=1).batch_at(7), seq)


def test_schedule_warms_up_then_decays():
    t = TinyGPTTask(lr=1e-2, warmup=10)
    lrs = [t.lr_at(s, 100, t.lr) for s in range(100)]
    assert lrs[0] == pytest.approx(1e-3) and max(lrs) == pytest.approx(lrs[9]) and lrs[-1] < 1e-5
    assert all(a >= b for a, b in zip(lrs[9:], lrs[10:]))


def test_the_schedules_cosine_is_correctly_rounded():
    """lr_at's cos(pi * step / steps) is the exact cosine rounded once to float64 (mpmath at 60 digits,
    rounded by Fraction), not the C library's."""
    mpmath = pytest.importorskip("mpmath")
    from fpsim.numerics.scalars import cos64

    with mpmath.workdps(60):
        for steps in (60, 250):
            for s in range(steps + 1):
                x = math.pi * s / steps
                assert cos64(x) == float(Fraction(str(mpmath.cos(mpmath.mpf(x))))), (s, steps)


def test_every_recipe_runs_through_compare():
    out = compare(TINYGPT_RECIPES, SMALL, progress=False)
    assert list(out) == list(TINYGPT_RECIPES)
    for name, r in out.items():
        assert isinstance(r, RunResult)
        assert 0.0 <= r.metrics["accuracy"] <= 1.0 or r.failure, name
        assert r.failure or len(r.losses) == 3
    assert out["fp8-delayed"].fp8  # its Linears ran in fp8 (the attention products did not)
    assert out["fp32"].nonfinite is None and np.isfinite(out["fp32"].final_loss)
    assert train(SMALL, "fp32", steps=2).metrics["accuracy"] >= 0


def test_a_sweep_measures_at_the_tasks_own_steps_and_fpsim_compare_at_every_step(capsys):
    """compare / compare_seeds take the task's ``measure_at`` (the tiny GPT's: the first and the last
    step), as train does - the same runs, and the same table cells as measuring every step; ``fpsim
    compare --json`` still gives every step (the figure draws them)."""
    import json

    from fpsim.experiments import compare_seeds
    from fpsim.tools import cli

    task = replace(SMALL, steps=4)
    r = compare(["fp32"], task, progress=False)["fp32"]
    assert TinyGPTTask.measure_at == (0, -1) and sorted(r.act_grad_flushed) == sorted(r.stalled) == [0, 3]
    alone = train(task, "fp32", 1)
    assert compare_seeds(["fp32"], [1], task, progress=False)[1]["fp32"].act_grad_flushed == alone.act_grad_flushed
    every = compare(["fp32"], task, progress=False, measure_at="all")["fp32"]
    assert sorted(every.act_grad_flushed) == [0, 1, 2, 3] and every.losses == r.losses

    def row(res):
        return [ln for ln in format_table({"fp32": res}).splitlines() if ln.startswith("fp32 ")][0].rsplit(None, 1)[0]

    assert row(every) == row(r)  # the first and last steps are the table's (its time column aside)
    assert cli.main(["compare", "--task", "tinygpt", "--steps", "3", "--recipes", "fp32", "--json", "--quiet",
                     "--figure", "none"]) == 0
    got = json.loads(capsys.readouterr().out)["fp32"]
    assert sorted(got["act_grad_flushed"]) == sorted(got["stalled"]) == ["0", "1", "2"]


def test_block_recipes_swap_every_linear_of_the_gpt_and_reseed_their_rounding():
    """The block recipes run on the transformer too: every nn.Linear becomes a BlockLinear (the
    attention products stay in the model's format), and a run with stochastic rounding is the
    same twice (its draws come from the run's seed)."""
    from fpsim import lowp, nn

    run = get_recipe("nvfp4").prepare(SMALL.model(0), lr=SMALL.lr)
    kinds = [type(m) for _, m in run.model.named_modules()]
    assert lowp.BlockLinear in kinds and kinds.count(nn.Linear) == 2  # nvfp4 keeps the first and last Linear
    a, b = (train(SMALL, "mxfp4-sr-rht", steps=2) for _ in range(2))
    assert a.losses == b.losses and np.isfinite(a.losses).all()


def _loud(task):
    """Scores x 10 (not / 4): the naive softmax overflows float16 at the first step (scores past
    11.09), not float32 (below 88.7)."""
    return replace(task, attn_stable=False, qk_scale=10.0)


def test_forward_overflow_kills_float16_and_not_autocast_or_bfloat16():
    task = _loud(SMALL)
    res = {n: train(task, n) for n in ("fp16-master", "fp16-dynamic", "fp16-amp", "bf16-master")}
    dead = res["fp16-master"]
    assert dead.failure and dead.nonfinite.kind == FORWARD and dead.nonfinite.step == 0
    assert (dead.nonfinite.op, dead.nonfinite.scope, dead.nonfinite.fmt) == ("exp", "blocks.0.attn", "float16")
    dyn = res["fp16-dynamic"]  # the scaler skips every step: the overflow is not in the gradients
    assert not dyn.failure and dyn.steps_skipped == 3 and dyn.nonfinite.kind == FORWARD
    assert any("forward overflow" in n for n in dyn.notes)
    for name in ("fp16-amp", "bf16-master"):
        r = res[name]
        assert not r.failure and r.nonfinite is None and r.steps_skipped == 0 and np.isfinite(r.final_loss), name


def test_table_has_accuracy_nonfinite_and_skipped_share():
    task = _loud(SMALL)
    results = {n: train(task, n) for n in ("fp32", "fp16-master", "fp16-dynamic")}
    text = format_table(results)
    assert "answer acc" in text and "first non-finite" in text and "R^2" not in text
    assert "step 0: exp in blocks.0.attn (forward)" in text
    assert "3 (100%)" in text  # fp16-dynamic skipped all 3 steps
    assert "where it went wrong" in text and "forward overflow at step 0" in text


def test_the_overflow_setting_is_the_naive_softmax():
    assert OVERFLOW.attn_stable is False and replace(OVERFLOW, attn_stable=True) == TinyGPTTask()
    assert "attn_stable=False" in OVERFLOW.describe()


@pytest.mark.slow
def test_float32_learns_to_sort():
    """The default run: float32 predicts at least 95% of the sorted digits exactly."""
    r = train("tinygpt", "fp32")
    assert r.metrics["accuracy"] >= 0.95 and not r.failure


def _compare_parser():
    """``fpsim compare``'s own parser (built alone: the other tools' imports are beside the point)."""
    import argparse

    from fpsim.tools import cli

    parser = argparse.ArgumentParser(prog="fpsim")
    cli._add_compare(parser.add_subparsers(dest="cmd", required=True))
    return parser


@dataclass(frozen=True)
class SmallGPT(TinyGPTTask):
    """SMALL as a task class: what ``fpsim compare --task tinygpt`` builds in the test below."""

    n_digits: int = 5
    batch: int = 8
    steps: int = 3
    d_model: int = 16
    n_layers: int = 1
    n_heads: int = 2
    eval_size: int = 16
    warmup: int = 2


@dataclass(frozen=True)
class LoudSmallGPT(SmallGPT):
    attn_stable: bool = False
    qk_scale: float | None = 10.0


@pytest.fixture
def small_gpt_tasks():
    """``tinygpt`` and ``tinygpt-overflow`` in the task registry are the small ones while a test runs."""
    old = {name: TASKS.get(name) for name in ("tinygpt", "tinygpt-overflow")}
    TASKS.register(SmallGPT, "tinygpt", replace=True)
    TASKS.register(LoudSmallGPT, "tinygpt-overflow", replace=True)
    yield
    for name, cls in old.items():
        TASKS.register(cls, name, replace=True)


def test_cli_compare_task_tinygpt(capsys, small_gpt_tasks):
    import json

    args = _compare_parser().parse_args(["compare", "--task", "tinygpt", "--provoke-overflow", "--recipes", "fp32",
                                         "fp16-master", "fp16-amp", "--quiet", "--figure", "none"])
    assert args.func(args) == 0
    out, err = capsys.readouterr()
    assert "tiny GPT: sort 5 digits" in err and "attn_stable=False" in err
    assert "first non-finite" in out and "step 0: exp in blocks.0.attn (forward)" in out
    args = _compare_parser().parse_args(["compare", "--task", "tinygpt", "--recipes", "fp32", "--quiet", "--json",
                                         "--figure", "none"])
    assert args.func(args) == 0
    got = json.loads(capsys.readouterr().out)["fp32"]
    assert 0 <= got["accuracy"] <= 1 and got["first_nonfinite"] is None and got["skipped_share"] == 0
    args = _compare_parser().parse_args(["compare", "--provoke-overflow", "--figure", "none"])
    assert args.func(args) == 2 and "needs --task tinygpt" in capsys.readouterr().err


def test_the_old_ways_to_train_once_warn_and_give_trains_numbers():
    """run_recipe / run_tinygpt / TinyGPTResult: deprecated aliases (removed 2027-06-01) with their
    old defaults (every step measured; the tiny GPT's first and last)."""
    import fpsim.experiments as ex

    with pytest.warns(DeprecationWarning, match="run_tinygpt is deprecated.*2027-06-01"):
        old = ex.run_tinygpt("fp16-dynamic", SMALL, steps=2)
    new = train(SMALL, "fp16-dynamic", 0, steps=2)
    assert old.losses == new.losses and old.act_grad_flushed == new.act_grad_flushed
    with pytest.warns(DeprecationWarning, match="run_recipe is deprecated.*2027-06-01"):
        old = ex.run_recipe("bf16-pure", SMALL, steps=3)
    assert old.losses == train(SMALL, "bf16-pure", steps=3).losses and sorted(old.stalled) == [0, 1, 2]
    with pytest.warns(DeprecationWarning, match="TinyGPTResult is deprecated"):
        assert ex.TinyGPTResult is RunResult
    assert "run_recipe" not in ex.__all__ and "TinyGPTResult" not in ex.__all__
