"""The experiment pipeline: task -> Recipe.prepare -> Run.step -> train -> RunResult.

The fingerprints below pin fpsim's numbers through the whole pipeline - every float of every
run, to the last bit, and the table ``fpsim compare`` prints (its timing column aside) - for
every recipe on the reference task and on the tiny GPT.  Those numbers are defined by fpsim
itself (exact sums rounded once, correctly rounded exp / log / tanh, its own normal draws:
docs/guarantees.md), not by the CPU's BLAS kernel or numpy's SIMD loops, so they are the same on
every machine and the fingerprints hold anywhere: a change that moves any number, on purpose or
not, fails here until the fingerprints (and the numbers the documentation quotes) are
regenerated.  Whether the numbers are right is checked against references in the tests of each
recipe's parts (test_amp, test_fp8, test_block_training, ...).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pytest
from support.fingerprints import GPT_FIELDS, REF_FIELDS, numbers, table

from fpsim import nn, ops
from fpsim.experiments import (
    OVERFLOW,
    RECIPES,
    TINYGPT_RECIPES,
    ReferenceTask,
    Run,
    RunResult,
    Task,
    TinyGPTTask,
    compare,
    format_table,
    get_recipe,
    train,
)
from fpsim.tensor import tensor

SMALL_GPT = TinyGPTTask(n_digits=5, batch=8, steps=3, d_model=16, n_layers=1, n_heads=2, eval_size=16, warmup=2)


def test_every_recipe_on_the_reference_task_gives_fpsims_machine_independent_numbers():
    """Five steps of every recipe on a small reference task, every number of every run and the
    table, bit for bit (the two tensor-core recipes, many times slower to emulate, are left out
    here; ``fpsim bits`` fingerprints an fp8-hopper run, tests/tools/test_samebits.py)."""
    recipes = [name for name in RECIPES if name not in ("fp8-hopper", "fp8-deepseek")]
    r = compare(recipes, ReferenceTask(n=256), steps=5, progress=False)
    assert numbers(r, REF_FIELDS) == "3a96da8f15866257"
    assert table(format_table(r)) == "23fcc25f2761c594"


def test_the_tiny_gpt_gives_fpsims_machine_independent_numbers():
    """A small tiny GPT under every tiny-GPT recipe (and two more): losses, scales, skips, flushed
    gradients, accuracy, evaluation loss and the first non-finite op, bit for bit; a GPT run also
    names its scaler and counts stalled updates, as a reference-task run does."""
    r = compare(list(TINYGPT_RECIPES) + ["mxfp4-sr-rht", "bf16-stochastic"], SMALL_GPT, progress=False)
    assert numbers(r, GPT_FIELDS) == "739b1dfa193a6435"
    assert r["fp16-dynamic"].scaler == "dynamic" and r["fp32"].stalled


@pytest.mark.slow
def test_the_tiny_gpt_overflow_setting_gives_fpsims_machine_independent_numbers():
    """The naive-softmax GPT (``OVERFLOW``, smaller) for 40 steps: float16 dies in the forward pass,
    the rest live; every number and the first non-finite op, bit for bit."""
    task = replace(OVERFLOW, n_digits=8, d_model=32, batch=16, eval_size=32)
    r = compare(["fp32", "fp16-pure", "fp16-master", "fp16-dynamic", "fp16-amp", "bf16-master", "fp8-delayed"],
                task, steps=40, progress=False)
    assert numbers(r, GPT_FIELDS) == "f1d72ea868757a9f"
    assert r["fp16-pure"].died_at == 0 and r["fp16-pure"].failure.startswith("step 0: parameters")


@dataclass(frozen=True)
class LineFit(Task):
    """A task written for this test, in one place: fit y = 3x with one Linear, SGD."""

    steps: int = 4
    lr: float = 0.5
    optimizer = "sgd"

    def model(self, seed=0):
        return nn.Sequential(nn.Linear(1, 1, seed=seed))

    def batches(self, recipe, backend):
        x = np.linspace(-1, 1, 8, dtype=np.float32)[:, None]
        batch = (tensor(x, recipe.params, backend=backend), tensor(3 * x, "float32", backend=backend))
        return lambda step: batch

    def loss(self, model, batch, recipe):
        x, y = batch
        with recipe.forward_context():
            pred = model(x)
        return ops.mse_loss(pred.to("float32"), y)


def test_a_new_task_is_one_class_and_trains_under_every_kind_of_recipe():
    """SGD by hand in float64 is the reference for fp32: w -= lr * mean(2 (w x + b - 3x) x)."""
    task = LineFit()
    out = train(task, "fp32", seed=0)
    m = task.model(0)
    w, b = (float(p.f32().ravel()[0]) for p in m.parameters())
    x = np.linspace(-1, 1, 8, dtype=np.float32).astype(np.float64)
    losses = []
    for _ in range(task.steps):
        e = w * x + b - 3 * x
        losses.append(np.mean(e**2))
        w, b = w - task.lr * np.mean(2 * e * x), b - task.lr * np.mean(2 * e)
    np.testing.assert_allclose(out.losses, losses, rtol=1e-5)
    assert isinstance(out, RunResult) and out.died_at is None and sorted(out.stalled) == [0, 1, 2, 3]
    for name in ("fp16-dynamic", "bf16-stochastic", "fp8-delayed", "fp16-amp"):
        r = train(task, name, seed=0)
        assert len(r.losses) == task.steps and math.isfinite(r.final_loss), name


def test_prepare_builds_the_run_the_recipe_names():
    from fpsim import lowp
    from fpsim.amp import GradScaler, StaticScaler
    from fpsim.optim import SGD, Adam

    run = get_recipe("fp16-dynamic").prepare(nn.MLP([4, 3, 2], seed=0), lr=0.1, init_scale=1024.0)
    assert isinstance(run, Run) and isinstance(run.opt, Adam) and run.opt.master is not None
    assert isinstance(run.scaler, GradScaler) and run.scaler.get_scale() == 1024.0
    assert all(p.fmt.name == "float16" for p in run.model.parameters())
    run = get_recipe("fp16-static").prepare(nn.MLP([4, 3, 2], seed=0), lr=0.1, optimizer="sgd")
    assert isinstance(run.opt, SGD) and isinstance(run.scaler, StaticScaler)
    run = get_recipe("fp8-delayed").prepare(nn.MLP([4, 3, 2], seed=0), lr=0.1)
    assert run.scaling is not None and any(isinstance(m, lowp.Fp8Linear) for _, m in run.model.named_modules())
    run = get_recipe("mxfp8").prepare(nn.MLP([4, 3, 2], seed=0), lr=0.1)
    assert any(isinstance(m, lowp.BlockLinear) for _, m in run.model.named_modules())
    with pytest.raises(ValueError, match="optimizer"):
        get_recipe("fp32").prepare(nn.MLP([4, 3, 2], seed=0), lr=0.1, optimizer="lion")


def test_run_step_is_one_step_and_counts_the_unchanged_entries():
    run = get_recipe("bf16-pure").prepare(nn.MLP([4, 3, 2], seed=0), lr=1e-9)
    x = tensor(np.ones((2, 4), np.float32), "bfloat16")
    s = run.step(lambda m: ops.mse_loss(m(x).to("float32"), tensor(np.zeros((2, 2), np.float32))),
                 count_unchanged=True)
    same, total = s.unchanged
    assert total == 4 * 3 + 3 + 3 * 2 + 2 and int(same) == total  # lr 1e-9: below half a bfloat16 ulp
    assert s.scale == 1.0 and s.skipped is False and math.isfinite(s.loss.item())


def test_one_low_precision_package_one_convert_and_the_old_names_warn():
    import importlib
    import sys

    from fpsim import lowp

    m = nn.MLP([4, 3, 3, 2], seed=0)
    group = lowp.convert(m, lowp.DelayedScaling(), skip=("first",))
    assert isinstance(group, lowp.ScalingGroup)
    assert lowp.convert(m, lowp.BlockScaling("mxfp8_e4m3")) == ["0"]  # the one the fp8 conversion skipped
    assert [type(m._modules[k]) for k in ("0", "2", "4")] == [lowp.BlockLinear, lowp.Fp8Linear, lowp.Fp8Linear]
    with pytest.raises(TypeError, match="config must be"):
        lowp.convert(nn.MLP([4, 3, 2], seed=0), "fp8")
    with pytest.warns(DeprecationWarning, match="fpsim.lowp.quantize_fp8"):
        assert lowp.quantize is lowp.quantize_fp8
    with pytest.warns(DeprecationWarning, match="fpsim.lowp.convert"):
        assert lowp.convert_blocks is lowp.convert
    with pytest.warns(DeprecationWarning, match="fpsim.lowp.Fp8Linear"):
        assert lowp.Linear is lowp.Fp8Linear
    sys.modules.pop("fpsim.fp8", None)
    with pytest.warns(DeprecationWarning, match="import fpsim.lowp"):
        old = importlib.import_module("fpsim.fp8")
    assert old.DelayedScaling is lowp.DelayedScaling and old.convert is lowp.convert
    with pytest.warns(DeprecationWarning):
        assert old.quantize is lowp.quantize_fp8
