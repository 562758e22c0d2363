"""Modules, checkpoints and the package's names under bad input - each defect reproduced here
first, then pinned."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import fpsim
from fpsim import checkpoint, nn

# -- the README's names exist after a plain `import fpsim` ---------------------------------------

@pytest.mark.parametrize("name", ["lowp", "checkpoint"])
def test_fpsim_lowp_and_checkpoint_are_attributes_after_import_fpsim(name):
    code = f"import fpsim; m = fpsim.{name}; print(m.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0 and out.stdout.strip() == f"fpsim.{name}", out.stderr


# -- LayerNorm and TinyGPT check their knobs at construction, naming them ------------------------

@pytest.mark.parametrize("make, match", [
    (lambda: nn.LayerNorm(4, acc="bogus"), r"LayerNorm: acc must be None, 'input' or a format name; unknown format"),
    (lambda: nn.LayerNorm(4, acc="fp4"), r"LayerNorm: acc must be .*float4_e2m1fn is not a tensor format"),
    (lambda: nn.LayerNorm(4, eps=float("nan")), "LayerNorm: eps must be a finite number"),
    (lambda: nn.TinyGPT(10, 8, qk_scale="a"), "TinyGPT: qk_scale must be a finite number, got 'a'"),
    (lambda: nn.TinyGPT(10, 8, qk_scale=float("inf")), "TinyGPT: qk_scale must be a finite number"),
    (lambda: nn.TinyGPT(10, 8, mask_value="x"), "TinyGPT: mask_value must be a number"),
    (lambda: nn.TinyGPT(10, 8, ln_acc="bogus"), "TinyGPT: ln_acc must be None, 'input' or a format name"),
    (lambda: nn.TinyGPT(10, 8, fmt="fp17"), "TinyGPT: fmt: unknown format 'fp17'"),
    (lambda: nn.TinyGPT(10, 8, seed=-1), r"TinyGPT: seed must be an integer >= 0 or None, got -1"),
    (lambda: nn.TinyGPT(10, 8, seed=1.5), r"TinyGPT: seed must be an integer >= 0 or None, got 1.5"),
    (lambda: nn.TinyGPT(10, 8, emb_std=-1.0), "TinyGPT: emb_std must be a finite number >= 0"),
    (lambda: nn.Embedding(3, 2, seed=-2), "Embedding: seed must be an integer >= 0 or None, got -2"),
    (lambda: nn.CausalSelfAttention(8, 2, seed="0"), "CausalSelfAttention: seed must be an integer"),
    (lambda: nn.TransformerBlock(8, 2, ln_acc="nope"), "TransformerBlock: ln_acc must be None"),
])
def test_transformer_knobs_are_checked_at_construction_naming_them(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.parametrize("kwargs, match", [({"tied": "no"}, "TinyGPT: tied must be True or False"),
                                           ({"attn_stable": 0}, "TinyGPT: attn_stable must be True or False")])
def test_tinygpt_flags_must_be_booleans(kwargs, match):
    with pytest.raises(TypeError, match=match):
        nn.TinyGPT(10, 8, **kwargs)


def test_layer_norm_op_checks_acc_before_computing():
    with pytest.raises(ValueError, match="layer_norm: acc must be None, 'input' or a format name"):
        fpsim.ops.layer_norm(fpsim.tensor([1.0, 2.0]), 2, acc="x")


@pytest.mark.parametrize("fmt", ["mxfp8", "nvfp4", "fp8_block", "MXFP4"])
def test_tinygpt_given_a_block_format_says_it_is_one_and_where_it_goes(fmt):
    with pytest.raises(ValueError, match=r"is the block-scaled format .*lowp\.convert\(model"):
        nn.TinyGPT(10, 8, fmt=fmt)


def test_good_knobs_still_build_the_same_model():
    a = nn.TinyGPT(10, 8, d_model=8, n_heads=2, seed=3, qk_scale=0.5, ln_acc="input", mask_value=-65504.0,
                   fmt="float16")
    b = nn.TinyGPT(10, 8, d_model=8, n_heads=2, seed=np.int64(3), qk_scale=np.float32(0.5), ln_acc="float16",
                   mask_value=float("-inf"), fmt="fp16")
    assert all(np.array_equal(a.state_dict()[k].view(np.uint16), v.view(np.uint16)) for k, v in b.state_dict().items())


# -- a checkpoint entry naming a 4- or 6-bit format ----------------------------------------------

@pytest.mark.parametrize("fmt", ["float4_e2m1fn", "float6_e3m2fn", "float6_e2m3fn", "float8_e8m0fnu", "fp4"])
def test_checkpoint_entry_naming_a_block_element_format_is_refused_naming_it(tmp_path, fmt):
    model = nn.Linear(3, 2, fmt="float16")
    path = checkpoint.save(tmp_path / "c.npz", model)
    with np.load(path) as z:
        d = {k: z[k] for k in z.files}
    d["model/weight#fmt"] = np.asarray(fmt)
    np.savez(tmp_path / "edited.npz", **d)
    before = {k: v.copy() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"entry 'model/weight' is unreadable \(float[46]_e\w+ is not a tensor format"
                                         r"|entry 'model/weight' is unreadable \(float8_e8m0fnu is not a tensor format"):
        checkpoint.load(tmp_path / "edited.npz", model)
    assert all(np.array_equal(before[k].view(np.uint16), v.view(np.uint16)) for k, v in model.state_dict().items())


# -- every module's fmt, seed, rng and sizes named as TinyGPT's are (issue 42) --------------------

BLOCK_SAYS = (r"fmt 'mxfp8' is the block-scaled format mxfp8_e4m3: a tensor is stored in a tensor format "
              r"\(float32, float16, bfloat16, float8_e4m3fn, float8_e5m2\); quantize an array into it with "
              r"fpsim\.quantize\(x, 'mxfp8_e4m3'\), or train a model's Linear layers block-scaled with "
              r"fpsim\.lowp\.convert\(model, fpsim\.lowp\.BlockScaling\('mxfp8_e4m3'\)\)$")

MODULES = {
    "Linear": lambda **kw: nn.Linear(4, 3, **kw),
    "Embedding": lambda **kw: nn.Embedding(4, 3, **kw),
    "LayerNorm": lambda **kw: nn.LayerNorm(4, **kw),
    "UnitLinear": lambda **kw: nn.UnitLinear(4, 3, **kw),
}
SEEDED = {
    "Linear": lambda **kw: nn.Linear(4, 3, **kw),
    "MLP": lambda **kw: nn.MLP([4, 3], **kw),
    "UnitLinear": lambda **kw: nn.UnitLinear(4, 3, **kw),
    "UnitMLP": lambda **kw: nn.UnitMLP([4, 3], **kw),
}


@pytest.mark.parametrize("owner", list(MODULES))
def test_a_block_format_as_a_modules_fmt_says_what_it_is_and_where_it_goes(owner):
    with pytest.raises(ValueError, match=rf"^{owner}: {BLOCK_SAYS}"):  # was "unknown format 'mxfp8'"
        MODULES[owner](fmt="mxfp8")


def test_module_to_a_block_format_says_what_it_is_and_another_name_is_named():
    with pytest.raises(ValueError, match=rf"^Linear\.to: {BLOCK_SAYS}"):
        nn.Linear(2, 2, seed=0).to("mxfp8")
    with pytest.raises(ValueError, match=r"^Linear: fmt: unknown format 'fp17'; known: float32, float16"):
        nn.Linear(2, 2, fmt="fp17")


@pytest.mark.parametrize("owner", list(SEEDED))
@pytest.mark.parametrize("seed", ["a", -1, 1.5])
def test_a_modules_seed_is_named(owner, seed):  # "a" was numpy's "SeedSequence expects int or sequence of ints"
    with pytest.raises(ValueError, match=rf"^{owner}: seed must be an integer >= 0 or None, got {seed!r}$"):
        SEEDED[owner](seed=seed)


@pytest.mark.parametrize("owner", ["Linear", "UnitLinear"])
def test_a_modules_rng_must_be_a_generator(owner):
    with pytest.raises(TypeError, match=rf"^{owner}: rng must be a numpy Generator .* got int \(an integer seed goes"):
        SEEDED[owner](rng=3)


@pytest.mark.parametrize("args, says", [(("4", 3), "in_features must be an integer >= 1, got '4'"),
                                        ((4, 2.5), "out_features must be an integer >= 1, got 2.5"),
                                        ((4, 0), "out_features must be an integer >= 1, got 0")])
def test_linear_sizes_are_named(args, says):  # '4' was "'<' not supported between instances of 'str' and 'int'"
    with pytest.raises(ValueError, match=rf"^Linear: {says}$"):
        nn.Linear(*args)


def test_checked_modules_draw_the_same_weights():
    """The checks change no number: Linear's W and b are U(-1/sqrt(in), 1/sqrt(in)) from
    default_rng(seed) in float64, W first, rounded once to float32 - as PyTorch's init draws them."""
    rng = np.random.default_rng(7)
    w = rng.uniform(-0.5, 0.5, (3, 4)).astype(np.float32)
    b = rng.uniform(-0.5, 0.5, 3).astype(np.float32)
    lin = nn.Linear(np.int64(4), 3, seed=np.int64(7))
    assert np.array_equal(lin.weight.numpy(), w) and np.array_equal(lin.bias.numpy(), b)


def test_sequential_refuses_what_is_no_module_naming_its_place():
    with pytest.raises(TypeError, match=r"^Sequential: layer 1 must be an fpsim Module \(fpsim\.nn\.Module\), got int$"):
        nn.Sequential(nn.Tanh(), 3)  # was Sequential(0=Tanh()): the 3 dropped, and the model one layer short
    with pytest.raises(TypeError, match=r"^Sequential: layer 0 must be an fpsim Module .* got function$"):
        nn.Sequential(lambda x: x)
    x = fpsim.tensor([[0.5, -2.0]])
    assert nn.Sequential(nn.Tanh(), nn.ReLU())(x).f32().tolist() == [[np.float32(np.tanh(0.5)), 0.0]]


def test_mlp_activation_that_is_neither_name_nor_module_is_named():
    with pytest.raises(TypeError, match=r"^MLP: activation must be a name \(relu, tanh, sigmoid, gelu, identity\) or "
                                        r"a Module class, got 3$"):
        nn.MLP([2, 3, 2], activation=3)  # was "'int' object is not callable"
