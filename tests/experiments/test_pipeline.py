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
from support.fingerprints import GPT_FIELDS, REF_FIELDS, assert_pinned, numbers, table

from fpsim import nn, ops
from fpsim.experiments import (
    OVERFLOW,
    RECIPES,
    Recipe,
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


# One pinned fingerprint per recipe: (every number of its run, its row of the table beside fp32's).
# A recipe registered without one fails its own case only, saying which value to pin.
REFERENCE_PINS = {
    "fp32": ("7b920ca296756ddb", "3250cb97fedbe5e7"),
    "fp16-pure": ("0ac8475e35ac552d", "65a7529f54796e80"),
    "fp16-master": ("0934a3d1b2e79275", "c543a48053d67e42"),
    "fp16-static": ("9c3c820fb83fac95", "42bcdd41094e4de7"),
    "fp16-dynamic": ("5555864b77734a9f", "5b140a48fcfc3ad1"),
    "fp16-amp": ("e75c9bfabe126a84", "a2c0cd8675a62b2e"),
    "bf16-pure": ("a2d4d55268a3aa77", "f3c589778d9ad9fb"),
    "bf16-master": ("d0fd67965947e07c", "b58e8924efe03294"),
    "fp8-delayed": ("68057557c2c701ba", "dca7b64d190a56d8"),
    "fp8-delayed-inner": ("cf78c2ba6d1acfe3", "bbcc675ae8558d4d"),
    "fp8-current": ("94ee272c1c273559", "10f38c9e1f0f004e"),
    "bf16-kahan": ("e7718f134c6b9a2e", "8a4cd18fd24a41ce"),
    "bf16-stochastic": ("527bdd45dd700870", "eebfc4e535775dea"),
    "mxfp8": ("757cb62f36de7636", "574d6ae0d3940e5d"),
    "mxfp6": ("d660f74da57f6ddd", "82c571ae83c01d8c"),
    "mxfp4": ("d7a8a27862216be3", "9f579204280d9ab1"),
    "mxfp4-sr-rht": ("2539056a3b9a9122", "ab868da228c3c351"),
    "nvfp4": ("0c310fc3a5fab4f4", "da1b10f617b9afa5"),
    "fp8-blockwise": ("7c3a8ef34e3fa4fb", "f7fbd5df553c7332"),
    "fp8-hopper": ("ea123606536d9a60", "928f05d255217bc5"),
    "fp8-deepseek": ("76f6220efb61f651", "3d7d8329a404d9a7"),
}
TINYGPT_PINS = {
    "fp32": ("7d0e2b4818edabe3", "20c6a19599b782da"),
    "fp16-pure": ("5de92b7f044d57a1", "900a9dac9b05dccd"),
    "fp16-master": ("0c0bf1b61c792c71", "2511a0f4d5833d40"),
    "fp16-static": ("47508878efb1f19e", "1345c898d519572a"),
    "fp16-dynamic": ("afad02f73abcd19a", "912790a4e65a135f"),
    "fp16-amp": ("bd6a738d147e8e25", "b218df11f43ed1a9"),
    "bf16-pure": ("01fec11665a069d4", "176b1761d58e27da"),
    "bf16-master": ("80482f076bc6ec33", "3e1b53a9dcba502c"),
    "fp8-delayed": ("aaadcb6abe5e7d99", "19a3014f69b93c8c"),
    "fp8-delayed-inner": ("bedd12cb3bccc6e0", "055b5f0ec7eed32c"),
    "fp8-current": ("349bc8f0b84854db", "a95e44cb6b393825"),
    "fp8-hopper": ("cdaca869a66d6dc9", "8f0fb5913bedd9e5"),
    "bf16-kahan": ("adf2ce3d3e4ade63", "f94a4d219a8b5509"),
    "bf16-stochastic": ("8f4d28d7f9a7909a", "d9a8fd27b84a82d4"),
    "mxfp8": ("7129c1404a99e24f", "2325dac204bf63dc"),
    "mxfp6": ("8bbd67cdc48ed550", "a0b8217b8b2b4c1f"),
    "mxfp4": ("d765909f72527624", "3072dec5958eb2ff"),
    "mxfp4-sr-rht": ("008492d5429bea0e", "962843471b7eaaaf"),
    "nvfp4": ("23d3252b9b5f9380", "f187bcb56d78df9a"),
    "fp8-blockwise": ("4d3f7f7c3a0d46ea", "0401e699a562764a"),
    "fp8-deepseek": ("3ba80342ed52c8d2", "905bd79b1f75216d"),
}
OVERFLOW_PINS = {
    "fp32": "9638a352774dd3af",
    "fp16-pure": "0fdef10a650a8c61",
    "fp16-master": "35da4affaed64ba5",
    "fp16-dynamic": "3fea60ccd888834d",
    "fp16-amp": "91e1525ce36b4d38",
    "bf16-master": "196d34b7efc6751e",
    "fp8-delayed": "7071e705664c644b",
}
SMALL_REFERENCE = ReferenceTask(n=256)
OVERFLOW_SMALL = replace(OVERFLOW, n_digits=8, d_model=32, batch=16, eval_size=32)


def one_run(task, name, steps=None):
    """The recipe's run in a sweep of its own (every step measured, as ``fpsim compare`` measures)."""
    return compare([name], task, steps=steps, progress=False, measure_at="all")[name]


@pytest.fixture(scope="module")
def fp32_runs():
    return {"reference": one_run(SMALL_REFERENCE, "fp32", 5), "tinygpt": one_run(SMALL_GPT, "fp32")}


def fingerprints(r, base, fields):
    """(every number of the run, its table beside the baseline's: one row, or two)."""
    rows = {r.recipe: r} if r.recipe == base.recipe else {base.recipe: base, r.recipe: r}
    return numbers({r.recipe: r}, fields), table(format_table(rows))


@pytest.mark.parametrize("name", list(RECIPES))
def test_each_recipe_on_the_reference_task_gives_fpsims_machine_independent_numbers(name, fp32_runs):
    """Five steps of the recipe on a small reference task: every number of the run and its row of
    the table, bit for bit."""
    got = fingerprints(one_run(SMALL_REFERENCE, name, 5), fp32_runs["reference"], REF_FIELDS)
    assert_pinned(REFERENCE_PINS, name, got)


@pytest.mark.parametrize("name", list(RECIPES))
def test_each_recipe_on_the_tiny_gpt_gives_fpsims_machine_independent_numbers(name, fp32_runs):
    """A small tiny GPT under the recipe: losses, scales, skips, flushed gradients, accuracy,
    evaluation loss and the first non-finite op, and its row of the table, bit for bit."""
    r = one_run(SMALL_GPT, name)
    assert_pinned(TINYGPT_PINS, name, fingerprints(r, fp32_runs["tinygpt"], GPT_FIELDS))
    assert r.scaler == RECIPES[name].scaler and r.stalled  # a GPT run names its scaler and counts stalls too


@pytest.mark.slow
@pytest.mark.parametrize("name", list(OVERFLOW_PINS))
def test_the_tiny_gpt_overflow_setting_gives_fpsims_machine_independent_numbers(name):
    """The naive-softmax GPT (``OVERFLOW``, smaller) for 40 steps: float16 dies in the forward pass,
    the rest live; every number and the first non-finite op, bit for bit."""
    r = one_run(OVERFLOW_SMALL, name, 40)
    assert_pinned(OVERFLOW_PINS, name, numbers({name: r}, GPT_FIELDS))
    if name == "fp16-pure":
        assert r.died_at == 0 and r.failure.startswith("step 0: parameters")


def test_a_recipe_without_a_pinned_fingerprint_fails_alone_and_says_what_to_pin():
    with pytest.raises(pytest.fail.Exception, match=r"recipe 'new-one' has no pinned fingerprint; "
                                                    r"pin its fingerprint: \('abc', 'def'\)"):
        assert_pinned(REFERENCE_PINS, "new-one", ("abc", "def"))
    with pytest.raises(AssertionError, match="fp32: the numbers moved"):
        assert_pinned(REFERENCE_PINS, "fp32", ("abc", "def"))


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


def test_a_recipe_has_one_layer_conversion_field_and_prepare_converts_once():
    """``layers`` (lowp.convert's config) and ``layers_skip``: per-tensor fp8 keeps its ScalingGroup
    on the run, block scaling none; the converted recipes of the package use them."""
    from fpsim import lowp

    assert isinstance(get_recipe("fp8-current").layers, lowp.CurrentScaling)
    assert isinstance(get_recipe("nvfp4").layers, lowp.BlockScaling) and get_recipe("nvfp4").layers_skip == ("first",
                                                                                                              "last")
    assert get_recipe("fp32").layers is None and get_recipe("fp32").layers_skip == ()
    mine = Recipe("mine", "float32", layers=lowp.DelayedScaling(), layers_skip=("last",))
    run = mine.prepare(nn.MLP([4, 3, 3, 2], seed=0), lr=0.1)
    assert [type(run.model._modules[k]) for k in ("0", "2", "4")] == [lowp.Fp8Linear, lowp.Fp8Linear, nn.Linear]
    assert isinstance(run.scaling, lowp.ScalingGroup)
    run = replace(mine, layers=lowp.BlockScaling("mxfp8_e4m3")).prepare(nn.MLP([4, 3, 3, 2], seed=0), lr=0.1)
    assert [type(run.model._modules[k]) for k in ("0", "2", "4")] == [lowp.BlockLinear, lowp.BlockLinear, nn.Linear]
    assert run.scaling is None


def test_the_old_layer_fields_are_deprecated_names_of_layers():
    """``fp8=`` / ``fp8_skip=`` / ``block=`` / ``block_skip=`` (removed 2027-06-01) build the same
    recipe as ``layers=`` / ``layers_skip=`` and read back from it, each with a DeprecationWarning;
    dataclasses.replace and a subclass keep working; two conversions in one recipe are refused."""
    import warnings

    from fpsim import lowp

    delayed, block = lowp.DelayedScaling(amax_history_len=16), lowp.BlockScaling("mxfp8_e4m3")
    with pytest.warns(DeprecationWarning, match=r"Recipe\(fp8=, fp8_skip=\) is deprecated.*layers="):
        old = Recipe("old", "float32", fp8=delayed, fp8_skip=("first",))
    assert old == Recipe("old", "float32", layers=delayed, layers_skip=("first",))
    with pytest.warns(DeprecationWarning, match="block="):
        old_block = Recipe("old", "float32", block=block, block_skip=["last"])
    assert (old_block.layers, old_block.layers_skip) == (block, ("last",))
    with pytest.warns(DeprecationWarning, match=r"Recipe.fp8 is deprecated.*Recipe.layers"):
        assert old.fp8 is delayed
    with pytest.warns(DeprecationWarning, match=r"Recipe.block_skip is deprecated.*Recipe.layers_skip"):
        assert old_block.block_skip == ("last",)
    with pytest.warns(DeprecationWarning):
        assert (old.block, old.block_skip, old_block.fp8, old_block.fp8_skip, old.fp8_skip) == (None, (), None, (),
                                                                                                ("first",))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # neither copying a recipe nor subclassing one reads the old names
        assert replace(old, name="copy").layers is delayed and replace(old, layers=None).layers is None

        @dataclass(frozen=True)
        class MyRecipe(Recipe):
            pass

        assert MyRecipe("sub", "float32", layers=block).layers is block
    with pytest.warns(DeprecationWarning):
        assert MyRecipe("sub", "float32", block=block).layers is block
    with pytest.raises(ValueError, match="'two': one layer conversion, layers="), pytest.warns(DeprecationWarning):
        Recipe("two", "float32", fp8=delayed, block=block)
    with pytest.raises(ValueError, match="one layer conversion"), pytest.warns(DeprecationWarning):
        Recipe("two", "float32", layers=delayed, block=block)


def test_a_recipe_without_a_scaler_has_a_no_op_one_that_touches_nothing():
    """The scaler is always an object: without one, a disabled GradScaler whose ``scale`` hands the
    float16 loss back itself (not multiplied by 1.0: no op, no rounding in the loss-scale scope),
    whose step always steps and whose scale is 1.0 - the steps of fp16-pure are what they were."""
    from fpsim.amp import LOSS_SCALE_SCOPE, GradScaler
    from fpsim.experiments.run import make_scaler

    run = get_recipe("fp16-pure").prepare(nn.MLP([4, 3, 2], seed=0), lr=0.1)
    assert isinstance(run.scaler, GradScaler) and not run.scaler.is_enabled()
    assert isinstance(make_scaler(get_recipe("bf16-master")), GradScaler)
    assert Run(None, None, None).scaler.get_scale() == 1.0  # a Run built without one gets one too
    x = tensor(np.full((2, 4), 0.5, np.float32), "float16")
    zeros = tensor(np.zeros((2, 2), np.float32))
    loss16 = run.model(x).sum()
    assert loss16.fmt.name == "float16" and run.scaler.scale(loss16) is loss16
    events = []
    s = run.step(lambda m: ops.mse_loss(m(x), zeros.to("float16")), hook=events.append)
    assert s.scale == 1.0 and s.skipped is False and run.scaler.get_scale() == 1.0
    assert events and not [e for e in events if LOSS_SCALE_SCOPE in e.scope or e.op == "unscale"]
    # the same step by hand, with no scaler at all: the same float16 weights, bit for bit
    ref = get_recipe("fp16-pure").prepare(nn.MLP([4, 3, 2], seed=0), lr=0.1)
    ref.opt.zero_grad()
    ops.mse_loss(ref.model(x), zeros.to("float16")).backward()
    ref.opt.step()
    assert [p.data.tobytes() for p in run.model.parameters()] == [p.data.tobytes() for p in ref.model.parameters()]


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


def test_importing_the_experiments_builds_no_layer_config_and_no_model():
    """``import fpsim.experiments`` registers tasks and recipes by name and builds nothing: no
    BlockScaling / DelayedScaling / CurrentScaling (the converted recipes are built when first
    asked for) and no module (a task checks its model's knobs without making the model).  Counted
    in a fresh interpreter, every constructor wrapped before the experiments are imported."""
    import subprocess
    import sys

    code = """
import fpsim.lowp as lowp, fpsim.nn as nn
made = []
for cls in (lowp.BlockScaling, lowp.DelayedScaling, lowp.CurrentScaling, nn.Module):
    def wrap(init, name=cls.__name__):
        def counted(self, *a, **k):
            made.append(name)
            init(self, *a, **k)
        return counted
    cls.__init__ = wrap(cls.__init__)
import fpsim.experiments as ex
print(len(ex.RECIPES), len(ex.TASKS), made)
ex.get_recipe("nvfp4"), ex.TinyGPTTask().model(0)
print(sorted(set(made)))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    n_recipes, n_tasks, made = out[0].split(" ", 2)
    assert int(n_recipes) >= 21 and int(n_tasks) >= 3 and made == "[]", out[0]
    assert out[1] == "['BlockScaling', 'Module']"  # the counting sees them once they are asked for
