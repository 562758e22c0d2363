"""Modules, losses and optimizers: a 50-step reference run against PyTorch float32, the
master-weight effect and Adam's float16 failure pinned to exact values, and bad input.
References: PyTorch (skipped when absent), float64 and numpy float16 arithmetic."""

import ml_dtypes
import numpy as np
import pytest
from helpers import bits, f64

from fpsim import nn, ops
from fpsim.optim import SGD, Adam, AdamW
from fpsim.tensor import tensor

pytestmark = pytest.mark.both_backends  # every test here runs on numpy and numpy-f32 (conftest.py)

BF16 = ml_dtypes.bfloat16


def param_bits(model):
    return {n: bits(p.numpy()).copy() for n, p in model.named_parameters()}


# ------------------------------------------------------------------------------ modules


def test_linear_shapes_init_and_forward():
    lin = nn.Linear(5, 3, seed=0)
    assert lin.weight.shape == (3, 5) and lin.bias.shape == (3,)
    bound = 1 / np.sqrt(5)
    assert np.all(np.abs(f64(lin.weight)) <= bound) and np.all(np.abs(f64(lin.bias)) <= bound)
    assert np.array_equal(nn.Linear(5, 3, seed=0).weight.numpy(), lin.weight.numpy())  # seeded
    x = np.random.default_rng(1).standard_normal((4, 5)).astype(np.float32)
    want = x.astype(np.float64) @ f64(lin.weight).T + f64(lin.bias)
    np.testing.assert_allclose(f64(lin(tensor(x))), want, rtol=1e-6, atol=1e-6)
    assert nn.Linear(5, 3, bias=False, seed=0).bias is None
    with pytest.raises(ValueError, match=r"^Linear: in_features must be an integer >= 1, got 0$"):
        nn.Linear(0, 3)


def test_mlp_structure_and_names():
    m = nn.MLP([4, 8, 8, 2], activation="tanh", fmt="bfloat16", seed=3)
    assert [type(layer).__name__ for layer in m] == ["Linear", "Tanh", "Linear", "Tanh", "Linear"]
    assert [n for n, _ in m.named_parameters()] == ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"]
    assert all(p.fmt.name == "bfloat16" and p.requires_grad for p in m.parameters())
    assert len(m) == 5 and isinstance(m[0], nn.Linear)
    sd = m.state_dict()
    assert list(sd) == [n for n, _ in m.named_parameters()] and sd["0.weight"].dtype == BF16
    assert not m.eval().training and not m[1].training and m.train().training
    with pytest.raises(ValueError, match="unknown activation 'swish'"):
        nn.MLP([2, 2], activation="swish")
    with pytest.raises(ValueError, match="two sizes"):
        nn.MLP([2])


def test_module_to_converts_in_place():
    m = nn.MLP([3, 4, 2], seed=0)
    w = m[0].weight
    before = f64(w)
    opt = SGD(m.parameters(), lr=0.1)
    m.to("float16")
    assert opt.params[0] is w and w.fmt.name == "float16" and w.numpy().dtype == np.float16
    assert np.array_equal(w.numpy(), before.astype(np.float16))
    m.to("float32")
    assert w.fmt.name == "float32" and np.array_equal(f64(w), before.astype(np.float16).astype(np.float64))


def test_activation_modules():
    x = tensor([-1.0, 0.5])
    for mod, fn in [(nn.ReLU(), ops.relu), (nn.Tanh(), ops.tanh), (nn.Sigmoid(), ops.sigmoid), (nn.GELU(), ops.gelu)]:
        assert np.array_equal(mod(x).numpy(), fn(x).numpy())
    assert nn.Identity()(x) is x


# ------------------------------------------------------------------------------ reference run vs PyTorch


def _torch_mlp(torch, model):
    layers = []
    for layer in model:
        if isinstance(layer, nn.Linear):
            lin = torch.nn.Linear(layer.in_features, layer.out_features)
            with torch.no_grad():
                lin.weight.copy_(torch.from_numpy(layer.weight.numpy().copy()))
                lin.bias.copy_(torch.from_numpy(layer.bias.numpy().copy()))
            layers.append(lin)
        else:
            layers.append({"ReLU": torch.nn.ReLU(), "Tanh": torch.nn.Tanh()}[type(layer).__name__])
    return torch.nn.Sequential(*layers)


@pytest.mark.parametrize("kind", ["sgd", "sgd-nesterov-wd", "adam", "adamw"])
def test_reference_run_matches_torch(kind):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    model = nn.MLP([6, 16, 16, 3], activation="tanh" if kind.startswith("adam") else "relu", seed=1)
    tmodel = _torch_mlp(torch, model)
    p, tp = model.parameters(), list(tmodel.parameters())
    opts = {
        "sgd": (lambda: SGD(p, lr=0.05, momentum=0.9), lambda: torch.optim.SGD(tp, lr=0.05, momentum=0.9)),
        "sgd-nesterov-wd": (lambda: SGD(p, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-2),
                            lambda: torch.optim.SGD(tp, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-2)),
        "adam": (lambda: Adam(p, lr=1e-2), lambda: torch.optim.Adam(tp, lr=1e-2, foreach=False)),
        "adamw": (lambda: AdamW(p, lr=1e-2), lambda: torch.optim.AdamW(tp, lr=1e-2, foreach=False)),
    }
    opt, topt = opts[kind][0](), opts[kind][1]()
    use_ce = kind.endswith("wd") or kind == "adamw"
    teacher = rng.standard_normal((6, 3)).astype(np.float32)  # learnable targets
    losses, tlosses = [], []
    for _ in range(50):
        x = rng.standard_normal((8, 6)).astype(np.float32)
        if use_ce:
            y = np.argmax(x @ teacher, axis=1)
            loss = nn.cross_entropy(model(tensor(x)), y)
            tloss = torch.nn.functional.cross_entropy(tmodel(torch.from_numpy(x)), torch.from_numpy(y))
        else:
            y = x @ teacher
            loss = nn.mse_loss(model(tensor(x)), y)
            tloss = torch.nn.functional.mse_loss(tmodel(torch.from_numpy(x)), torch.from_numpy(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
        topt.zero_grad()
        tloss.backward()
        topt.step()
        losses.append(loss.item())
        tlosses.append(tloss.item())
    np.testing.assert_allclose(losses, tlosses, rtol=1e-5)
    assert np.mean(losses[-10:]) < 0.8 * np.mean(losses[:10])  # it trained
    for a, b in zip(p, tp):
        np.testing.assert_allclose(f64(a), b.detach().double().numpy(), rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------ exact update rules


def test_sgd_momentum_float16_rounds_each_inplace_op():
    """No master weights: the buffer and the weight live in float16; every in-place op
    (buf*m, +g, w - lr*buf) rounds once.  Reference: numpy float32 ops, rounded by numpy."""
    w0 = np.array([1.0, -0.3, 2e-3], np.float16)
    gs = [np.array(v, np.float32) for v in ([0.1, 0.2, -1e-3], [0.3, -0.1, 5e-4], [1e-3, 1e-3, 1e-3])]
    w = tensor(w0, requires_grad=True)
    opt = SGD([w], lr=0.1, momentum=0.9)
    rw, buf = w0.copy(), None
    f32 = np.float32
    for g in gs:
        opt.zero_grad()
        (w * g).sum().backward()
        opt.step()
        g16 = g.astype(np.float16)  # the gradient arrives in float16
        if buf is None:
            buf = g16
        else:
            buf = (buf.astype(f32) * f32(0.9)).astype(np.float16)
            buf = (buf.astype(f32) + g16.astype(f32)).astype(np.float16)
        rw = (rw.astype(f32) - f32(0.1) * buf.astype(f32)).astype(np.float16)
        assert bits(opt.state[0]["momentum_buffer"].numpy()).tolist() == bits(buf).tolist()
        assert bits(w.numpy()).tolist() == bits(rw).tolist()


def test_master_weights_keep_updates_below_half_an_ulp():
    """float16 w = 1.0, lr = 1, gradient 2^-12 each step (half the float16 ulp just below 1:
    numbers.md - an update to 1.0 must exceed 2^-11 - half an ulp above - to survive)."""
    c = np.array([2.0**-12], np.float32)

    def run(master, steps):
        w = tensor([1.0], "float16", requires_grad=True)
        opt = SGD([w], lr=1.0, master_weights=master)
        seen = []
        for _ in range(steps):
            opt.zero_grad()
            (w * c).sum().backward()
            assert w.grad.fmt.name == "float16" and float(w.grad.numpy()[0]) == 2.0**-12
            opt.step()
            seen.append((int(bits(w.numpy())[0]), float(opt.master_params()[0].f32()[0])))
        return seen

    # without masters: 1 - 2^-12 is a tie between 1 - 2^-11 and 1.0; it goes to even, 1.0 - forever
    assert run(False, 3) == [(0x3C00, 1.0)] * 3
    # with masters the float32 copy moves by exactly 2^-12 per step; the float16 copy is its
    # correct rounding: 1 - 2^-12 -> 1.0 (tie to even), 1 - 2^-11 exact, 1 - 3 * 2^-12 -> tie to
    # even 1 - 2^-10 (0x3BFE)
    got = run(True, 3)
    assert [m for _, m in got] == [1 - 2.0**-12, 1 - 2 * 2.0**-12, 1 - 3 * 2.0**-12]
    assert [b for b, _ in got] == [0x3C00, 0x3BFF, 0x3BFE]
    assert [b for b, _ in got] == [int(bits(np.array([np.float16(m)]))[0]) for _, m in got]


def test_master_weights_bfloat16():
    # bfloat16: half an ulp below 1.0 is 2^-9; a 2^-10 step moves a float32 master, never the bf16 copy alone
    w = tensor([1.0], "bfloat16", requires_grad=True)
    w_plain = tensor([1.0], "bfloat16", requires_grad=True)
    opt, plain = SGD([w], lr=1.0, master_weights=True), SGD([w_plain], lr=1.0)
    for _ in range(3):
        for t, o in ((w, opt), (w_plain, plain)):
            o.zero_grad()
            (t * 2.0**-10).sum().backward()
            o.step()
    assert float(w_plain.numpy()[0]) == 1.0
    assert float(opt.master[0].numpy()[0]) == 1 - 3 * 2.0**-10
    assert float(w.numpy()[0]) == float(np.float32(1 - 3 * 2.0**-10).astype(BF16)) == 1 - 2.0**-8


def test_master_grads_are_not_stale_after_model_zero_grad():
    """Zeroing through the model (not the optimizer) must still give each step its own
    gradient: the float32 master must follow the plain float32 arithmetic."""
    w = tensor([1.0], "float16", requires_grad=True)
    opt = SGD([w], lr=0.5, master_weights=True)
    for c in (1.0, 0.0, 0.0, 0.25):
        w.zero_grad()
        (w * c).sum().backward()
        opt.step()
    assert float(opt.master[0].numpy()[0]) == 1.0 - 0.5 - 0.5 * 0.25


def test_adam_float16_without_masters_collapses():
    """g ~ 1e-4: (1 - beta2) g^2 ~ 1e-11 flushes to 0 in float16, eps = 1e-8 flushes too, so the
    denominator is exactly 0 and the step m / 0 sends the weight to -inf."""
    g32 = np.float32(1e-4)
    w = tensor([0.5, 0.5], "float16", requires_grad=True)
    opt = Adam([w], lr=1e-3)
    (w * np.array([1e-4, -1e-4], np.float32)).sum().backward()
    g16 = np.array([g32, -g32]).astype(np.float16)
    assert bits(w.grad.numpy()).tolist() == bits(g16).tolist()
    with np.errstate(all="ignore"):
        opt.step()
    st = opt.state[0]
    # exp_avg = float16(float32(0.1) * g): a float16 subnormal, kept
    want_m = (np.float32(1 - 0.9) * g16.astype(np.float32)).astype(np.float16)
    assert bits(st["exp_avg"].numpy()).tolist() == bits(want_m).tolist()
    assert float(want_m[0]) != 0.0 and st["exp_avg"].fmt.name == "float16"
    assert bits(st["exp_avg_sq"].numpy()).tolist() == [0, 0]  # +0: the second moment flushed
    assert np.float16(np.float32(1e-8)) == 0.0  # and eps cannot rescue the denominator
    assert w.numpy().tolist() == [-np.inf, np.inf]
    assert st["step"] == 1


def test_adam_float16_with_masters_moves_by_lr():
    w = tensor([0.5, 0.5], "float16", requires_grad=True)
    opt = Adam([w], lr=1e-3, master_weights=True)
    (w * np.array([1e-4, -1e-4], np.float32)).sum().backward()
    opt.step()
    st = opt.state[0]
    assert st["exp_avg_sq"].fmt.name == "float32"
    g = float(np.float16(np.float32(1e-4)))
    np.testing.assert_allclose(f64(st["exp_avg_sq"]), [1e-3 * g * g] * 2, rtol=1e-6)
    # first Adam step: m_hat / (sqrt(v_hat) + eps) = g / (|g| + 1e-8) ~ +-1
    step = g / (g + 1e-8) * 1e-3
    np.testing.assert_allclose(f64(opt.master[0]), [0.5 - step, 0.5 + step], rtol=1e-6)
    assert np.array_equal(w.numpy(), opt.master[0].numpy().astype(np.float16))


def test_adam_float32_one_step_matches_float64_formula():
    rng = np.random.default_rng(4)
    w0, g1, g2 = (rng.standard_normal(5) for _ in range(3))
    w = tensor(w0, requires_grad=True)
    opt = Adam([w], lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)
    x = f64(w)
    m = v = 0.0
    for t, g in enumerate((g1, g2), 1):
        opt.zero_grad()
        (w * g.astype(np.float32)).sum().backward()
        opt.step()
        gg = g.astype(np.float32).astype(np.float64) + 0.1 * x
        m = 0.8 * m + 0.2 * gg
        v = 0.99 * v + 0.01 * gg * gg
        x = x - 1e-2 / (1 - 0.8**t) * m / (np.sqrt(v) / np.sqrt(1 - 0.99**t) + 1e-6)
    np.testing.assert_allclose(f64(w), x, rtol=2e-6, atol=1e-7)


# ------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize("lr", [0, -1e-3, float("nan"), float("inf"), True, "0.1"])
def test_bad_learning_rate(lr):
    w = tensor([1.0], requires_grad=True)
    for opt in (SGD, Adam, AdamW):
        with pytest.raises(ValueError, match="learning rate"):
            opt([w], lr=lr)


def test_optimizer_bad_arguments():
    w = tensor([1.0], requires_grad=True)
    assert SGD([w], lr=np.float32(0.5)).lr == 0.5
    with pytest.raises(ValueError, match="empty"):
        SGD([], lr=0.1)
    with pytest.raises(ValueError, match="require grad"):
        SGD([tensor([1.0])], lr=0.1)
    with pytest.raises(ValueError, match="betas"):
        Adam([w], betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="Nesterov"):
        SGD([w], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="momentum"):
        SGD([w], lr=0.1, momentum=-0.5)


@pytest.mark.parametrize("fmt", ["float32", "float16", "bfloat16"])
def test_load_state_dict_bad_entries_leave_model_untouched(fmt):
    m = nn.MLP([3, 4, 2], fmt=fmt, seed=0)
    other = nn.MLP([3, 4, 2], fmt=fmt, seed=1).state_dict()
    before = param_bits(m)
    cases = {
        "missing": ({k: v for k, v in other.items() if k != "2.bias"}, r"missing \['2\.bias'\]"),
        "extra": ({**other, "9.weight": np.zeros(3)}, r"unexpected \['9\.weight'\]"),
        "shape": ({**other, "0.weight": np.zeros((3, 4))}, r"0\.weight: expected \(4, 3\), got \(3, 4\)"),
    }
    for name, (sd, pattern) in cases.items():
        with pytest.raises(ValueError, match=pattern):
            m.load_state_dict(sd)
        after = param_bits(m)
        assert all(np.array_equal(before[k], after[k]) for k in before), name
    m.load_state_dict(other)  # the good one loads, bit for bit
    assert all(np.array_equal(bits(other[k]), v) for k, v in param_bits(m).items())


def test_optimizer_load_state_dict_checks():
    w = tensor(np.ones(3), "float16", requires_grad=True)
    opt = Adam([w], lr=1e-3, master_weights=True)
    w.grad = tensor(np.full(3, 0.5), "float16")
    opt.step()
    sd = opt.state_dict()
    assert set(sd) == {"optimizer", "step_count", "master.0", "state.0.step", "state.0.exp_avg", "state.0.exp_avg_sq"}
    fresh = Adam([tensor(np.ones(3), "float16", requires_grad=True)], lr=1e-3, master_weights=True)
    with pytest.raises(ValueError, match=r"missing \['master\.0'\]"):
        fresh.load_state_dict({k: v for k, v in sd.items() if k != "master.0"})
    with pytest.raises(ValueError, match=r"state\.0\.exp_avg: expected \(3,\), got \(2,\)"):
        fresh.load_state_dict({**sd, "state.0.exp_avg": np.zeros(2, np.float32)})
    with pytest.raises(ValueError, match=r"state\.5\.exp_avg"):
        fresh.load_state_dict({**sd, "state.5.exp_avg": np.zeros(3, np.float32)})
    assert fresh.state == [{}] and fresh.step_count == 0  # unchanged by the failures
    fresh.load_state_dict(sd)
    assert fresh.step_count == 1 and fresh.state[0]["step"] == 1
    assert np.array_equal(fresh.master[0].numpy(), opt.master[0].numpy())
