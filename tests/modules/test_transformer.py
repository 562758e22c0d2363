"""The transformer modules: shapes and parameter names, the whole TinyGPT against the same
network in PyTorch (float32, weights copied), module scopes as monitors see them, formats, and
bad input - one-line errors naming the shapes, nothing half-built."""

import math

import numpy as np
import pytest

import fpsim
from fpsim import nn

pytestmark = pytest.mark.both_backends  # every test here runs on numpy and numpy-f32 (conftest.py)

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _ids(b=3, t=7, vocab=11, seed=0):
    return np.random.default_rng(seed).integers(0, vocab, (b, t))


def test_shapes_and_parameters():
    m = nn.TinyGPT(11, 16, d_model=32, n_layers=2, n_heads=4)
    assert m(_ids()).shape == (3, 7, 11)
    names = [n for n, _ in m.named_parameters()]
    assert names[:2] == ["tok_emb.weight", "pos_emb.weight"]
    assert "blocks.1.attn.q.weight" in names and "blocks.0.mlp.2.bias" in names and names[-1] == "head.weight"
    per_block = 2 * 32 * 2 + 4 * (32 * 32 + 32) + (32 * 128 + 128) + (128 * 32 + 32)
    assert nn.transformer.num_parameters(m) == 11 * 32 + 16 * 32 + 2 * per_block + 2 * 32 + 32 * 11
    tied = nn.TinyGPT(11, 16, d_model=32, tied=True)
    assert "head.weight" not in dict(tied.named_parameters()) and tied(_ids()).shape == (3, 7, 11)


class _TorchBlock(torch.nn.Module):
    def __init__(self, blk):
        super().__init__()
        self.blk = blk

    def forward(self, x, p, prefix):
        def lin(y, name):
            return F.linear(y, p[f"{prefix}.{name}.weight"], p[f"{prefix}.{name}.bias"])

        b, t, d = x.shape
        h = self.blk.attn.n_heads
        y = F.layer_norm(x, (d,), p[f"{prefix}.ln1.weight"], p[f"{prefix}.ln1.bias"])
        q, k, v = (lin(y, f"attn.{n}").view(b, t, h, d // h).transpose(1, 2) for n in "qkv")
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + lin(a.transpose(1, 2).reshape(b, t, d), "attn.proj")
        y = F.layer_norm(x, (d,), p[f"{prefix}.ln2.weight"], p[f"{prefix}.ln2.bias"])
        return x + lin(F.gelu(lin(y, "mlp.0"), approximate="tanh"), "mlp.2")


@pytest.mark.parametrize("tied", [False, True])
def test_tinygpt_matches_pytorch_float32(tied):
    """The same weights in a PyTorch network written with its own ops (fused SDPA and
    layer_norm): logits and every parameter's gradient of the cross-entropy agree to 1e-5."""
    m = nn.TinyGPT(11, 9, d_model=24, n_layers=2, n_heads=3, tied=tied, seed=3)
    ids = _ids(4, 9)
    logits = m(ids)
    loss = nn.cross_entropy(logits.reshape(-1, 11), ids.reshape(-1))
    loss.backward()
    p = {n: torch.tensor(t.numpy(), requires_grad=True) for n, t in m.named_parameters()}
    tids = torch.from_numpy(ids)
    x = p["tok_emb.weight"][tids] + p["pos_emb.weight"][torch.arange(9)]
    for i, blk in enumerate(m.blocks):
        x = _TorchBlock(blk)(x, p, f"blocks.{i}")
    x = F.layer_norm(x, (24,), p["ln_f.weight"], p["ln_f.bias"])
    tlogits = x @ (p["tok_emb.weight"].T if tied else p["head.weight"].T)
    F.cross_entropy(tlogits.reshape(-1, 11), tids.reshape(-1)).backward()
    np.testing.assert_allclose(logits.numpy(), tlogits.detach().numpy(), rtol=1e-5, atol=1e-5)
    for n, t in m.named_parameters():
        g = p[n].grad.numpy()
        np.testing.assert_allclose(t.grad.numpy(), g, rtol=1e-4, atol=1e-5 * max(1.0, np.abs(g).max()), err_msg=n)


def test_monitor_sees_each_module():
    m = nn.TinyGPT(11, 8, d_model=16, n_layers=1, n_heads=2)
    m.to("float16")
    with fpsim.monitor() as mon:
        nn.cross_entropy(m(_ids(2, 8)).reshape(-1, 11).float(), _ids(2, 8).reshape(-1)).backward()
    keys = {(d, s, o) for d, s, o, _, _ in mon.counts}
    for want in [("forward", "blocks.0.attn", "matmul"), ("forward", "blocks.0.attn", "softmax"),
                 ("forward", "blocks.0.ln1", "layer_norm"), ("forward", "blocks.0.mlp.1", "gelu"),
                 ("backward", "blocks.0.attn.q", "linear"), ("backward", "ln_f", "layer_norm")]:
        assert want in keys, want


@pytest.mark.parametrize("fmt", ["float16", "bfloat16"])
def test_low_formats_and_autocast(fmt):
    m = nn.TinyGPT(11, 8, d_model=16, n_layers=1, n_heads=2)
    ref = m(_ids(2, 8)).numpy().astype(np.float64)
    with fpsim.autocast(fmt):
        y = m(_ids(2, 8))
    assert y.fmt.name == fmt  # the head is a Linear: low format under autocast
    m.to(fmt)
    low = m(_ids(2, 8))
    assert low.fmt.name == fmt and low.numpy().dtype.name == fmt
    assert np.abs(low.numpy().astype(np.float64) - ref).max() < (0.05 if fmt == "float16" else 0.3)


def test_overflow_knobs_reach_the_ops():
    """ln_acc="input" with activations near 300: float16 statistics overflow, float32 and
    autocast (layer_norm in float32) do not."""
    m = nn.TinyGPT(11, 8, d_model=16, n_layers=1, n_heads=2, emb_std=300.0, ln_acc="input")
    assert np.isfinite(m(_ids(2, 8)).numpy()).all()
    with fpsim.autocast("float16"):
        assert np.isfinite(m(_ids(2, 8)).numpy().astype(np.float32)).all()
    m.to("float16")
    # a square past 65504 makes E[x^2] inf: inf - inf = NaN, or 1/sqrt(inf) = 0 (the row becomes the bias)
    with fpsim.monitor() as mon:
        y = m(_ids(2, 8)).numpy().astype(np.float32)
    assert mon.totals(op="layer_norm")["overflow"] > 0
    fine = m.to("float32")(_ids(2, 8)).numpy()
    assert np.isnan(y).any() or np.abs(y - fine).max() > 1  # NaN, or rows collapsed onto the bias
    assert m.blocks[0].ln1.acc == "input"
    naive = nn.TinyGPT(11, 8, d_model=16, n_layers=1, n_heads=2, attn_stable=False, qk_scale=1.0)
    assert naive.blocks[0].attn.stable is False and naive.blocks[0].attn.qk_scale == 1.0


def test_bad_input_one_line_errors():
    with pytest.raises(ValueError, match="n_heads 5 does not divide d_model 32"):
        nn.TinyGPT(11, 8, d_model=32, n_heads=5)
    with pytest.raises(ValueError, match="n_heads 3 does not divide d_model 16"):
        nn.CausalSelfAttention(16, 3)
    with pytest.raises(ValueError, match="context must be an integer >= 1"):
        nn.TinyGPT(11, 0)
    m = nn.TinyGPT(11, 8, d_model=16, n_layers=1, n_heads=2)
    before = {n: p.numpy().copy() for n, p in m.named_parameters()}
    cases = [
        (np.array([[1, 2, 11]]), ValueError, r"token ids of shape \(1, 3\) must lie in \[0, 11\), got 1\.\.11"),
        (np.array([[-1, 2]]), ValueError, r"\[0, 11\), got -1\.\.2"),
        (np.array([[1.0, 2.0]]), TypeError, r"token ids must be integers, got dtype float64 \(shape \(1, 2\)\)"),
        (np.zeros((2, 9), dtype=int), ValueError, r"shape \(2, 9\) do not fit .* context 8"),
        (np.zeros(5, dtype=int), ValueError, r"shape \(5,\) do not fit \(batch, time\)"),
    ]
    for ids, exc, msg in cases:
        with pytest.raises(exc, match=msg) as info:
            m(ids)
        assert "\n" not in str(info.value)
    attn = m.blocks[0].attn
    with pytest.raises(ValueError, match=r"input shape \(2, 8, 12\) does not fit \(batch, time, 16\)"):
        attn(fpsim.tensor(np.zeros((2, 8, 12))))
    assert all(np.array_equal(before[n], p.numpy()) for n, p in m.named_parameters())


def test_untouched_defaults_are_the_careful_ones():
    a = nn.TinyGPT(11, 8, d_model=16, n_heads=2).blocks[0].attn
    assert a.stable and a.mask_value is None and a.qk_scale is None
    assert math.isclose(1 / math.sqrt(a.head_dim), 1 / math.sqrt(8))
