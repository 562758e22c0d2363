"""qk-layernorm attention, the z-loss and the largest-attention-logit probe: forward and
backward against the same network written in PyTorch (float32, weights copied), the probe
against a float64 numpy recomputation, and bad input."""

import math

import numpy as np
import pytest

from fpsim import nn, ops
from fpsim.experiments.tinygpt import TinyGPTTask, z_loss
from fpsim.tensor import tensor

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _ids(b=4, t=9, vocab=11, seed=0):
    return np.random.default_rng(seed).integers(0, vocab, (b, t))


def _torch_tinygpt(m, p, ids):
    """The TinyGPT with qk_norm written with torch's own ops (fused SDPA, layer_norm)."""
    tids = torch.from_numpy(ids)
    b, t = ids.shape
    d = m.d_model
    x = p["tok_emb.weight"][tids] + p["pos_emb.weight"][torch.arange(t)]
    for i, blk in enumerate(m.blocks):
        pre, h, hd = f"blocks.{i}", blk.attn.n_heads, blk.attn.head_dim

        def lin(y, name, pre=pre):
            return F.linear(y, p[f"{pre}.{name}.weight"], p[f"{pre}.{name}.bias"])

        y = F.layer_norm(x, (d,), p[f"{pre}.ln1.weight"], p[f"{pre}.ln1.bias"])
        q, k, v = (lin(y, f"attn.{n}").view(b, t, h, hd).transpose(1, 2) for n in "qkv")
        q = F.layer_norm(q, (hd,), p[f"{pre}.attn.q_norm.weight"], p[f"{pre}.attn.q_norm.bias"])
        k = F.layer_norm(k, (hd,), p[f"{pre}.attn.k_norm.weight"], p[f"{pre}.attn.k_norm.bias"])
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + lin(a.transpose(1, 2).reshape(b, t, d), "attn.proj")
        y = F.layer_norm(x, (d,), p[f"{pre}.ln2.weight"], p[f"{pre}.ln2.bias"])
        x = x + lin(F.gelu(lin(y, "mlp.0"), approximate="tanh"), "mlp.2")
    x = F.layer_norm(x, (d,), p["ln_f.weight"], p["ln_f.bias"])
    return x @ p["head.weight"].T


def test_qk_norm_tinygpt_with_z_loss_matches_pytorch_float32():
    """Logits, the cross-entropy + 1e-2 * z-loss, and every parameter's gradient (the q_norm and
    k_norm weights and biases among them, moved off 1 and 0 so they matter) agree with PyTorch."""
    m = nn.TinyGPT(11, 9, d_model=24, n_layers=2, n_heads=3, seed=5, qk_norm=True)
    rng = np.random.default_rng(1)
    for name, t in m.named_parameters():
        if "_norm" in name:  # LayerNorm starts at weight 1, bias 0: move them so their gradients are tested
            t.data = (t.numpy() + rng.normal(0, 0.3, t.shape)).astype(np.float32)
    ids = _ids()
    logits = m(ids)
    flat = logits.reshape(-1, 11)
    loss = ops.add(nn.cross_entropy(flat, ids.reshape(-1)), ops.mul(z_loss(flat), 1e-2))
    loss.backward()
    p = {n: torch.tensor(t.numpy(), requires_grad=True) for n, t in m.named_parameters()}
    tl = _torch_tinygpt(m, p, ids).reshape(-1, 11)
    tloss = F.cross_entropy(tl, torch.from_numpy(ids.reshape(-1))) + 1e-2 * torch.logsumexp(tl, -1).pow(2).mean()
    tloss.backward()
    np.testing.assert_allclose(logits.numpy().reshape(-1, 11), tl.detach().numpy(), rtol=1e-5, atol=1e-5)
    assert loss.item() == pytest.approx(tloss.item(), rel=1e-6)
    assert {n for n in p if "_norm" in n} == {f"blocks.{i}.attn.{a}_norm.{w}" for i in (0, 1) for a in "qk"
                                              for w in ("weight", "bias")}
    for n, t in m.named_parameters():
        g = p[n].grad.numpy()
        np.testing.assert_allclose(t.grad.numpy(), g, rtol=1e-4, atol=1e-5 * max(1.0, np.abs(g).max()), err_msg=n)


def test_z_loss_and_its_gradient_against_pytorch_at_large_logits():
    """log^2 Z where the logits sit near 60 (Z far from 1): value and gradient (2 log Z softmax / N)
    as torch.logsumexp gives them, in float32."""
    x = (np.random.default_rng(2).normal(0, 5, (6, 11)) + 60).astype(np.float32)
    t = tensor(x, "float32", requires_grad=True)
    z = z_loss(t)
    z.backward()
    tx = torch.tensor(x, requires_grad=True)
    tz = torch.logsumexp(tx, -1).pow(2).mean()
    tz.backward()
    assert z.item() == pytest.approx(tz.item(), rel=2e-7)
    np.testing.assert_allclose(t.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-9)  # a few float32 ulps
    lse = np.log(np.exp(x.astype(np.float64) - 60).sum(-1)) + 60  # and the float64 formula
    assert z.item() == pytest.approx(np.mean(lse ** 2), rel=1e-6)


def test_z_loss_in_the_task_loss_is_off_by_default_and_adds_coef_times_log2z():
    task = TinyGPTTask(n_digits=4, d_model=16, n_heads=2, batch=4)
    ztask = TinyGPTTask(n_digits=4, d_model=16, n_heads=2, batch=4, z_loss=1e-2)
    seq = task.batch_at(0)
    plain, with_z = task.loss(task.model(0), seq).item(), ztask.loss(ztask.model(0), seq).item()
    logits, _ = task.logits_and_targets(task.model(0), seq)
    assert with_z == pytest.approx(plain + 1e-2 * z_loss(logits.to("float32")).item(), rel=1e-6)
    assert with_z > plain
    with pytest.raises(ValueError, match="z_loss"):
        TinyGPTTask(z_loss=-1e-4)


def _max_logit64(attn, x):
    """max |q.k / sqrt(d)| over allowed pairs, recomputed in float64 from the module's weights."""
    b, t, d = x.shape
    h, hd = attn.n_heads, attn.head_dim

    def proj(name):
        lin = getattr(attn, name)
        y = x.astype(np.float64) @ lin.weight.numpy().astype(np.float64).T + lin.bias.numpy()
        return y.reshape(b, t, h, hd).transpose(0, 2, 1, 3)

    s = np.abs(proj("q") @ proj("k").transpose(0, 1, 3, 2)) / math.sqrt(hd)
    return np.where(np.tril(np.ones((t, t), bool)), s, 0).max()


def test_the_largest_logit_probe_against_float64_and_off_by_default():
    attn = nn.CausalSelfAttention(16, 2, seed=0)
    x = np.random.default_rng(3).normal(0, 3, (2, 7, 16)).astype(np.float32)
    assert attn.max_logits is None
    attn(tensor(x))
    assert attn.max_logits is None  # off: nothing recorded
    rec = attn.record_logits()
    attn(tensor(x))
    attn(tensor(2 * x))
    assert len(rec) == 2 and rec is attn.max_logits
    assert rec[0] == pytest.approx(_max_logit64(attn, x), rel=1e-5)
    assert rec[1] == pytest.approx(_max_logit64(attn, 2 * x), rel=1e-5)
    assert attn.record_logits(False) is None and attn.max_logits is None
    with pytest.raises(TypeError, match="record_logits: on"):
        attn.record_logits("yes")


def test_the_probe_in_a_training_run_and_qk_norm_bounds_the_logits():
    """One logit per step; with qk_norm at init |q.k|/sqrt(d) <= sqrt(d) (unit-norm-ish rows:
    LayerNorm makes each head's q and k have norm sqrt(d))."""
    from fpsim.experiments.loop import train

    task = TinyGPTTask(n_digits=4, d_model=16, n_heads=2, batch=4, record_logits=True, qk_norm=True)
    r = train(task, "fp32", 0, steps=3, measure_at=())
    assert len(r.metrics["attn_logits"]) == 3 and all(0 < v <= math.sqrt(8) * 1.0001 for v in r.metrics["attn_logits"])
    assert train(TinyGPTTask(n_digits=4, d_model=16, n_heads=2, batch=4), "fp32", 0, steps=2).metrics.get("attn_logits") is None


def test_qk_norm_bad_input_and_decode_matches_forward():
    with pytest.raises(TypeError, match="TinyGPT: qk_norm"):
        nn.TinyGPT(11, 8, d_model=16, n_heads=2, qk_norm=1)
    m = nn.TinyGPT(11, 8, d_model=16, n_layers=1, n_heads=2, qk_norm=True)
    assert "qk_norm=True" in repr(m.blocks[0].attn)
    ids = _ids(2, 6)
    full = m(ids).numpy()
    caches = [[]]
    step = np.concatenate([m.decode(ids[:, :3], caches).numpy(), m.decode(ids[:, 3:], caches).numpy()], axis=1)
    np.testing.assert_allclose(step, full, rtol=1e-5, atol=1e-6)
