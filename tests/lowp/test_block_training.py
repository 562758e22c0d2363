"""Block-scaled training: the three GEMMs of BlockLinear against a float64 reference of the same
quantize-then-matmul maths (each operand quantized along that GEMM's reduction axis); the ao#1501
mistake measurably differs; the Hadamard transform is exact and cancels; narrow accumulation with
and without promotion; lowp.convert with a BlockScaling and recipe errors."""

import numpy as np
import pytest
from helpers import exact_sum_f32

import fpsim
from fpsim import nn
from fpsim.formats import quantize
from fpsim.lowp import BlockLinear, BlockScaling, convert, hadamard_matrix, hadamard_transform
from fpsim.lowp.block import gemm

pytestmark = pytest.mark.both_backends  # every test here runs on numpy and numpy-f32 (conftest.py)

RECIPES = {
    "mxfp8": BlockScaling("mxfp8_e4m3"),
    "mxfp6": BlockScaling("mxfp6_e2m3", grad_format="mxfp6_e3m2", scale_rounding="rceil"),
    "mxfp4-sr-rht": BlockScaling("mxfp4_e2m1", grad_rounding="stochastic", hadamard=True),
    "nvfp4": BlockScaling("nvfp4", weight_block=(16, 16), grad_rounding="stochastic", hadamard=True),
    "fp8-block": BlockScaling("fp8_block", weight_block=(128, 128), pow2_scales=True),
    "mxfp4-block8": BlockScaling("mxfp4_e2m1", block=8, weight_block=8),
}


def q64(a32, fmt, axis, *, block=None, rounding="nearest", scale_rounding=None, pow2=False):
    """The reference's quantizer: fpsim.quantize (verified bit for bit on its own), then float64."""
    return quantize(a32, fmt, axis, block=block, rounding=rounding, scale_rounding=scale_rounding,
                    pow2_scales=pow2).dequantize().astype(np.float64)


def reference(x, w, b, g, r: BlockScaling, seed):
    """Forward output and (dx, dw, db) in float64 from the recipe's definition, quantizing each
    operand along its GEMM's K; stochastic draws in the layer's order (dY for dgrad, then wgrad)."""
    gfmt = r.grad_format or r.format
    fam = fpsim.get_block_format(r.format).family
    kw = {"scale_rounding": r.scale_rounding if fam == "mx" else None, "pow2": r.pow2_scales and fam == "fp8_block",
          "block": r.block}
    wkw = {**kw, "block": r.weight_block if r.weight_block is not None else r.block}
    xq, wq = q64(x, r.format, -1, **kw), q64(w, r.format, -1, **wkw)
    out = xq @ wq.T + b
    fpsim.manual_seed(seed)
    gq = q64(g, gfmt, -1, rounding=r.grad_rounding, **kw)
    wq_d = wq if isinstance(r.weight_block, tuple) else q64(w, r.format, 0, **wkw)
    dx = gq @ wq_d
    gi, xi = g, x
    if r.hadamard:
        h = hadamard_matrix(r.hadamard_seed)
        gi, xi = hadamard_transform(g, h), hadamard_transform(x, h)
    dw = q64(gi, gfmt, 0, rounding=r.grad_rounding, **kw).T @ q64(xi, r.format, 0, **kw)
    return out, dx, dw, g.astype(np.float64).sum(0)


def assert_float32_sum(got, ref, a, b):
    """got (float32) is ref (float64 a @ b) up to float32 accumulation: K * 2**-23 * (|a| @ |b|)."""
    bound = a.shape[1] * 2.0**-23 * (np.abs(a) @ np.abs(b)) + 1e-30
    assert np.all(np.abs(got.astype(np.float64) - ref) <= bound), np.max(np.abs(got - ref) / bound)


def run_layer(x, w, b, g, r, seed):
    lin = nn.Linear(w.shape[1], w.shape[0])
    lin.weight.data[...] = w
    lin.bias.data[...] = b
    layer = BlockLinear(lin, r)
    xt = fpsim.tensor(x, requires_grad=True)
    y = layer(xt)
    fpsim.manual_seed(seed)
    (y * fpsim.tensor(g)).sum().backward()
    return y.numpy(), xt.grad.numpy(), lin.weight.grad.numpy(), lin.bias.grad.numpy()


def data(t=40, i=48, o=24, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((t, i)).astype(np.float32), (rng.standard_normal((o, i)) * 0.2).astype(np.float32),
            rng.standard_normal(o).astype(np.float32), (rng.standard_normal((t, o)) * 1e-3).astype(np.float32))


@pytest.mark.parametrize("name", list(RECIPES))
def test_forward_and_gradients_match_the_float64_reference(name):
    r = RECIPES[name]
    x, w, b, g = data()
    y, dx, dw, db = run_layer(x, w, b, g, r, seed=5)
    out, rdx, rdw, rdb = reference(x, w, b, g, r, seed=5)
    fam = fpsim.get_block_format(r.format).family
    kw = {"scale_rounding": r.scale_rounding if fam == "mx" else None, "pow2": r.pow2_scales and fam == "fp8_block"}
    xq = q64(x, r.format, -1, block=r.block, **kw)
    wq = q64(w, r.format, -1, block=r.weight_block if r.weight_block is not None else r.block, **kw)
    assert_float32_sum(y, out, np.hstack([xq, np.ones((len(x), 1))]), np.hstack([wq, b[:, None]]).T)
    assert np.array_equal(db, exact_sum_f32(g, 0))
    assert np.allclose(dx, rdx, rtol=1e-5, atol=1e-9) and np.allclose(dw, rdw, rtol=1e-5, atol=1e-9)
    assert np.abs(db - rdb).max() < 1e-6


def test_each_gemm_quantizes_along_its_own_reduction_axis():
    # A weight whose columns differ wildly in size: blocks along out-features (dgrad's K) and along
    # in-features (forward's K) give different numbers, and the layer must use the right ones.
    r = BlockScaling("mxfp4_e2m1", block=4)
    x, w, b, g = data(t=8, i=8, o=8)
    w = w * np.float32(2.0) ** np.arange(8, dtype=np.float32)
    _, dx, dw, _ = run_layer(x, w, b, g, r, seed=0)
    gq = q64(g, "mxfp4_e2m1", -1, block=4)
    right = gq @ q64(w, "mxfp4_e2m1", 0, block=4)
    wrong = gq @ q64(w, "mxfp4_e2m1", -1, block=4)
    assert np.allclose(dx, right, rtol=1e-6) and not np.allclose(dx, wrong, rtol=1e-2)
    right_w = q64(g, "mxfp4_e2m1", 0, block=4).T @ q64(x, "mxfp4_e2m1", 0, block=4)
    assert np.allclose(dw, right_w, rtol=1e-6, atol=1e-12)


def test_reusing_the_forward_blocks_measurably_differs():
    x, w, b, g = data(t=64, i=64, o=32, seed=3)
    good = run_layer(x, w, b, g, BlockScaling("mxfp4_e2m1"), seed=0)
    bad = run_layer(x, w, b, g, BlockScaling("mxfp4_e2m1", reuse_forward_blocks=True), seed=0)
    assert np.array_equal(good[0], bad[0])  # same forward
    for k in (1, 2):  # dX, dW
        rel = np.linalg.norm(good[k] - bad[k]) / np.linalg.norm(good[k])
        assert rel > 1e-3, rel
    # and what the mistake computes: dY quantized once along out-features, the forward's X and W reused
    gq = q64(g, "mxfp4_e2m1", -1)
    assert np.allclose(bad[1], gq @ q64(w, "mxfp4_e2m1", -1), rtol=1e-5, atol=1e-12)
    assert np.allclose(bad[2], gq.T @ q64(x, "mxfp4_e2m1", -1), rtol=1e-5, atol=1e-12)


def test_hadamard_matrix_is_exact_and_orthogonal():
    h = hadamard_matrix(7)
    assert h.dtype == np.float32 and set(np.unique(np.abs(h))) == {0.25}
    assert np.array_equal(h.T @ h, np.eye(16, dtype=np.float32))  # exact, in float32
    assert np.array_equal(hadamard_matrix(7), h) and not np.array_equal(hadamard_matrix(8), h)
    sylvester = h * 4 * np.sign(h[:, :1])  # the rows of the Sylvester matrix (its first column is all ones)
    assert np.array_equal(sylvester[1:] @ sylvester[0], np.zeros(15))
    # applied to both wgrad operands it cancels: (H g)^T (H x) = g^T x, up to float32 rounding of H g, H x
    rng = np.random.default_rng(0)
    g, x = rng.standard_normal((40, 6)).astype(np.float32), rng.standard_normal((40, 5)).astype(np.float32)
    hg, hx = hadamard_transform(g, h), hadamard_transform(x, h)
    assert hg.shape == (48, 6)  # 40 tokens, zero-padded to three groups of 16
    got = hg.astype(np.float64).T @ hx
    assert np.allclose(got, g.astype(np.float64).T @ x, rtol=1e-6, atol=1e-5)
    back = hadamard_transform(hg, h.T.copy())[:40]
    assert np.abs(back - g).max() <= 4 * 2.0**-24 * np.abs(g).max()


def test_narrow_accumulation_and_promotion():
    rng = np.random.default_rng(0)
    a = rng.uniform(0.5, 1.0, (4, 4096)).astype(np.float32)
    b = rng.uniform(0.5, 1.0, (4096, 3)).astype(np.float32)
    exact = a.astype(np.float64) @ b
    err = lambda c: np.abs(c - exact).max() / exact.max()  # noqa: E731
    f32 = gemm(a, b)
    narrow = gemm(a, b, accumulate=13)  # ~14 significant bits, as DeepSeek-V3 reports for the H800
    promoted = gemm(a, b, accumulate=13, promote_every=128)
    assert err(f32) < 1e-6 and err(narrow) > 10 * err(promoted) and err(promoted) < 1e-3
    bf16 = gemm(a, b, accumulate="bfloat16")
    assert err(bf16) > 0.5  # swamped: 1 + 0.6 in bfloat16 stops growing long before K = 4096
    assert np.array_equal(gemm(a[:, :64], b[:64], accumulate=23), np.cumsum(a[:, :64, None] * b[None, :64], 1)[:, -1])
    # mantissa-bit rounding agrees with the format table where the format is float32-ranged
    assert np.array_equal(gemm(a[:, :64], b[:64], accumulate=7), gemm(a[:, :64], b[:64], accumulate="bfloat16"))


def test_the_narrow_accumulator_keeps_nan_and_overflows_as_ieee():
    """NaN stays NaN in the accumulator whatever its payload (cutting the payload's low bits once made
    0x7FFFFFFF a -0, 0xFFFFFFFF a +0 and 0x7F800001 an inf); a sum past the format's max is inf."""
    b = np.ones((2, 1), np.float32)
    for pattern in (0x7FFFFFFF, 0xFFFFFFFF, 0x7FC00001, 0xFFC00000):
        a = np.array([[1.0, 2.0]], np.float32)
        a.view(np.uint32)[0, 0] = pattern
        for acc in (1, 7, 13, 22, "bfloat16", "float16"):
            assert np.isnan(gemm(a, b, accumulate=acc)).all(), (hex(pattern), acc)
    big = np.full((1, 2), np.finfo(np.float32).max, np.float32)
    assert gemm(big, b, accumulate=13).tolist() == [[np.inf]]
    assert gemm(-big, b, accumulate=13).tolist() == [[-np.inf]]
    assert gemm(np.full((1, 2), 4e4, np.float32), b, accumulate="float16").tolist() == [[np.inf]]


def test_accumulator_formats_are_float32_ranged_formats_of_so_many_mantissa_bits():
    from fpsim.lowp.block import accumulator_format

    f = accumulator_format(13)
    assert (f.name, f.exponent_bits, f.mantissa_bits, f.max) == ("e8m13", 8, 13, (2 - 2.0**-13) * 2.0**127)
    assert f.smallest_subnormal == 2.0**-139 and accumulator_format("bf16").name == "bfloat16"
    assert accumulator_format(np.int64(7)) is accumulator_format(7)
    with pytest.raises(ValueError, match="accumulate must be a format name or mantissa bits in 1..23, got 24"):
        accumulator_format(24)


def test_a_training_step_runs_and_convert_keeps_first_and_last():
    model = nn.Sequential(nn.Linear(8, 32, seed=0), nn.ReLU(), nn.Linear(32, 32, seed=1), nn.ReLU(),
                          nn.Linear(32, 4, seed=2))
    params = list(model.parameters())
    done = convert(model, RECIPES["nvfp4"], skip=("first", "last"))
    assert done == ["2"] and isinstance(model._modules["2"], BlockLinear)
    assert list(model.parameters()) == params  # shared, so an optimizer keeps working
    opt = fpsim.optim.SGD(model.parameters(), lr=0.1)
    rng = np.random.default_rng(0)
    x = fpsim.tensor(rng.standard_normal((64, 8)))
    target = fpsim.tensor(rng.standard_normal((64, 4)))
    losses = []
    for _ in range(20):
        loss = nn.mse_loss(model(x), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.numpy()))
    assert losses[-1] < losses[0]


@pytest.mark.parametrize("kwargs,match", [
    ({"format": "mxfp9"}, "unknown block format 'mxfp9'"),
    ({"grad_rounding": "up"}, "grad_rounding must be 'nearest' or 'stochastic'"),
    ({"hadamard": True, "reuse_forward_blocks": True}, "hadamard transforms the wgrad operands"),
    ({"promote_every": 128}, "promote_every needs a narrow accumulate format"),
    ({"accumulate": 13, "promote_every": 0}, "promote_every must be a positive integer"),
    ({"accumulate": 30}, "accumulate as mantissa bits must be in 1..23"),
    ({"accumulate": "fp17"}, "unknown format 'fp17'"),
    ({"block": 0}, "block must be a positive integer"),
    ({"scale_rounding": "round"}, "unknown scale_rounding"),
    ({"format": "nvfp4", "weight_block": (16, 0)}, "block must be a positive integer"),
])
def test_bad_recipes_are_refused_at_once(kwargs, match):
    with pytest.raises(ValueError, match=match):
        BlockScaling(**kwargs)


def test_convert_blocks_refuses_unknown_names_and_leaves_the_model_alone():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    with pytest.raises(ValueError, match="'9' not a Linear of Sequential"):
        convert(model, BlockScaling(), skip=("9",))
    assert type(model._modules["0"]) is nn.Linear and type(model._modules["2"]) is nn.Linear
    with pytest.raises(ValueError, match="leaves no Linear"):
        convert(model, BlockScaling(), skip=("first", "last"))
    with pytest.raises(TypeError, match="BlockScaling"):
        convert(model, "mxfp8")


def test_quantize_operand_is_the_fake_quantized_operand_and_q_its_deprecated_name():
    from fpsim.formats.blockfast import fake_quantize

    r = BlockScaling("mxfp4", grad_format="mxfp8")
    x = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)
    assert np.array_equal(r.quantize_operand(x, -1), fpsim.quantize(x, "mxfp4").dequantize())
    assert np.array_equal(r.quantize_operand(x, 0, grad=True), fake_quantize(x, "mxfp8", 0))
    with pytest.warns(DeprecationWarning, match="BlockScaling.quantize_operand"):
        assert np.array_equal(r.q(x, -1), r.quantize_operand(x, -1))
