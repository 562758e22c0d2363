"""autocast's policy and GradScaler's state machine, checked against hand-written expected
sequences, float64 / float32 numpy arithmetic written here, and torch.amp.GradScaler when
PyTorch is installed."""

import math

import numpy as np
import pytest

import fpsim
from fpsim import nn, ops
from fpsim.amp import GradScaler, StaticScaler, autocast, autocast_format
from fpsim.backend import CupyBackend, get_backend
from fpsim.optim import SGD, Adam
from fpsim.state import hooked
from fpsim.tensor import Tensor, tensor

pytestmark = pytest.mark.both_backends  # every test here runs on numpy and numpy-f32 (conftest.py)

F16 = np.float16

# ---------------------------------------------------------------------------------- helpers


def _param(n=3, fmt="float32", value=1.0, backend=None):
    return tensor(np.full(n, value), fmt, requires_grad=True, name="weight", backend=backend)


def _set_grad(p, values):
    vals = np.asarray(values, dtype=np.float32)
    p.grad = Tensor(p.backend.round(p.backend.asarray(vals), p.grad_fmt), p.grad_fmt, backend=p.backend)


def _grads_for(kind, n=3, value=0.5):
    g = np.full(n, value, dtype=np.float32)
    if kind == "inf":
        g[1] = np.inf
    elif kind == "nan":
        g[0] = np.nan
    return g


def _started(scaler, p):
    """Make the scaler start (the first scale() call), as a real training step would."""
    scaler.scale(ops.sum(p) * 0.0)
    return scaler


def _one_step(scaler, opt, kind):
    for p in opt.params:
        _set_grad(p, _grads_for(kind, p.size))
    scaler.step(opt)
    scaler.update()


# ---------------------------------------------------------------------------------- autocast


def test_autocast_policy_formats():
    x = tensor(np.linspace(-1, 1, 12).reshape(3, 4), "float32")
    w = tensor(np.linspace(0.5, 1.5, 8).reshape(4, 2), "float32", requires_grad=True, name="weight")
    h = tensor(np.linspace(-2, 2, 6).reshape(3, 2), "float16")
    h32 = tensor(np.ones((3, 2)), "float32")
    with autocast("float16"):
        assert autocast_format().name == "float16"
        y = x @ w
        assert y.fmt.name == "float16"  # matmul: low precision
        # the float32 list, fed float16
        for out in (ops.exp(h), ops.log(ops.abs(h) + 1), ops.pow(h, 2), ops.sum(h), ops.mean(h), ops.softmax(h),
                    ops.log_softmax(h), ops.mse_loss(h, h), nn.cross_entropy(h, np.array([0, 1, 0]))):
            assert out.fmt.name == "float32"
        # everything else: the inputs' format; mixed inputs promote
        for out in (ops.relu(h), ops.gelu(h), ops.tanh(h), h + h, h * h, h - 1.0):
            assert out.fmt.name == "float16"
        assert (h + h32).fmt.name == "float32"
        assert ops.relu(h32).fmt.name == "float32"
        loss = ops.mse_loss(y, np.zeros((3, 2)))
        assert loss.fmt.name == "float32"
    assert autocast_format() is None
    loss.backward()
    # a float32 parameter used under autocast gets a float32 gradient, holding float16 values
    assert w.grad.fmt.name == "float32"
    g = w.grad.f32()
    np.testing.assert_array_equal(g, g.astype(F16).astype(np.float32))


def test_autocast_matmul_values_and_linear():
    # dyadic values: the float16-rounded inputs, their products and sums are exact
    a = np.array([[1.0, 2.0 ** -12 + 1.0], [3.0, -0.5]])  # 1 + 2^-12 is not a float16: rounds to 1
    b = np.array([[0.25, 1.0], [2.0, 4.0]])
    with autocast("float16"):
        y = tensor(a, "float32") @ tensor(b, "float32")
    ref = a.astype(F16).astype(np.float64) @ b.astype(F16).astype(np.float64)
    np.testing.assert_array_equal(y.f32(), ref.astype(F16).astype(np.float32))
    assert y.f32()[0, 0] == 2.25  # not 2.25 + 2^-11: the input was narrowed first
    lin = nn.Linear(4, 3, seed=0)
    with autocast("bfloat16"):
        assert lin(tensor(np.ones((2, 4)))).fmt.name == "bfloat16"  # linear = one low-precision op
    assert lin(tensor(np.ones((2, 4)))).fmt.name == "float32"


def test_autocast_nesting_restore_and_disable():
    assert autocast_format() is None
    with autocast("float16"):
        with autocast("bfloat16"):
            assert autocast_format().name == "bfloat16"
            with autocast(enabled=False):
                assert autocast_format() is None
                assert (tensor(np.ones((2, 2))) @ tensor(np.ones((2, 2)))).fmt.name == "float32"
            assert autocast_format().name == "bfloat16"
        assert autocast_format().name == "float16"
    assert autocast_format() is None
    with pytest.raises(KeyError), autocast("float16"):
        raise KeyError("boom")
    assert autocast_format() is None  # restored after an exception

    @autocast("float16")
    def f():
        return autocast_format().name

    assert f() == "float16" and autocast_format() is None
    ac = autocast("float16")  # one object entered twice (re-entrant)
    with ac, ac:
        pass
    assert autocast_format() is None


@pytest.mark.parametrize("bad", ["float32", "float8_e4m3fn", "fp17"])
def test_autocast_bad_dtype(bad):
    with pytest.raises(ValueError, match="float16|unknown"):
        autocast(bad)
    with pytest.raises(TypeError):
        autocast("float16", enabled="yes")


def test_autocast_to_a_block_format_says_it_is_one():  # was "unknown format 'mxfp8'" (issue 42)
    with pytest.raises(ValueError, match=r"^autocast: dtype 'mxfp8' is the block-scaled format mxfp8_e4m3: a tensor "
                                         r"is stored in a tensor format .*lowp\.convert\(model"):
        autocast("mxfp8")


# ---------------------------------------------------------------------------------- the update rule

# pattern letters: F finite, I inf, N nan.  growth_interval 3, init 1024, factors 2 / 0.5,
# expected (scale, tracker) after each update, worked out by hand from the rule.
PATTERN = "FFFFIFFFNFFIIFFFFFF"
EXPECTED = [(1024, 1), (1024, 2), (2048, 0), (2048, 1), (1024, 0), (1024, 1), (1024, 2), (2048, 0),
            (1024, 0), (1024, 1), (1024, 2), (512, 0), (256, 0), (256, 1), (256, 2), (512, 0), (512, 1),
            (512, 2), (1024, 0)]


def test_replay_growth_interval_3():
    p = _param()
    opt = SGD([p], lr=0.25)
    s = _started(GradScaler(init_scale=1024.0, growth_interval=3), p)
    assert (s.get_scale(), s._get_growth_tracker()) == (1024.0, 0)
    for letter, want in zip(PATTERN, EXPECTED, strict=True):
        before = p.f32().copy()
        _one_step(s, opt, {"F": "finite", "I": "inf", "N": "nan"}[letter])
        assert (s.get_scale(), s._get_growth_tracker()) == want, letter
        stepped = not np.array_equal(before, p.f32())
        assert stepped == (letter == "F")
        assert s.last_step_skipped(opt) == (letter != "F")
    assert np.all(np.isfinite(p.f32()))


def test_replay_non_power_of_two_factors():
    """growth 3.0 / backoff 0.3 from 1000: each product in float64, rounded to float32."""
    rng = np.random.default_rng(7)
    kinds = rng.choice(["finite", "finite", "finite", "inf", "nan"], size=40)
    p = _param()
    opt = SGD([p], lr=0.1)
    s = _started(GradScaler(init_scale=1000.0, growth_factor=3.0, backoff_factor=0.3, growth_interval=3), p)
    ref_scale, ref_tracker = np.float32(1000.0), 0
    for kind in kinds:
        _one_step(s, opt, kind)
        if kind != "finite":
            ref_scale, ref_tracker = np.float32(np.float64(ref_scale) * 0.3), 0
        elif ref_tracker + 1 == 3:
            ref_scale, ref_tracker = np.float32(np.float64(ref_scale) * 3.0), 0
        else:
            ref_tracker += 1
        assert s.get_scale() == float(ref_scale) and s._get_growth_tracker() == ref_tracker
    # float64 products are not float32 products: 90 * 0.3 is 27 exactly, not 27.000002
    assert np.float32(np.float32(90.0) * np.float32(0.3)) != np.float32(27.0)
    s2 = _started(GradScaler(init_scale=90.0, backoff_factor=0.3), p)
    _one_step(s2, opt, "inf")
    assert s2.get_scale() == 27.0


def test_growth_refused_when_not_finite_in_float32_and_tracker_still_resets():
    p = _param()
    opt = SGD([p], lr=0.1)
    s = _started(GradScaler(init_scale=2.0**127, growth_interval=1), p)
    _one_step(s, opt, "finite")
    assert (s.get_scale(), s._get_growth_tracker()) == (2.0**127, 0)  # 2^128 is inf in float32
    s = _started(GradScaler(init_scale=2.0**126, growth_factor=3.0, growth_interval=2), p)
    _one_step(s, opt, "finite")
    _one_step(s, opt, "finite")
    assert (s.get_scale(), s._get_growth_tracker()) == (3 * 2.0**126, 0)  # 2.55e38 < float32 max


def test_update_new_scale_sets_scale_keeps_tracker():
    p = _param()
    opt = SGD([p], lr=0.1)
    s = _started(GradScaler(init_scale=8.0, growth_interval=5), p)
    _one_step(s, opt, "finite")
    _one_step(s, opt, "finite")
    s.update(0.1)  # no inf check needed for a manual scale
    assert s.get_scale() == float(np.float32(0.1)) and s._get_growth_tracker() == 2
    s.update(tensor(4.0))
    assert s.get_scale() == 4.0
    for bad in (0.0, -1.0, math.inf, math.nan, "2", True, tensor([1.0, 2.0])):
        with pytest.raises(ValueError):
            s.update(bad)
    with pytest.raises(ValueError, match="min_scale"):
        s.update(2.0**-30)


# ---------------------------------------------------------------------------------- unscale numerics


@pytest.mark.parametrize("backend", ["numpy", CupyBackend(xp=np)], ids=["numpy", "cupy-stand-in"])
def test_unscale_is_a_float32_multiply_by_the_float64_reciprocal(backend):
    be = get_backend(backend)
    g = (np.random.default_rng(0).standard_normal(500) * 1000).astype(np.float32)
    p = _param(g.size, backend=be)
    opt = SGD([p], lr=0.1)
    s = _started(GradScaler(init_scale=1000.0), p)
    _set_grad(p, g)
    s.unscale_(opt)
    want = np.float32(1 / np.float64(1000)) * g
    got = be.to_numpy(p.grad.f32())
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    divided = g / np.float32(1000)
    assert np.sum(divided != want) > 100  # a divide would give other numbers for many g


def test_unscale_with_master_weights_lands_on_float32_masters():
    h = np.array([3.0, -2048.0, 0.0999755859375, 6.1035156e-05], dtype=F16)  # float16 values
    p = tensor(np.zeros(4), "float16", requires_grad=True, name="weight")
    opt = Adam([p], lr=1e-3, master_weights=True)
    s = _started(GradScaler(init_scale=1000.0), p)
    _set_grad(p, h)
    s.unscale_(opt)
    m = opt.master[0]
    assert m.grad.fmt.name == "float32"
    want = h.astype(np.float32) * np.float32(1 / np.float64(1000))
    np.testing.assert_array_equal(m.grad.f32().view(np.uint32), want.view(np.uint32))
    np.testing.assert_array_equal(p.grad.numpy(), h)  # the float16 grad keeps its scaled value
    s.step(opt)  # sync_master_grads must not overwrite the unscaled master grads
    s.update()
    assert not s.last_step_skipped(opt)
    assert np.all(p.f32() != 0)


def test_unscale_without_masters_rounds_into_the_grad_format_and_hooks_see_it():
    h = np.array([1000.0, 3.0, 7.0], dtype=F16)
    p = tensor(np.zeros(3), "float16", requires_grad=True, name="weight")
    opt = SGD([p], lr=0.1)
    s = _started(GradScaler(init_scale=1000.0), p)
    _set_grad(p, h)
    seen = []
    with hooked(lambda ev: seen.append((ev.op, ev.direction, ev.target, ev.fmt.name))):
        s.unscale_(opt)
    want = (h.astype(np.float32) * np.float32(1 / np.float64(1000))).astype(F16)
    np.testing.assert_array_equal(p.grad.numpy(), want)
    assert p.grad.fmt.name == "float16"
    assert seen == [("unscale", "backward", "weight", "float16")]


def test_first_step_trap_float16_loss_times_default_scale_is_inf():
    w = tensor([1.0, 2.0], "float16", requires_grad=True, name="weight")
    opt = SGD([w], lr=0.1)
    s = GradScaler()
    assert s.get_scale() == 65536.0
    loss = ops.sum(w * np.float32(0.5))  # 1.5, float16
    scaled = s.scale(loss)
    assert scaled.fmt.name == "float16" and scaled.item() == math.inf  # 1.5 * 2^16 > 65504
    scaled.backward()
    assert np.all(np.isinf(w.grad.f32()))
    s.step(opt)
    s.update()
    assert s.last_step_skipped(opt)
    np.testing.assert_array_equal(w.f32(), [1.0, 2.0])
    assert s.get_scale() == 32768.0


def test_inf_in_any_parameter_of_an_optimizer_skips_it():
    a, b, c = _param(), _param(), _param()
    opt = SGD([a, b, c], lr=0.5)
    s = _started(GradScaler(init_scale=2.0), a)
    _set_grad(a, [np.nan, 0.0, 0.0])
    _set_grad(b, [2.0, 2.0, 2.0])  # finite after the bad one: the verdict must stick
    s.step(opt)
    s.update()
    assert s.last_step_skipped(opt) and s.get_scale() == 1.0
    np.testing.assert_array_equal(b.f32(), [1.0, 1.0, 1.0])  # c had no grad: ignored


def test_skipped_step_leaves_the_unscaled_grads():
    p = _param()
    opt = SGD([p], lr=0.1)
    s = _started(GradScaler(init_scale=4.0), p)
    _set_grad(p, [8.0, np.inf, 2.0])
    assert s.step(opt) is None
    np.testing.assert_array_equal(p.grad.f32(), [2.0, np.inf, 0.5])
    np.testing.assert_array_equal(p.f32(), [1.0, 1.0, 1.0])


def test_scale_lists_and_tuples():
    p = _param()
    s = GradScaler(init_scale=4.0)
    a, b = ops.sum(p), ops.mean(p)
    out = s.scale((a, b))
    assert isinstance(out, tuple) and [t.item() for t in out] == [12.0, 4.0]
    out = s.scale([a])
    assert isinstance(out, list) and out[0].item() == 12.0
    assert [t.item() for t in s.scale(iter([a]))] == [12.0]
    for bad in ("loss", 3.0, [a, 1.0]):
        with pytest.raises(ValueError, match="Tensor"):
            s.scale(bad)


# ---------------------------------------------------------------------------------- several optimizers


def test_two_optimizers_inf_in_one_skips_only_it_and_backs_off_once():
    p1, p2 = _param(), _param()
    o1, o2 = SGD([p1], lr=0.5), SGD([p2], lr=0.5)
    s = _started(GradScaler(init_scale=1024.0, growth_interval=2), p1)
    _set_grad(p1, [1024.0, 2048.0, 0.0])
    _set_grad(p2, [1.0, np.inf, 1.0])
    s.step(o1)
    s.step(o2)
    s.update()
    np.testing.assert_array_equal(p1.f32(), [0.5, 0.0, 1.0])  # 1 - 0.5 * [1, 2, 0]
    np.testing.assert_array_equal(p2.f32(), [1.0, 1.0, 1.0])
    assert (s.last_step_skipped(o1), s.last_step_skipped(o2)) == (False, True)
    assert (s.get_scale(), s._get_growth_tracker()) == (512.0, 0)  # one backoff, not two
    for _ in range(2):  # both clean: one tracker increment per update
        _set_grad(p1, [1.0, 1.0, 1.0])
        _set_grad(p2, [1.0, 1.0, 1.0])
        s.step(o1)
        s.step(o2)
        s.update()
    assert (s.get_scale(), s._get_growth_tracker()) == (1024.0, 0)


# ---------------------------------------------------------------------------------- the floor


def test_default_min_scale_floor_keeps_parameters_finite():
    p = _param()
    opt = SGD([p], lr=0.1)
    s = _started(GradScaler(), p)
    assert s.min_scale == 2.0**-24
    scales = []
    for _ in range(45):
        _one_step(s, opt, "inf")
        scales.append(s.get_scale())
    assert scales[38] == 2.0**-23 and scales[39] == 2.0**-24  # 2^16 halved 40 times
    assert all(x == 2.0**-24 for x in scales[39:])
    # at the floor, a backward at scale 2^-24 gives zeros where PyTorch's scale-0 trap would
    # give NaN; inf steps are still skipped
    _set_grad(p, [0.0, 0.0, 0.0])
    s.step(opt)
    s.update()
    assert np.all(np.isfinite(p.f32())) and np.all(np.isfinite(p.grad.f32()))
    np.testing.assert_array_equal(p.f32(), [1.0, 1.0, 1.0])


def test_min_scale_zero_reproduces_pytorch_decay_and_nan_trap():
    p = _param()
    opt = SGD([p], lr=0.1)
    s = _started(GradScaler(init_scale=1.0, min_scale=0.0), p)
    for k in range(1, 151):
        _one_step(s, opt, "inf")
        if k == 149:
            assert s.get_scale() == 2.0**-149  # float32's smallest subnormal
    assert s.get_scale() == 0.0  # 2^-150 rounds (ties to even) to 0
    # the trap: a backward at scale 0 gives zero grads; unscaling multiplies by 1/0 = inf
    _set_grad(p, [0.0, 0.0, 0.0])
    s.step(opt)
    s.update()
    assert not s.last_step_skipped(opt)  # the check looked at the zeros
    assert np.all(np.isnan(p.f32()))
    assert s.get_scale() == 0.0  # and 0 * growth stays 0 forever


# ---------------------------------------------------------------------------------- errors


def test_stage_errors():
    p = _param()
    opt = SGD([p], lr=0.1)
    s = GradScaler(init_scale=8.0)
    _set_grad(p, [1.0, 1.0, 1.0])
    for call in (lambda: s.unscale_(opt), lambda: s.step(opt), lambda: s.update()):
        with pytest.raises(RuntimeError, match="scaler.scale"):
            call()  # before the first scale()
    _started(s, p)
    with pytest.raises(RuntimeError, match="No inf checks were recorded prior to update"):
        s.update()
    s.unscale_(opt)
    with pytest.raises(RuntimeError, match="already been called on this optimizer"):
        s.unscale_(opt)
    s.step(opt)
    with pytest.raises(RuntimeError, match="after step"):
        s.unscale_(opt)
    with pytest.raises(RuntimeError, match=r"step\(\) has already been called"):
        s.step(opt)
    s.update()
    _set_grad(p, [1.0, 1.0, 1.0])
    s.unscale_(opt)  # a new iteration: allowed again
    s.step(opt)
    s.update()
    with pytest.raises(RuntimeError, match="Closure"):
        s.step(opt, closure=lambda: None)
    p.grad = None
    with pytest.raises(RuntimeError, match="No inf checks were recorded for this optimizer"):
        s.step(opt)
    with pytest.raises(TypeError, match="fpsim optimizer"):
        _started(GradScaler(), p).unscale_(object())
    with pytest.raises(ValueError, match="never called"):
        s.last_step_skipped(SGD([_param()], lr=0.1))


@pytest.mark.parametrize("kwargs", [
    {"growth_factor": 1.0}, {"growth_factor": 0.5}, {"growth_factor": math.inf},
    {"backoff_factor": 1.0}, {"backoff_factor": 0.0}, {"backoff_factor": -0.5}, {"backoff_factor": 2.0},
    {"init_scale": 0.0}, {"init_scale": -1.0}, {"init_scale": math.inf}, {"init_scale": math.nan},
    {"growth_interval": 0}, {"growth_interval": 1.5}, {"growth_interval": True},
    {"min_scale": -1.0}, {"min_scale": math.nan}, {"init_scale": 1.0, "min_scale": 2.0},
])
def test_constructor_validation(kwargs):
    with pytest.raises(ValueError):
        GradScaler(**kwargs)


def test_setters_validate():
    s = GradScaler()
    s.set_growth_factor(3.0)
    s.set_backoff_factor(0.25)
    s.set_growth_interval(7)
    assert (s.get_growth_factor(), s.get_backoff_factor(), s.get_growth_interval()) == (3.0, 0.25, 7)
    for setter, bad in ((s.set_growth_factor, 1.0), (s.set_backoff_factor, 1.0), (s.set_growth_interval, 0)):
        with pytest.raises(ValueError):
            setter(bad)


# ---------------------------------------------------------------------------------- disabled, state


def test_disabled_scaler():
    p = _param()
    opt = SGD([p], lr=0.5)
    s = GradScaler(enabled=False)
    loss = ops.sum(p)
    assert s.scale(loss) is loss
    assert s.get_scale() == 1.0 and s._get_growth_tracker() == 0 and not s.is_enabled()
    _set_grad(p, [2.0, np.inf, 4.0])
    s.unscale_(opt)
    np.testing.assert_array_equal(p.grad.f32(), [2.0, np.inf, 4.0])
    s.step(opt)  # just steps, inf and all
    s.update()
    np.testing.assert_array_equal(p.f32(), [0.0, -np.inf, -1.0])
    assert not s.last_step_skipped(opt)
    assert s.state_dict() == {}
    s.load_state_dict({})  # a no-op when disabled
    with pytest.raises(RuntimeError, match="empty"):
        GradScaler().load_state_dict({})


def test_state_dict_round_trip_and_resume(tmp_path):
    p = _param()
    opt = SGD([p], lr=0.1)
    a = _started(GradScaler(init_scale=1000.0, growth_factor=3.0, backoff_factor=0.3, growth_interval=3), p)
    for k in "FFFIFF":
        _one_step(a, opt, "finite" if k == "F" else "inf")
    sd = a.state_dict()
    assert list(sd) == ["scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"]
    assert sd == {"scale": float(np.float32(np.float64(np.float32(3000.0)) * 0.3)), "growth_factor": 3.0,
                  "backoff_factor": 0.3, "growth_interval": 3, "_growth_tracker": 2}
    assert type(sd["scale"]) is float and type(sd["_growth_tracker"]) is int
    b = GradScaler()
    b.load_state_dict(sd)
    assert b.state_dict() == sd and b.get_scale() == sd["scale"]
    q = _param()
    _started(b, q)
    ob = SGD([q], lr=0.1)
    for k in "FIFFFF":  # both continue identically
        _one_step(a, opt, "finite" if k == "F" else "inf")
        _one_step(b, ob, "finite" if k == "F" else "inf")
        assert a.state_dict() == b.state_dict()
    # through a checkpoint file (.npz, no pickle)
    model = nn.Linear(2, 2, seed=0)
    from fpsim import checkpoint

    path = checkpoint.save(tmp_path / "ck.npz", model, scaler=a)
    c = GradScaler()
    checkpoint.load(path, model, scaler=c)
    assert c.state_dict() == a.state_dict()


def test_load_state_dict_bad_input_leaves_scaler_unchanged():
    s = GradScaler(init_scale=64.0)
    good = s.state_dict()
    bads = [{"scale": 2.0}, {**good, "extra": 1}, {**good, "scale": -1.0}, {**good, "scale": math.nan},
            {**good, "growth_factor": 1.0}, {**good, "backoff_factor": 1.5}, {**good, "growth_interval": 0},
            {**good, "_growth_tracker": -1}, {**good, "_growth_tracker": 1.5}, {**good, "scale": 0.0}]
    for bad in bads:
        with pytest.raises(ValueError):
            s.load_state_dict(bad)
        assert s.state_dict() == good
    z = GradScaler(min_scale=0.0)
    z.load_state_dict({**good, "scale": 0.0})  # PyTorch's decayed state loads with no floor
    assert z.get_scale() == 0.0


def test_static_scaler():
    p = _param()
    opt = SGD([p], lr=0.5)
    s = _started(StaticScaler(256.0), p)
    for kind in ["finite"] * 5 + ["inf", "nan"] + ["finite"] * 3:
        before = p.f32().copy()
        _set_grad(p, _grads_for(kind) * 256)
        s.step(opt)
        s.update()
        assert s.get_scale() == 256.0 and s._get_growth_tracker() == 0
        assert s.last_step_skipped(opt) == (kind != "finite")
        if kind == "finite":
            np.testing.assert_array_equal(p.f32(), before - np.float32(0.25))  # 0.5 * (128 / 256)
        else:
            np.testing.assert_array_equal(p.f32(), before)
    sd = s.state_dict()
    assert sd["growth_factor"] == 1.0 and sd["backoff_factor"] == 1.0 and sd["scale"] == 256.0
    with pytest.raises(RuntimeError, match="never changes"):
        s.set_growth_factor(2.0)
    with pytest.raises(ValueError, match="growth factor"):
        GradScaler().load_state_dict(sd)  # a static state is not a dynamic scaler's
    t = StaticScaler()
    t.load_state_dict(GradScaler(init_scale=2048.0).state_dict())  # freeze a scale a dynamic run found
    assert t.get_scale() == 2048.0 and t.get_growth_factor() == 1.0
    assert StaticScaler(enabled=False).get_scale() == 1.0
    for bad in (0.0, -4.0, math.inf):
        with pytest.raises(ValueError):
            StaticScaler(bad)


def test_exported_from_package():
    assert fpsim.autocast is autocast and fpsim.GradScaler is GradScaler and fpsim.amp.StaticScaler is StaticScaler


# ---------------------------------------------------------------------------------- against PyTorch


def _torch_replay(torch, kinds, **kw):
    """Step a float32 parameter through torch.amp.GradScaler("cpu") and fpsim's GradScaler with
    the same gradients; after every update compare scale, tracker and the unscaled grads."""
    n = 5
    rng = np.random.default_rng(3)
    tp = torch.zeros(n, requires_grad=True)
    topt = torch.optim.SGD([tp], lr=0.01)
    ts = torch.amp.GradScaler("cpu", **kw)
    ts.scale(tp.sum())
    fp = _param(n, value=0.0)
    fopt = SGD([fp], lr=0.01)
    fs = _started(GradScaler(min_scale=0.0, **kw), fp)
    for i, kind in enumerate(kinds):
        g = (rng.standard_normal(n) * 100).astype(np.float32)
        if kind == "inf":
            g[i % n] = np.inf
        elif kind == "nan":
            g[i % n] = np.nan
        tp.grad = torch.from_numpy(g.copy())
        _set_grad(fp, g)
        ts.step(topt)
        fs.step(fopt)
        np.testing.assert_array_equal(fp.grad.f32(), tp.grad.numpy())  # the unscale multiply, bit for bit
        ts.update()
        fs.update()
        assert fs.get_scale() == ts.get_scale(), (i, kind)
        assert fs._get_growth_tracker() == ts._get_growth_tracker(), (i, kind)
        assert fs.last_step_skipped(fopt) == (kind != "finite")
    return fs, ts


@pytest.mark.parametrize("kw", [
    {"init_scale": 2.0**16, "growth_interval": 3},
    {"init_scale": 1000.0, "growth_factor": 3.0, "backoff_factor": 0.3, "growth_interval": 3},
])
def test_scale_and_tracker_agree_with_torch(kw):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    kinds = rng.choice(["finite"] * 6 + ["inf", "nan"], size=120)
    fs, ts = _torch_replay(torch, kinds, **kw)
    assert fs.state_dict() == ts.state_dict()
    # each loads the other's state
    g = GradScaler()
    g.load_state_dict(ts.state_dict())
    assert g.state_dict() == ts.state_dict()
    t2 = torch.amp.GradScaler("cpu")
    t2.load_state_dict(fs.state_dict())
    assert t2.state_dict() == fs.state_dict()


def test_decay_to_zero_agrees_with_torch():
    torch = pytest.importorskip("torch")
    fs, ts = _torch_replay(torch, ["inf"] * 152, init_scale=1.0, growth_interval=3)
    assert fs.get_scale() == ts.get_scale() == 0.0
