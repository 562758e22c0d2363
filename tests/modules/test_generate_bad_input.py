"""``TinyGPT.generate`` and ``layer_norm`` on bad input: NaN logits are refused at the step they
appear (not sampled as token 0), a generator that is not one and a seed that is no integer are
refused in one line, a rollout longer than the model's positions is refused before anything is
generated (naming the limit), and layer_norm names ``eps`` and tells a block format where it goes."""

import numpy as np
import pytest

import fpsim
from fpsim import nn, ops


def _gpt():
    return nn.TinyGPT(11, 8, d_model=16, n_layers=1, n_heads=2, seed=0)


PROMPT = np.array([[1, 2], [3, 4]])


def test_nan_logits_are_refused_at_their_step():
    p = _gpt()
    w = p.head.weight.numpy().copy()
    w[:, 0] = np.nan  # every logit NaN from the first step on
    p.head.weight.data[...] = w
    with pytest.raises(ValueError, match=r"^TinyGPT.generate: step 0 \(position 2\): the logits of rows \[0, 1\] "
                                         r"are not finite"):
        p.generate(PROMPT, 3, seed=0)


def test_a_finite_rollout_still_samples():
    ids, lp = _gpt().generate(PROMPT, 3, seed=0)
    assert ids.shape == (2, 5) and lp.shape == (2, 3) and np.all(lp <= 0) and np.all(np.isfinite(lp))
    assert np.array_equal(ids[:, :2], PROMPT) and np.all((0 <= ids) & (ids < 11))


@pytest.mark.parametrize("rng", [3, "a", np.random.RandomState(0)])
def test_rng_must_be_a_generator(rng):
    with pytest.raises(TypeError, match=r"^TinyGPT.generate: rng must be a numpy Generator .*seed="):
        _gpt().generate(PROMPT, 1, rng=rng)


@pytest.mark.parametrize("seed", ["a", -1, 1.5])
def test_seed_must_be_an_integer(seed):
    with pytest.raises(ValueError, match=r"^TinyGPT.generate: seed must be an integer >= 0 or None"):
        _gpt().generate(PROMPT, 1, seed=seed)


def test_too_many_tokens_are_refused_before_generating():
    p = _gpt()
    calls = []
    decode = p.decode
    object.__setattr__(p, "decode", lambda *a, **k: calls.append(1) or decode(*a, **k))
    for n in (9, 10**9):
        with pytest.raises(ValueError, match=r"^TinyGPT.generate: a prompt of 2 positions and new_tokens "
                                             rf"{n} need {n + 1} positions; the model has 8 \(context\): at most 7 "
                                             r"new tokens after this prompt$"):
            p.generate(PROMPT, n, seed=0)
    assert calls == []
    ids, _ = p.generate(PROMPT, 7, seed=0)  # the most there is room for
    assert ids.shape == (2, 9)


def test_layer_norm_names_eps():
    x = fpsim.tensor(np.ones((2, 4), np.float32))
    for eps in ("a", -1.0, float("nan"), None):
        with pytest.raises(ValueError, match=r"^layer_norm: eps must be a finite number >= 0, got "):
            ops.layer_norm(x, 4, eps=eps)


def test_a_block_format_as_an_accumulator_says_where_block_formats_go():
    x = fpsim.tensor(np.ones((2, 4), np.float32))
    want = r"acc 'mxfp8' is the block-scaled format mxfp8_e4m3.*fpsim\.lowp\.convert\(model, fpsim\.lowp\.BlockScaling"
    with pytest.raises(ValueError, match="^layer_norm: " + want):
        ops.layer_norm(x, 4, acc="mxfp8")
    with pytest.raises(ValueError, match="^LayerNorm: " + want):
        nn.LayerNorm(4, acc="mxfp8")
    with pytest.raises(ValueError, match=r"^TinyGPT: ln_acc 'mxfp8' is the block-scaled format mxfp8_e4m3"):
        nn.TinyGPT(11, 8, d_model=16, n_layers=1, n_heads=2, ln_acc="mxfp8")
    with pytest.raises(ValueError, match=r"^TinyGPT: fmt 'mxfp8' is the block-scaled format mxfp8_e4m3.*lowp\.convert"):
        nn.TinyGPT(11, 8, d_model=16, n_layers=1, n_heads=2, fmt="mxfp8")
    with pytest.raises(ValueError, match=r"^layer_norm: acc must be None, 'input' or a format name; unknown format"):
        ops.layer_norm(x, 4, acc="fp17")  # not a format at all: the format table's own message
