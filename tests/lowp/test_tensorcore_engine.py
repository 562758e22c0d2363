"""Tensor-core accumulation inside the engine: ops.matmul / linear (and autocast's), the fp8 Linear and
BlockLinear run their GEMMs as a tensor core, checked against MMA-Sim's result rounded by ml_dtypes;
the monitor counts what the accumulator lost, one event per GEMM."""

import ml_dtypes
import numpy as np
import pytest
from helpers import exact_matmul_f32, small_task
from support.tensorcore_reference import mmasim

import fpsim
from fpsim import nn, ops
from fpsim import tensorcore as tc
from fpsim.formats import quantize
from fpsim.lowp import BlockLinear, BlockScaling, DelayedScaling, Fp8Linear
from fpsim.ops.arith import tensor_core_gemm


def _pos(rng, shape, dt):
    return np.abs(rng.standard_normal(shape)).astype(dt)


def test_matmul_forward_and_gradients_as_the_tensor_core():
    rng = np.random.default_rng(0)
    a, b = _pos(rng, (4, 300), ml_dtypes.bfloat16), _pos(rng, (300, 3), ml_dtypes.bfloat16)
    g = rng.standard_normal((4, 3)).astype(ml_dtypes.bfloat16)
    ta = fpsim.tensor(a.astype(np.float32), "bf16", requires_grad=True)
    tb = fpsim.tensor(b.astype(np.float32), "bf16", requires_grad=True)
    events = []
    with tc.emulate("ampere"), fpsim.state.hooked(events.append):
        y = ops.matmul(ta, tb)
    y.backward(fpsim.tensor(g.astype(np.float32), "bf16"))  # outside the block: the forward's choice holds
    z = np.zeros((4, 3), np.float32)
    want = mmasim("ampere", a, b, z, "bfloat16", "bfloat16").astype(ml_dtypes.bfloat16)
    assert np.array_equal(y.numpy().view(np.uint16), want.view(np.uint16))
    want_ga = mmasim("ampere", g, np.ascontiguousarray(b.T), np.zeros((4, 300), np.float32), "bfloat16", "bfloat16")
    assert np.array_equal(ta.grad.numpy().view(np.uint16), want_ga.astype(ml_dtypes.bfloat16).view(np.uint16))
    acc = [e for e in events if e.op == "matmul.accumulate"]  # the float32 accumulator itself
    assert len(acc) == 1 and np.array_equal(acc[0].stored, mmasim("ampere", a, b, z, "bfloat16", "bfloat16"))
    blas = a.astype(np.float32) @ b.astype(np.float32)  # truncation lost more than BLAS's rounding
    assert np.all(acc[0].stored < blas)


def test_autocast_matmul_and_linear_run_on_the_tensor_core():
    rng = np.random.default_rng(1)
    x, w = _pos(rng, (5, 256), np.float32), _pos(rng, (6, 256), np.float32)
    bias = rng.standard_normal(6).astype(np.float32)
    with fpsim.autocast("float16"), tc.emulate("hopper"):
        y = ops.matmul(fpsim.tensor(x), fpsim.tensor(w.T.copy()))
        lin = ops.linear(fpsim.tensor(x), fpsim.tensor(w), fpsim.tensor(bias))
    x16, w16 = x.astype(np.float16), w.astype(np.float16)
    d = mmasim("hopper", x16, np.ascontiguousarray(w16.T), np.zeros((5, 6), np.float32), "float16", "float16")
    assert np.array_equal(y.numpy(), d.astype(np.float16))
    # linear: the bias (narrowed to float16 by autocast) added to the float32 result, one rounding
    assert np.array_equal(lin.numpy(), (d + bias.astype(np.float16).astype(np.float32)).astype(np.float16))


def test_float32_operands_keep_the_exact_sum():
    """Hopper has no float32 x float32 instruction: the product is the engine's own, the exact sum
    rounded once."""
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((3, 40)).astype(np.float32), rng.standard_normal((40, 2)).astype(np.float32)
    with tc.emulate("hopper"):
        y = ops.matmul(fpsim.tensor(a), fpsim.tensor(b))
    assert np.array_equal(y.numpy(), exact_matmul_f32(a, b))


def test_monitor_counts_what_the_accumulator_lost():
    rng = np.random.default_rng(3)
    a, b = _pos(rng, (8, 1024), np.float16), _pos(rng, (1024, 8), np.float16)
    with fpsim.monitor() as m, tc.emulate("volta"):
        ops.matmul(fpsim.tensor(a), fpsim.tensor(b))
    d = mmasim("volta", a, b, np.zeros((8, 8), np.float32), "float16", "float16")
    exact = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    counts = m.counts
    key = [k for k in counts if k[2] == "matmul.accumulate"]
    n, inexact = counts[key[0]][:2]  # COUNTERS: n, inexact, ...
    assert len(key) == 1 and n == 64
    assert inexact == int(np.count_nonzero(d != exact)) > 0


def test_fp8_linear_on_hopper_tensor_cores():
    rng = np.random.default_rng(4)
    layer = nn.Linear(256, 8)
    fp8 = Fp8Linear(layer, DelayedScaling(tensor_core="hopper"))
    x = np.abs(rng.standard_normal((4, 256))).astype(np.float32)
    y = fp8(fpsim.tensor(x))
    # the first step runs at scale 1: the fp8 numbers are x and W cast to e4m3
    x8 = x.astype(ml_dtypes.float8_e4m3fn)
    w8 = layer.weight.numpy().astype(ml_dtypes.float8_e4m3fn)
    d = mmasim("hopper", x8, np.ascontiguousarray(w8.T), np.zeros((4, 8), np.float32), "float8_e4m3fn",
               "float8_e4m3fn")
    assert np.array_equal(y.numpy(), d + layer.bias.numpy())


def test_fp8_recipe_checks_the_architecture():
    with pytest.raises(ValueError, match="ampere tensor cores do not take float8_e4m3fn"):
        DelayedScaling(tensor_core="ampere")
    with pytest.raises(ValueError, match="unknown tensor-core architecture"):
        DelayedScaling(tensor_core="h100")


def test_block_linear_promotes_every_block_with_its_scales():
    rng = np.random.default_rng(5)
    layer = nn.Linear(256, 4, bias=False)
    r = BlockScaling(format="fp8_block", weight_block=(128, 128), tensor_core="hopper")
    x = rng.standard_normal((3, 256)).astype(np.float32)
    y = BlockLinear(layer, r)(fpsim.tensor(x))
    qx = quantize(x, "fp8_block", -1)
    qw = quantize(layer.weight.numpy(), "fp8_block", -1, block=(128, 128))
    sx = qx.stats.scale.reshape(3, 2).astype(np.float32)  # one decode scale per 128 of K
    sw = qw.stats.scale.reshape(2).astype(np.float32)  # one 128 x 128 tile along K (4 rows: one tile)
    total = np.zeros((3, 4), np.float32)
    for j in range(2):
        k = slice(128 * j, 128 * (j + 1))
        part = mmasim("hopper", qx.elements[:, k], np.ascontiguousarray(qw.elements[:, k].T),
                      np.zeros((3, 4), np.float32), "float8_e4m3fn", "float8_e4m3fn")
        total += part * (sx[:, j:j + 1] * sw[j])
    assert np.array_equal(y.numpy(), total)


def test_block_recipe_tensor_core_checks():
    with pytest.raises(ValueError, match="fp8_block formats"):
        BlockScaling(format="mxfp8_e4m3", tensor_core="hopper")
    with pytest.raises(ValueError, match="promoted at every block"):
        BlockScaling(format="fp8_block", tensor_core="hopper", promote_every=256)
    with pytest.raises(ValueError, match="accumulate must be None"):
        BlockScaling(format="fp8_block", tensor_core="hopper", accumulate=13)


def test_a_model_trains_as_on_an_h100():
    rng = np.random.default_rng(6)
    fpsim.manual_seed(0)
    net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = fpsim.optim.SGD(net.parameters(), lr=0.05)
    x = fpsim.tensor(rng.standard_normal((64, 32)))
    t = fpsim.tensor(rng.standard_normal((64, 1)))
    losses = []
    for _ in range(20):
        with fpsim.autocast("bfloat16"), tc.emulate("hopper"):
            loss = ops.mse_loss(net(x), t)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert np.isfinite(losses).all() and losses[-1] < 0.9 * losses[0]


def test_tracer_does_not_blame_the_accumulator_for_an_inf_it_was_given():
    a = np.ones((2, 32), np.float16)
    a[0, 0] = np.inf
    with fpsim.trace_nonfinite() as tr, tc.emulate("hopper"):
        x = fpsim.tensor(a.astype(np.float32), "float16")
        y = ops.matmul(x, fpsim.tensor(np.ones((32, 2), np.float32), "float16"))
    assert np.isinf(y.numpy()[0]).all()
    assert tr.first_nonfinite() is None  # passed on, not made: by neither matmul.accumulate nor matmul


def test_both_cpu_backends_give_the_same_bits():
    rng = np.random.default_rng(7)
    a = rng.standard_normal((4, 200)).astype(np.float32)
    b = rng.standard_normal((200, 3)).astype(np.float32)
    got = []
    for backend in ("numpy", "numpy-f32"):
        x = fpsim.tensor(a, "bf16", backend=backend, requires_grad=True)
        w = fpsim.tensor(b, "bf16", backend=backend, requires_grad=True)
        with tc.emulate("hopper"):
            y = ops.matmul(x, w)
        y.sum().backward()
        got.append([t.numpy().view(np.uint16) for t in (y, x.grad, w.grad)])
    for u, v in zip(*got):
        assert np.array_equal(u, v)
    with pytest.raises(ValueError, match="numpy backends"):
        tensor_core_gemm(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32), fpsim.get_format("bf16"),
                             fpsim.get_format("bf16"), _FakeDevice(), ("hopper", None), "matmul", "forward")


class _FakeDevice:
    name = "cupy"


def test_recipes_fp8_hopper_and_fp8_deepseek_accumulate_on_hopper():
    from fpsim.experiments import get_recipe, train

    hopper, deepseek = get_recipe("fp8-hopper"), get_recipe("fp8-deepseek")
    assert hopper.layers.tensor_core == "hopper" and hopper.layers.fwd_format == "float8_e4m3fn"
    assert deepseek.layers.tensor_core == "hopper" and deepseek.layers.format == "fp8_block"
    assert deepseek.layers.weight_block == (128, 128) and deepseek.layers.k_block() == 128  # promotion every 128
    task = small_task(steps=2)
    for recipe, op in ((hopper, "fp8.linear.accumulate"), (deepseek, "block.linear.accumulate")):
        with fpsim.monitor() as m:
            r = train(task, recipe)
        assert np.isfinite(r.losses).all()
        n_inexact = sum(v[1] for k, v in m.counts.items() if k[2] == op)
        assert n_inexact > 0  # the truncating accumulator lost something, and the monitor counted it
