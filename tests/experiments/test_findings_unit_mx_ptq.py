"""The findings unit scaling, the MX LayerNorm instability proxy and PTQ against training
length: the scaled ops and the fixed fp8 scale against float64 references, the
verdict rules on fixed inputs (their quick runs are tested in experiments/test_findings.py, with every finding's)."""

import math

import numpy as np
import pytest

import fpsim
from fpsim import nn
from fpsim.backend import get_backend
from fpsim.experiments.findings import mxlayernorm, ptq, unitscaling
from fpsim.experiments.studentteacher import ResidualMLP, StudentTeacherTask
from fpsim.experiments.tasks import ReferenceTask
from fpsim.experiments.tinygpt import TinyGPTTask
from fpsim.lowp import FixedScaling, ScalingState

# ---- unit scaling: the scaled ops against float64 ------------------------------------------------


def _t(a, fmt="float32", grad=True):
    return fpsim.tensor(a, fmt, requires_grad=grad)


@pytest.mark.parametrize("fmt", ["float32", "bfloat16"])
def test_scaled_multiplies_forward_and_backward_by_separate_factors(fmt):
    rng = np.random.default_rng(0)
    x = _t(rng.standard_normal(64), fmt)
    g = rng.standard_normal(64)
    y = nn.unit.scaled(x, 0.3, 7.0)
    (y * _t(g, grad=False)).sum().backward()
    x64 = np.asarray(x.f32(), np.float64)
    want = (x64 * float(np.float32(0.3))).astype(np.float32)
    if fmt == "bfloat16":  # one rounding of the float32 product into bfloat16 (ml_dtypes from float32 is exact)
        import ml_dtypes

        want = want.astype(ml_dtypes.bfloat16).astype(np.float32)
    assert y.fmt.name == fmt and np.array_equal(y.f32(), want)
    g32 = g.astype(np.float32)
    if fmt == "bfloat16":  # the gradient reaching y was rounded into y's gradient format first
        g32 = g32.astype(ml_dtypes.bfloat16).astype(np.float32)
    gx = g32 * np.float32(7.0)
    if fmt == "bfloat16":
        gx = gx.astype(ml_dtypes.bfloat16)
    assert np.array_equal(x.grad.f32(), np.asarray(gx, np.float32))
    with pytest.raises(ValueError, match="bwd"):
        nn.unit.scaled(x, 1.0, 0.0)
    with pytest.raises(ValueError, match="fwd"):
        nn.unit.scaled(x, math.inf)
    with pytest.raises(TypeError, match="x must be a Tensor"):
        nn.unit.scaled(np.ones(3), 1.0)


def test_unit_linear_against_float64():
    rng = np.random.default_rng(1)
    layer = nn.UnitLinear(48, 24, seed=3)
    layer.bias.data = fpsim.tensor(rng.standard_normal(24), "float32").data
    x = _t(rng.standard_normal((100, 48)))
    g = rng.standard_normal((100, 24))
    y = layer(x)
    (y * _t(g, grad=False)).sum().backward()
    w = np.asarray(layer.linear.weight.f32(), np.float64)
    b = np.asarray(layer.bias.f32(), np.float64)
    x64 = np.asarray(x.f32(), np.float64)
    g64 = np.asarray(g.astype(np.float32), np.float64)
    np.testing.assert_allclose(y.f32(), x64 @ w.T / math.sqrt(48) + b, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(x.grad.f32(), g64 @ w / math.sqrt(24), rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(layer.linear.weight.grad.f32(), g64.T @ x64, rtol=2e-6, atol=2e-5)
    np.testing.assert_allclose(layer.bias.grad.f32(), g64.sum(0), rtol=2e-6, atol=2e-5)
    # the weights: N(0, 1) drawn by fpsim's normal (Box-Muller on the seed's integers; its own test
    # is in test_numerics) after the bias-free Linear's own draw; bias zeros
    from fpsim.numerics.random import normal

    rng3 = np.random.default_rng(3)
    rng3.uniform(size=(24, 48))
    assert np.array_equal(nn.UnitLinear(48, 24, seed=3).linear.weight.f32(), normal(rng3, (24, 48)))
    assert not nn.UnitLinear(48, 24, seed=3).bias.f32().any()


@pytest.mark.parametrize("name", ["tanh", "gelu"])
def test_unit_gains_against_a_float64_trapezoid(name):
    z = np.linspace(-14, 14, 400_001)
    phi = np.exp(-z * z / 2) / math.sqrt(2 * math.pi)
    if name == "tanh":
        f, df = np.tanh(z), 1 - np.tanh(z) ** 2
    else:  # PyTorch's gelu(approximate="tanh"), what ops.gelu computes; its derivative by float64 differences
        def gelu(v):
            return 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)))

        f, df = gelu(z), (gelu(z + 1e-5) - gelu(z - 1e-5)) / 2e-5
    fwd, bwd = nn.unit.unit_gain(name)
    assert fwd == pytest.approx(1 / math.sqrt(np.trapezoid(f * f * phi, z)), rel=1e-8)
    assert bwd == pytest.approx(1 / math.sqrt(np.trapezoid(df * df * phi, z)), rel=1e-8 if name == "tanh" else 1e-7)
    with pytest.raises(ValueError, match="unknown activation 'relu'"):
        nn.unit.unit_gain("relu")


def test_unit_mlp_has_unit_variance_activations_and_gradients_at_init():
    """Layer by layer, with unit-variance inputs and output gradients: the float64 recomputation
    of each layer's output and input gradient agrees with fpsim's, and both have variance near 1
    (the weight gradient, left unscaled, has std near sqrt(batch))."""
    rng = np.random.default_rng(0)
    model = nn.UnitMLP([64, 256, 256, 64], "tanh", seed=1)
    h = rng.standard_normal((4096, 64))
    for layer in model:
        x = _t(h)
        y = layer(x)
        g = rng.standard_normal(y.shape).astype(np.float32)
        (y * _t(g, grad=False)).sum().backward()
        x64 = np.asarray(x.f32(), np.float64)
        if isinstance(layer, nn.UnitLinear):
            w = np.asarray(layer.linear.weight.f32(), np.float64)
            y64, gx64 = x64 @ w.T / math.sqrt(w.shape[1]), g @ w / math.sqrt(w.shape[0])
            assert np.std(layer.linear.weight.grad.f32()) / math.sqrt(4096) == pytest.approx(1, abs=0.1)
        else:
            a, b = nn.unit.unit_gain("tanh")
            y64, gx64 = a * np.tanh(x64), b * g * (1 - np.tanh(x64) ** 2)
        np.testing.assert_allclose(y.f32(), y64, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(x.grad.f32(), gx64, rtol=1e-5, atol=1e-5)
        assert np.var(y64) == pytest.approx(1, abs=0.06) and np.var(gx64) == pytest.approx(1, abs=0.06)
        h = y.f32()


def test_unit_mse_loss_gradient_is_the_sum_form_over_sqrt8():
    rng = np.random.default_rng(2)
    p, t = rng.standard_normal((16, 8)), rng.standard_normal((16, 8))
    pred = _t(p)
    loss = nn.unit_mse_loss(pred, _t(t, grad=False))
    loss.backward()
    p64, t64 = np.float32(p).astype(np.float64), np.float32(t).astype(np.float64)
    assert float(loss.f32()) == pytest.approx(((p64 - t64) ** 2).mean(), rel=1e-6)
    np.testing.assert_allclose(pred.grad.f32(), 2 * (p64 - t64) / math.sqrt(8), rtol=1e-6)


def test_unit_ce_logits_make_the_cross_entropy_gradient_unit_scaled():
    rng = np.random.default_rng(3)
    n, v = 40, 11
    z = rng.standard_normal((n, v)).astype(np.float32)
    t = rng.integers(0, v, n)
    logits = _t(z)
    loss = nn.cross_entropy(nn.unit.unit_ce_logits(logits), t)
    loss.backward()
    z64 = z.astype(np.float64)
    p = np.exp(z64 - z64.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    assert float(loss.f32()) == pytest.approx(-np.log(p[np.arange(n), t]).mean(), rel=1e-6)
    p[np.arange(n), t] -= 1
    np.testing.assert_allclose(logits.grad.f32(), p * v / math.sqrt(v - 1), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="unit_ce_logits"):
        nn.unit.unit_ce_logits(_t(np.ones(3)))


def test_unit_scale_swaps_every_linear_and_activation_of_the_tiny_gpt():
    task = TinyGPTTask()
    base = task.model(0)
    model = nn.unit.unit_scale_(task.model(0), 0)
    kinds = [type(m).__name__ for _, m in model.named_modules()]
    n_lin = sum(type(m) is nn.Linear for _, m in base.named_modules())
    assert kinds.count("UnitLinear") == n_lin and kinds.count("Linear") == n_lin  # each UnitLinear holds one
    assert kinds.count("UnitActivation") == task.n_layers and "GELU" not in kinds
    # at init the unit-scaled GPT's logits have about unit variance
    logits = task.logits_and_targets(model, task.batch_at(0))[0]
    assert 0.5 < float(np.std(logits.f32())) < 2


# ---- the fixed fp8 scale -------------------------------------------------------------------------


def test_fixed_scaling_never_moves_the_scale():
    st = ScalingState("x", "float8_e4m3fn", FixedScaling())
    x = np.float32([1e-4, 3.0, 1000.0, -0.0078125])
    codes = st.round_scaled(x, get_backend("numpy"))
    st.update()
    assert st.scale == 1 and st.amax == 1000.0
    # scale 1: e4m3fn saturates 1000 to 448 and flushes 1e-4 (below half of 2^-9) to 0
    assert np.array_equal(np.asarray(codes, np.float32), np.float32([0.0, 3.0, 448.0, -0.0078125]))
    assert st.counts["saturated"] == 1 and st.counts["underflow"] == 1
    assert ScalingState("y", "float8_e5m2", FixedScaling(scale=2.0**-3)).scale == 0.125
    for bad in (0.0, 3.0, math.inf, 2.0**127):
        with pytest.raises(ValueError, match="power of two"):
            FixedScaling(scale=bad)
    with pytest.raises(ValueError, match="amax_init"):
        FixedScaling(amax_init=True)


def test_scale1_casts_show_why_unit_scaling_matters():
    """At initialisation fp8 at scale 1 flushes a large share of the reference task's output
    gradients (2 (y - x) / 2^20 is far below e5m2's 2^-16) and almost none of the unit-scaled ones."""
    plain = unitscaling.scale1_casts(ReferenceTask())
    unit = unitscaling.scale1_casts(unitscaling.UnitReferenceTask())
    assert plain["grad_output_flushed"] > 0.3
    assert unit["grad_output_flushed"] < 1e-4 and unit["input_flushed"] < 1e-2
    assert all(v == 0 for k, v in unit.items() if k.endswith("saturated"))
    gpt = unitscaling.scale1_casts(TinyGPTTask())  # the mean over 512 answer tokens: a half flushes
    unit_gpt = unitscaling.scale1_casts(unitscaling.UnitTinyGPTTask())
    assert gpt["grad_output_flushed"] > 0.3 and unit_gpt["grad_output_flushed"] < 1e-3


# ---- verdicts on fixed inputs --------------------------------------------------------------------


def _us(unit, delayed=1.10, steps=150.0, unit_max=None, delayed_max=1.15, gpt=None):
    n = {"steps": steps, "delayed_mean": delayed, "delayed_max": delayed_max, "scale1_start_mean": 1.13,
         "unit_fixed1_mean": unit, "unit_fixed1_max": unit if unit_max is None else unit_max}
    if gpt is not None:  # (unit mean, unit worst, delayed mean, delayed worst)
        n.update(zip(("gpt_unit_fixed1_mean", "gpt_unit_fixed1_max", "gpt_delayed_mean", "gpt_delayed_max"), gpt))
    return n


@pytest.mark.parametrize("numbers, verdict", [
    (_us(1.05), "reproduced"),
    (_us(1.05, unit_max=1.2), "partly"),
    (_us(1.2), "partly"),
    (_us(1.05, unit_max=math.inf), "not at this scale"),
    (_us(3.0), "not at this scale"),
    (_us(1.0, steps=10.0), "partly"),
    (_us(1.05, gpt=(1.01, 1.02, 1.03, 1.05)), "reproduced"),
    (_us(1.05, gpt=(1.04, 1.06, 1.03, 1.05)), "partly"),
    (_us(1.05, gpt=(2.0, 3.0, 1.03, 1.05)), "not at this scale"),
])
def test_unit_scaling_verdict(numbers, verdict):
    assert unitscaling.verdict(numbers)[0] == verdict


@pytest.mark.slow

# ---- the MX "bump" scale rule against float64 ------------------------------------------------------


def test_bump_scale_rule_against_float64():
    """E = floor(log2 amax) - 8, plus one where amax > 1.75 * 2^floor(log2 amax) (e4m3's largest
    significand), computed with math.frexp on float64; the boundary 1.75 * 2^k itself stays."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((400, 32)) * np.exp2(rng.integers(-30, 30, (400, 1)))).astype(np.float32)
    x[:2] = 0.1
    x[0, 3] = 1.75 * 2.0**4  # exactly at the threshold: not bumped
    x[1, 7] = np.nextafter(np.float32(1.75 * 2.0**-3), np.float32(1))  # one float32 ulp above: bumped
    q = fpsim.quantize(x, "mxfp8_e4m3", scale_rounding="bump")
    amax = np.abs(x.astype(np.float64)).max(1)
    want = []
    for a in amax:
        m, k = math.frexp(a)  # a = m * 2^k, m in [0.5, 1)
        want.append((k - 1) - 8 + (2 * m > 1.75))
    got = q.scales.view(np.uint8)[:, 0].astype(int) - 127
    assert got.tolist() == want
    assert got[0] == 4 - 8 and got[1] == -3 - 8 + 1
    assert int(q.stats.saturated.sum()) == 0  # never saturates an e4m3 block
    floor = fpsim.quantize(x, "mxfp8_e4m3", scale_rounding="floor")
    assert int(floor.stats.saturated.sum()) > 0


# ---- the MX LayerNorm instability proxy ------------------------------------------------------------


def test_spikes_follow_the_docstring_definition():
    flat = [1.0] * 30
    assert mxlayernorm.spikes(flat) == []
    up = flat.copy()
    up[12] = 2.5  # > 2 x the median of the 10 before
    up[13] = 2.2  # the same spike continues
    up[20] = 2.0  # not above 2 x: no spike
    up[25] = math.nan  # a non-finite loss is a spike
    assert mxlayernorm.spikes(up) == [12, 25]
    assert mxlayernorm.spikes([1.0] * 5 + [100.0] * 5) == []  # before WINDOW steps nothing counts


def _mxn(quant, hp=0, bump=0, fp32=0):
    n = {"seeds": 8.0, "steps": 100.0, "width": 32.0}
    for arm, k in (("ln-quantized", quant), ("ln-high-precision", hp), ("bump", bump), ("fp32", fp32)):
        n[f"{arm}_seeds_spiking"] = float(k)
    return n


@pytest.mark.parametrize("numbers, verdict", [
    (_mxn(0), "not at this scale"),
    (_mxn(5, 1, 2), "reproduced"),
    (_mxn(5, 3, 0), "partly"),
    (_mxn(1), "partly"),
    (_mxn(4, 4, 0), "not at this scale"),
    (_mxn(3, 0, 0, fp32=3), "not at this scale"),
])
def test_mx_layernorm_verdict(numbers, verdict):
    assert mxlayernorm.verdict(numbers)[0] == verdict


def test_the_proxy_layernorm_rounds_into_bfloat16_both_ways():
    """In the quantized arm the LayerNorm's output and its weight's gradient are bfloat16 values
    (float32 storage around them); in the high-precision arm they are not."""
    import ml_dtypes

    x = fpsim.tensor(np.random.default_rng(0).standard_normal((64, 32)), "float32")
    for fmt, on_grid in (("bfloat16", True), ("float32", False)):
        block = ResidualMLP(32, 1, seed=0, ln_format=fmt)[0]
        z = {}
        orig = block.fc1.forward
        block.fc1.forward = lambda t, z=z, orig=orig: (z.setdefault("in", t.f32()), orig(t))[1]
        block(x).sum().backward()
        g = block.ln.weight.grad.f32()
        grid = np.array_equal(z["in"], z["in"].astype(ml_dtypes.bfloat16).astype(np.float32)) and \
            np.array_equal(g, g.astype(ml_dtypes.bfloat16).astype(np.float32))
        assert grid == on_grid


def test_student_teacher_data_is_fixed_by_the_data_seed():
    t = StudentTeacherTask(width=32, depth=2, batch=8)
    x, y = t.sample(3)
    x2, y2 = t.sample(3)
    assert np.array_equal(x, x2) and np.array_equal(y, y2) and not np.array_equal(x, t.sample(4)[0])
    h = x  # the teacher by hand: float64, tanh-approximation GELU, no residual
    for w1, w2 in t.teacher():
        a = h @ w1.T
        h = 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a**3))) @ w2.T
    assert np.abs(y - h).max() < 0.05 and np.std(y - h) == pytest.approx(0.005, rel=0.3)



# ---- PTQ along training ----------------------------------------------------------------------------


def test_ptq_weight_quantizers_against_references():
    """fp8: per-tensor power-of-two scale from the amax, e4m3fn by ml_dtypes (float32 in: one
    rounding), saturating; the block formats: what fpsim.quantize's own float64-checked kernels give,
    along the weight's input axis."""
    import ml_dtypes

    rng = np.random.default_rng(4)
    w = (rng.standard_normal((24, 64)) * 0.05).astype(np.float32)
    amax = float(np.abs(w).max())
    k = math.floor(math.log2(448 / amax))
    s = 2.0**k
    assert s * amax <= 448 < 2 * s * amax
    want = (w * np.float32(s)).astype(ml_dtypes.float8_e4m3fn).astype(np.float32) / np.float32(s)
    assert np.array_equal(ptq.quantize_weight(w, "fp8"), want)
    mx = ptq.quantize_weight(w, "mxfp4")
    assert np.array_equal(mx, fpsim.quantize(w, "mxfp4_e2m1", axis=-1).dequantize())
    assert len(np.unique(np.abs(mx[0, :32]))) <= 8  # e2m1 has 8 magnitudes per block
    nv = ptq.quantize_weight(w, "nvfp4")
    assert np.array_equal(nv, fpsim.quantize(w, "nvfp4", axis=-1).dequantize())
    with pytest.raises(ValueError, match="unknown format 'int4'"):
        ptq.quantize_weight(w, "int4")


def test_ptq_losses_restore_the_weights():
    task = TinyGPTTask(eval_size=16)
    model = task.model(0)
    before = [p.f32().copy() for p in model.parameters()]
    out = ptq.ptq_losses(task, model)
    assert set(out) == {"fp32", *ptq.FORMATS} and all(math.isfinite(v) for v in out.values())
    assert out["fp32"] == task.evaluate(model)[0]
    assert all(np.array_equal(a, p.f32()) for a, p in zip(before, model.parameters()))
    assert len(ptq.linear_weights(model)) == 6 * task.n_layers + 1  # q, k, v, proj, 2 MLP per layer; the head


def _ptq(rise, share, steps=250.0, early=(0.02, 0.03, 0.01), early_share=(1.0, 1.0, 1.0)):
    n = {"steps": steps, "seeds": 8.0}
    for f, r, s, e, es in zip(ptq.FORMATS, rise, share, early, early_share):
        n[f"{f}_late_rise"], n[f"{f}_late_rise_share"] = r, s
        n[f"{f}_early_rise"], n[f"{f}_early_rise_share"] = e, es
    return n


@pytest.mark.parametrize("numbers, verdict", [
    (_ptq((0.01, 0.02, 0.0), (1.0, 1.0, 0.5)), "reproduced"),
    (_ptq((0.01, -0.02, -0.01), (1.0, 0.0, 0.2)), "partly"),
    (_ptq((0.01, 0.02, 0.01), (0.75, 0.875, 1.0)), "partly"),
    (_ptq((-0.01, -0.02, 0.0), (0.0, 0.0, 0.5)), "partly"),
    (_ptq((-0.01, -0.02, 0.0), (0.0, 0.0, 0.5), early_share=(1.0, 0.875, 0.5)), "not at this scale"),
    (_ptq((0.01, 0.02, 0.01), (1.0, 1.0, 1.0), steps=20.0), "partly"),
])
def test_ptq_verdict(numbers, verdict):
    assert ptq.verdict(numbers)[0] == verdict




def test_a_checkpointed_task_without_its_checkpoint_is_refused_when_defined():
    """runs.Checkpointed, the checkpoint-during-training task PTQ and the fp8 rollout share."""
    from fpsim.experiments.findings.runs import Checkpointed
    from fpsim.experiments.tinygpt import TinyGPTTask

    with pytest.raises(TypeError, match=r"^Forgot is Checkpointed: it must define _checkpoint\(model, step\)$"):
        class Forgot(Checkpointed, TinyGPTTask):
            pass
