"""fpsim.optim.Muon against torch.optim.Muon (PyTorch 2.13, in the test environment), step by step:
the same weights and momentum buffers to within what PyTorch's fused CPU multiply-adds and its
float32 summation order change; newton_schulz against torch's own orthogonalization and, in
float32, against a float64 reference of the same iteration; the argument checks."""

import numpy as np
import pytest

import fpsim
from fpsim.backend import get_backend
from fpsim.optim import MUON_COEFFICIENTS, Muon, newton_schulz

torch = pytest.importorskip("torch")
if not hasattr(torch.optim, "Muon"):
    pytest.skip("this PyTorch has no torch.optim.Muon", allow_module_level=True)


def _pair(shape, kw, steps=6, seed=0):
    """fpsim's and torch's weights and buffers after each of ``steps`` steps on the same gradients."""
    rng = np.random.default_rng(seed)
    w0 = (rng.standard_normal(shape) * 0.1).astype(np.float32)
    p = fpsim.tensor(w0.copy(), "float32", requires_grad=True)
    tp = torch.nn.Parameter(torch.tensor(w0.copy()))
    mine, theirs = Muon([p], **kw), torch.optim.Muon([tp], **kw)
    out = []
    for _ in range(steps):
        g = (rng.standard_normal(shape) * 0.01).astype(np.float32)
        p.grad, tp.grad = fpsim.tensor(g, "float32"), torch.tensor(g)
        mine.step()
        theirs.step()
        out.append((p.f32().copy(), tp.detach().numpy().copy(), mine.state[0]["momentum_buffer"].f32().copy(),
                    theirs.state[tp]["momentum_buffer"].numpy().copy(), w0))
    return out


@pytest.mark.parametrize("shape", [(48, 32), (32, 48), (40, 40)])
@pytest.mark.parametrize("kw", [dict(lr=0.02), dict(lr=0.02, nesterov=False), dict(lr=0.01, weight_decay=0.0),
                                dict(lr=0.005, adjust_lr_fn="match_rms_adamw"), dict(lr=0.02, momentum=0.9)])
def test_muon_follows_torch_step_by_step(shape, kw):
    for step, (w, tw, buf, tbuf, w0) in enumerate(_pair(shape, kw), 1):
        # the buffer: float32 lerp, one rounding each (torch may fuse it): within 2 ulps of the values
        assert np.allclose(buf, tbuf, rtol=0, atol=2 * np.spacing(np.abs(tbuf).max()))
        # the weights: each step moves them by lr' times a bfloat16 orthogonal matrix; many entries
        # agree to the bit, and where a bfloat16 tie inside the iteration went the other way (torch
        # sums in its own order and fuses multiply-adds), the iteration's chaos spreads one bfloat16
        # ulp of the update (2^-9 of its largest entry) - a fraction of a percent of the distance
        moved = np.linalg.norm((tw - w0).astype(np.float64))
        assert np.linalg.norm((w - tw).astype(np.float64)) <= 0.01 * moved, step
        assert np.abs(w - tw).max() <= 2.0**-5 * np.abs(tw - w0).max(), step

def test_newton_schulz_in_bfloat16_is_torchs_orthogonalization():
    from torch.optim._muon import _zeropower_via_newtonschulz

    be = get_backend("numpy")
    for seed, shape in enumerate([(64, 64), (96, 32), (32, 96)]):
        g = (np.random.default_rng(seed).standard_normal(shape) * 1e-3).astype(np.float32)
        mine = newton_schulz(g, be, "bfloat16")
        theirs = _zeropower_via_newtonschulz(torch.tensor(g), MUON_COEFFICIENTS, 5, 1e-7).float().numpy()
        # bit for bit on most inputs; where one rounding tie inside the five steps falls the other
        # way, the rest differ by about a bfloat16 ulp of the largest entry
        assert (mine == theirs).mean() > 0.7
        assert np.abs(mine - theirs).max() <= 2.0**-7 * np.abs(theirs).max()
        assert np.linalg.norm(mine - theirs) <= 0.005 * np.linalg.norm(theirs)
    g = (np.random.default_rng(0).standard_normal((48, 32)) * 1e-3).astype(np.float32)
    mine = newton_schulz(g, be, "bfloat16")
    assert np.array_equal(mine, _zeropower_via_newtonschulz(torch.tensor(g), MUON_COEFFICIENTS, 5, 1e-7).float().numpy())

def _ns64(g, coefficients=MUON_COEFFICIENTS, steps=5, eps=1e-7):
    """The iteration in float64, no rounding: the independent reference."""
    a, b, c = coefficients
    x = g.astype(np.float64)
    tall = x.shape[0] > x.shape[1]
    x = x.T if tall else x
    x = x / max(np.sqrt((x * x).sum()), eps)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


def test_newton_schulz_in_float32_matches_the_float64_iteration_and_orthogonalizes():
    be = get_backend("numpy")
    g = (np.random.default_rng(3).standard_normal((48, 24)) * 0.05).astype(np.float32)
    mine = newton_schulz(g, be, "float32")
    ref = _ns64(g)
    assert np.abs(mine - ref).max() < 1e-5
    # the quintic leaves singular values in roughly (0.5, 1.5), never the input's spread
    s = np.linalg.svd(mine.astype(np.float64), compute_uv=False)
    assert 0.4 < s.min() and s.max() < 1.6


def test_muon_with_float32_state_format_is_the_same_bits_as_its_own_state():
    rng = np.random.default_rng(5)
    w0 = rng.standard_normal((16, 24)).astype(np.float32)
    ps = [fpsim.tensor(w0.copy(), "float32", requires_grad=True) for _ in range(2)]
    opts = [Muon([ps[0]], lr=0.02), Muon([ps[1]], lr=0.02, state_format="float32")]
    for _ in range(4):
        g = rng.standard_normal((16, 24)).astype(np.float32)
        for p, o in zip(ps, opts):
            p.grad = fpsim.tensor(g, "float32")
            o.step()
    assert np.array_equal(ps[0].f32(), ps[1].f32())


def test_muon_refuses_what_torch_refuses():
    v = fpsim.tensor(np.zeros(4, np.float32), "float32", requires_grad=True)
    m = fpsim.tensor(np.zeros((4, 4), np.float32), "float32", requires_grad=True)
    with pytest.raises(ValueError, match="params must be 2-D"):
        Muon([v])
    with pytest.raises(ValueError, match="adjust_lr_fn must be"):
        Muon([m], adjust_lr_fn="rms")
    with pytest.raises(ValueError, match="ns_steps must be"):
        Muon([m], ns_steps=100)
    with pytest.raises(ValueError, match="ns_coefficients must be three"):
        Muon([m], ns_coefficients=(1.0, 2.0))
    assert Muon([m]).adjusted_lr((64, 16)) == pytest.approx(1e-3 * 2.0)
    assert Muon([m], adjust_lr_fn="match_rms_adamw").adjusted_lr((64, 16)) == pytest.approx(1e-3 * 0.2 * 8)
