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
