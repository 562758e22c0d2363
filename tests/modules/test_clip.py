"""clip_grad_norm_ against float64 numpy and torch.nn.utils.clip_grad_norm_, and the
clip-before-unscale demonstration as numbers."""

import math

import numpy as np
import pytest

from fpsim import ops
from fpsim.amp import GradScaler
from fpsim.backend import CupyBackend, get_backend
from fpsim.labs.clipping import clip_order_demo
from fpsim.nn.utils import clip_grad_norm_
from fpsim.optim import SGD
from fpsim.state import hooked
from fpsim.tensor import Tensor, tensor

pytestmark = pytest.mark.both_backends  # every test here runs on numpy and numpy-f32 (conftest.py)


def _with_grad(g, fmt="float32", backend=None, name="weight"):
    g = np.asarray(g, dtype=np.float32)
    p = tensor(np.zeros(g.shape), fmt, requires_grad=True, backend=backend, name=name)
    be = p.backend
    p.grad = Tensor(be.round(be.asarray(g), p.grad_fmt), p.grad_fmt, backend=be)
    return p


def _coef64(total, max_norm):
    return min(max_norm / (total + 1e-6), 1.0)


@pytest.mark.parametrize("backend", ["numpy", CupyBackend(xp=np)], ids=["numpy", "cupy-stand-in"])
def test_norm_and_coefficient_exact_case(backend):
    be = get_backend(backend)
    a, b = _with_grad([3.0, 4.0], backend=be), _with_grad([[12.0]], backend=be)
    n = clip_grad_norm_([a, b], 6.5)
    assert isinstance(n, np.float32) and n == 13.0  # sqrt(9 + 16 + 144), unclipped
    coef = _coef64(13.0, 6.5)  # 0.49999996...
    np.testing.assert_allclose(be.to_numpy(a.grad.f32()), np.array([3.0, 4.0]) * coef, rtol=1.5e-7)
    np.testing.assert_allclose(be.to_numpy(b.grad.f32()), [[12.0 * coef]], rtol=1.5e-7)
    assert be.to_numpy(a.grad.f32())[0] < 1.5  # clipped, just under half


def test_no_clipping_below_max_norm_and_norm_types():
    g = np.array([0.3, -0.4, 1e-3], dtype=np.float32)
    p = _with_grad(g)
    n = clip_grad_norm_(p, 10.0)  # a single tensor is accepted
    assert n == np.float32(np.sqrt(np.sum(g.astype(np.float64) ** 2)))
    np.testing.assert_array_equal(p.grad.f32(), g)  # coef clamped to 1: unchanged bit for bit
    assert clip_grad_norm_(p, 10.0, norm_type=math.inf) == np.float32(0.4)
    assert clip_grad_norm_(p, 10.0, norm_type="inf") == np.float32(0.4)
    assert clip_grad_norm_(p, 10.0, norm_type=1) == pytest.approx(np.sum(np.abs(g.astype(np.float64))), rel=1.2e-7)
    n3 = clip_grad_norm_(p, 10.0, norm_type=3.0)
    assert n3 == pytest.approx(np.sum(np.abs(g.astype(np.float64)) ** 3) ** (1 / 3), rel=1e-6)
    # inf-norm clipping: the largest magnitude becomes max_norm
    q = _with_grad([2.0, -8.0])
    assert clip_grad_norm_([q], 4.0, norm_type="inf") == 8.0
    np.testing.assert_allclose(q.grad.f32(), [1.0, -4.0], rtol=1e-6)


def test_params_without_grads_ignored_and_no_grads_at_all():
    a = _with_grad([6.0, 8.0])
    b = tensor([1.0, 1.0], requires_grad=True)
    assert clip_grad_norm_((x for x in [a, b]), 5.0) == 10.0  # any iterable, a generator too
    assert b.grad is None
    c = tensor([1.0], requires_grad=True)
    n = clip_grad_norm_([c], 1.0)
    assert n == 0.0 and c.grad is None
    assert clip_grad_norm_([], 1.0) == 0.0


def test_low_precision_grads_round_once_into_their_format_and_hooks_see_it():
    g16 = np.array([3.0, 4.0, 0.0999755859375], dtype=np.float16)
    p = _with_grad(g16, "float16")
    seen = []
    with hooked(lambda ev: seen.append((ev.op, ev.direction, ev.target, ev.fmt.name))):
        n = clip_grad_norm_([p], 1.0)
    total = np.float32(np.sqrt(np.sum(g16.astype(np.float32) ** 2, dtype=np.float32)))
    assert n == total  # computed in float32 from the float16 values
    coef = np.float32(np.float32(1) / (total + np.float32(1e-6))) * np.float32(1.0)
    np.testing.assert_array_equal(p.grad.numpy(), (g16.astype(np.float32) * coef).astype(np.float16))
    assert p.grad.fmt.name == "float16"
    assert seen == [("clip", "backward", "weight", "float16")]


def test_nonfinite_total():
    p = _with_grad([1.0, np.inf])
    with pytest.raises(RuntimeError, match="non-finite"):
        clip_grad_norm_([p], 1.0, error_if_nonfinite=True)
    np.testing.assert_array_equal(p.grad.f32(), [1.0, np.inf])  # nothing touched
    n = clip_grad_norm_([p], 1.0)  # PyTorch's default: scale by the inf norm anyway
    assert n == np.inf
    np.testing.assert_array_equal(p.grad.f32(), [0.0, np.nan])  # coef 0; inf * 0 = NaN
    q = _with_grad([np.nan, 1.0])
    with pytest.raises(RuntimeError, match="non-finite"):
        clip_grad_norm_(q, 1.0, error_if_nonfinite=True)


@pytest.mark.parametrize("kw", [{"max_norm": -1.0}, {"max_norm": math.nan}, {"max_norm": "1"}, {"max_norm": True},
                                {"norm_type": 0}, {"norm_type": -2.0}, {"norm_type": "fro"}, {"norm_type": math.nan},
                                {"norm_type": None}])
def test_bad_input(kw):
    p = _with_grad([1.0])
    args = {"max_norm": 1.0, **kw}
    with pytest.raises(ValueError):
        clip_grad_norm_([p], **args)


def test_bad_parameters():
    with pytest.raises(TypeError, match="not a Tensor"):
        clip_grad_norm_([np.zeros(2)], 1.0)
    with pytest.raises(TypeError, match="iterable"):
        clip_grad_norm_(3.0, 1.0)


# ---------------------------------------------------------------------------------- clip order


def test_clip_order_demo_numbers():
    d = clip_order_demo()  # grads [0.3, 0.4], S = 1024, max_norm 1, lr 1
    g = np.array([0.3, 0.4], dtype=np.float32)
    np.testing.assert_array_equal(d.correct_update, -g)  # norm 0.5 < 1: nothing clipped
    assert d.correct_norm == pytest.approx(0.5, rel=1e-7)
    assert d.wrong_norm == pytest.approx(512.0, rel=1e-7)  # clip saw S * 0.5
    # the scaled grads [307.2, 409.6] clipped to norm 1 are [0.6, 0.8]; unscaled: / 1024
    np.testing.assert_allclose(d.wrong_update, -np.array([0.6, 0.8]) / 1024, rtol=1e-6)
    assert d.ratio == pytest.approx(512.0, rel=1e-6)  # S * |g| / max_norm
    assert 400 < d.ratio < 1100  # "about 1000x" in round numbers
    d2 = clip_order_demo(lr=0.5, grads=(3.0, 4.0))  # |g| = 5 > max_norm: both clip, ratio S
    np.testing.assert_allclose(d2.correct_update, [-0.3, -0.4], rtol=1e-6)
    assert d2.ratio == pytest.approx(1024.0, rel=1e-5)
    assert "512x less" in str(d)
    with pytest.raises(ValueError):
        clip_order_demo(grads=())
    with pytest.raises(ValueError):
        clip_order_demo(scale=0.0)


def test_correct_order_with_master_weights():
    """fp16 model, float32 masters: unscale_ writes the masters' grads; clip those."""
    w = tensor([0.0, 0.0], "float16", requires_grad=True, name="weight")
    opt = SGD([w], lr=1.0, master_weights=True)
    s = GradScaler(init_scale=1024.0)
    s.scale(ops.sum(w * np.float32([3.0, 4.0]))).backward()  # scaled fp16 grads 3072, 4096
    s.unscale_(opt)
    n = clip_grad_norm_(opt.master_params(), 1.0)
    assert n == 5.0
    s.step(opt)
    s.update()
    np.testing.assert_allclose(opt.master[0].f32(), [-0.6, -0.8], rtol=1e-6)
    np.testing.assert_array_equal(w.numpy(), opt.master[0].f32().astype(np.float16))


# ---------------------------------------------------------------------------------- against PyTorch


def test_clip_agrees_with_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    for trial in range(40):
        gs = [(rng.standard_normal(s) * 10.0 ** rng.integers(-3, 3)).astype(np.float32)
              for s in [(int(rng.integers(1, 60)),), (int(rng.integers(1, 9)), 7), (2,)]]
        norm_type = [2.0, 1.0, math.inf, 3.0][trial % 4]
        max_norm = float(rng.choice([1e-2, 1.0, 1e4]))
        fp = [_with_grad(g) for g in gs]
        tp = [torch.zeros(g.shape, requires_grad=True) for g in gs]
        for t, g in zip(tp, gs):
            t.grad = torch.from_numpy(g.copy())
        n_f = clip_grad_norm_(fp, max_norm, norm_type)
        n_t = torch.nn.utils.clip_grad_norm_(tp, max_norm, norm_type).item()
        # both sum in float32, in a different order: equal to a few float32 ulps
        np.testing.assert_allclose(float(n_f), n_t, rtol=1e-6)
        for a, t in zip(fp, tp):
            np.testing.assert_allclose(a.grad.f32(), t.grad.numpy(), rtol=2e-6, atol=0)
    # exactly representable case: bit for bit
    fp, tp = _with_grad([3.0, 4.0]), torch.tensor([0.0, 0.0], requires_grad=True)
    tp.grad = torch.tensor([3.0, 4.0])
    assert clip_grad_norm_(fp, 1.0) == torch.nn.utils.clip_grad_norm_(tp, 1.0).item() == 5.0
    np.testing.assert_array_equal(fp.grad.f32(), tp.grad.numpy())


def test_clip_order_demo_agrees_with_torch():
    """The same two steps with torch.amp.GradScaler, torch.nn.utils.clip_grad_norm_ and torch SGD."""
    torch = pytest.importorskip("torch")
    d = clip_order_demo()

    def torch_run(unscale_first):
        w = torch.zeros(2, requires_grad=True)
        opt = torch.optim.SGD([w], lr=1.0)
        s = torch.amp.GradScaler("cpu", init_scale=1024.0)
        s.scale((w * torch.tensor([0.3, 0.4])).sum()).backward()
        if unscale_first:
            s.unscale_(opt)
        torch.nn.utils.clip_grad_norm_([w], 1.0)
        s.step(opt)
        s.update()
        return w.detach().numpy()

    np.testing.assert_array_equal(d.correct_update, torch_run(True))
    np.testing.assert_array_equal(d.wrong_update, torch_run(False))
