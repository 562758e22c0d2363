"""The transformer ops - softmax / log_softmax (stable and naive), layer_norm, embedding,
masked_fill, scaled_dot_product_attention - against PyTorch CPU in float32, float16 and
bfloat16 (forward and backward, odd shapes), against float64 by finite differences, and the
overflows they exist to show: scores past 65,504, exp past 11.09, finfo.min + finfo.min,
LayerNorm's sum of squares."""

import math

import numpy as np
import pytest
from helpers import check_against_torch, check_op

from fpsim import amp, ops
from fpsim.tensor import tensor

pytestmark = pytest.mark.both_backends  # every test here runs on numpy and numpy-f32 (conftest.py)

torch = pytest.importorskip("torch")
F = torch.nn.functional
FMTS = ["float32", "float16", "bfloat16"]
FP16_MIN = float(np.finfo(np.float16).min)


def np_layer_norm(x, w=None, b=None, k=1, eps=1e-5):
    axes = tuple(range(x.ndim - k, x.ndim))
    m = x.mean(axis=axes, keepdims=True)
    v = ((x - m) ** 2).mean(axis=axes, keepdims=True)
    y = (x - m) / np.sqrt(v + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


def np_attention(q, k, v, allowed=None, scale=None):
    s = q @ np.swapaxes(k, -1, -2) * (scale or 1 / math.sqrt(q.shape[-1]))
    if allowed is not None:
        s = np.where(allowed, s, -np.inf)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


def randn(*shape, scale=1.0, seed=0):
    return np.random.default_rng(seed).standard_normal(shape) * scale


# ------------------------------------------------------------------------------ against PyTorch, every format


def _at_rounded_output(name: str, axis: int, fmt: str):
    """softmax / log_softmax in float64 whose output is rounded once into ``fmt`` and whose
    backward is PyTorch's own formula (aten's ``_softmax_backward_data``) evaluated in float64 at
    that ROUNDED output - as PyTorch's half kernels and fpsim's backward both read the stored
    output.  The float64 reference for where PyTorch CPU's 16-bit kernels round intermediates."""
    fwd = getattr(torch, name)
    bwd = getattr(torch.ops.aten, f"_{name}_backward_data")
    dt = getattr(torch, fmt)

    class Op(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = fwd(x, axis).to(dt).to(torch.float64)
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return bwd(g, y, axis, torch.float64)

    return Op.apply


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("axis", [-1, 1])
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_family_vs_torch(fmt, axis, name):
    """PyTorch CPU's float16 / bfloat16 softmax is single-rounding along the last axis only, and
    its log_softmax only along other axes (about 90% of elements identical to one rounding
    elsewhere): there the reference is float64 rounded once (``_at_rounded_output``)."""
    x = randn(3, 7, 33, scale=2.0)
    fp = lambda t: getattr(ops, name)(t, axis=axis)
    tf = lambda t: getattr(torch, name)(t, axis)
    single = (name == "softmax") == (axis == -1)
    ref64 = fmt != "float32" and not single
    check_against_torch(fp, tf, [x], fmt, fwd_ref64=ref64, bwd_ref64=ref64,
                        torch_fn64=_at_rounded_output(name, axis, fmt) if ref64 else None)


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("axis", [-1, 1])
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_naive_softmax_family_vs_torch(fmt, axis, name):
    """``stable=False`` is a composite of exp, sum, div (log, sub): its forward equals the same
    ops in PyTorch, each single-rounding on CPU.  Its backward is its primitives' (checked in
    engine/test_ops.py, and by finite differences below); PyTorch's composite backward is not
    comparable op for op (its div backward rounds intermediates in float16)."""
    x = randn(3, 7, 33, scale=2.0)
    fp = lambda t: getattr(ops, name)(t, axis=axis, stable=False)
    if name == "softmax":
        tf = lambda t: torch.exp(t) / torch.exp(t).sum(axis, keepdim=True)
    else:
        tf = lambda t: t - torch.log(torch.exp(t).sum(axis, keepdim=True))
    check_against_torch(fp, tf, [x], fmt, grads=fmt == "float32")


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("shape,nshape,affine", [((5, 33), (33,), True), ((2, 3, 17), (17,), True),
                                                 ((3, 5, 7), (5, 7), True), ((4, 9), (9,), False)])
def test_layer_norm_vs_torch(fmt, shape, nshape, affine):
    """Forward: PyTorch CPU is single-rounding, compared directly.  Backward: PyTorch CPU rounds
    intermediates in float16 / bfloat16 (about 60% of dx and 30% of dw identical to one
    rounding), so the reference there is torch's float64 gradient rounded once into fmt."""
    ins = [randn(*shape, scale=3.0, seed=1)]
    if affine:
        ins += [randn(*nshape, seed=2), randn(*nshape, seed=3)]
    fp = lambda x, *wb: ops.layer_norm(x, nshape, *wb)
    tf = lambda x, *wb: F.layer_norm(x, nshape, *wb)
    check_against_torch(fp, tf, ins, fmt, bwd_ref64=fmt != "float32")


@pytest.mark.parametrize("fmt", FMTS)
def test_embedding_vs_torch(fmt):
    """Forward copies rows (exact).  Backward: PyTorch CPU adds repeated ids in the weight's own
    dtype, rounding after each addition; fpsim adds in float32 and rounds once, so the
    reference is torch's float64 gradient rounded once."""
    ids = np.random.default_rng(4).integers(0, 11, (4, 9))
    fp = lambda w: ops.embedding(ids, w)
    tf = lambda w: F.embedding(torch.from_numpy(ids), w)
    shares = check_against_torch(fp, tf, [randn(11, 13, seed=5)], fmt, bwd_ref64=fmt != "float32")
    assert shares["forward"] == 1.0


@pytest.mark.parametrize("fmt", FMTS)
def test_masked_fill_vs_torch(fmt):
    mask = np.random.default_rng(6).random((5, 1, 7)) < 0.3
    fp = lambda x: ops.masked_fill(x, mask, -1e4)
    tf = lambda x: x.masked_fill(torch.from_numpy(mask), -1e4)
    assert check_against_torch(fp, tf, [randn(5, 3, 7)], fmt) == {"forward": 1.0, "grad 0": 1.0}


def _torch_attention(q, k, v, allowed=None, scale=None, mask_value=None):
    """The composite, op by op in PyTorch (each op single-rounding on CPU)."""
    s = (q @ k.transpose(-1, -2)) * (scale or 1 / math.sqrt(q.shape[-1]))
    if allowed is not None and mask_value is None:
        s = s.masked_fill(~torch.from_numpy(allowed), float("-inf"))
    elif allowed is not None:
        s = s + torch.from_numpy(np.where(allowed, 0.0, mask_value)).to(s.dtype)
    return torch.softmax(s, -1) @ v


ATTN_CASES = {
    "causal": ((2, 3, 9, 5), (2, 3, 9, 5), dict(is_causal=True)),
    "no mask": ((2, 9, 5), (2, 11, 5), {}),
    "padding mask": ((2, 3, 7, 6), (2, 3, 7, 6), dict(attn_mask="pad")),
    "additive finfo.min": ((3, 7, 5), (3, 7, 5), dict(is_causal=True, mask_value=FP16_MIN)),
}


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("case", list(ATTN_CASES))
def test_attention_vs_torch(fmt, case):
    """Against the same composite in PyTorch (PyTorch's own SDPA CPU kernel is fused and keeps
    the scores in float32 - the point of writing it out; float32 is also checked against it)."""
    qs, ks, kw = ATTN_CASES[case]
    kw = dict(kw)
    allowed = None
    if kw.get("attn_mask") == "pad":
        allowed = np.ones((2, 1, 1, 7), dtype=bool)
        allowed[0, ..., :2] = False  # left padding in the first sequence
        kw["attn_mask"] = allowed
    if kw.get("is_causal"):
        allowed = ops.causal_mask(qs[-2], ks[-2])
    ins = [randn(*qs, seed=7), randn(*ks, seed=8), randn(*ks, seed=9)]
    fp = lambda q, k, v: ops.scaled_dot_product_attention(q, k, v, **kw)
    tf = lambda q, k, v: _torch_attention(q, k, v, allowed, mask_value=kw.get("mask_value"))
    check_against_torch(fp, tf, ins, fmt)
    if fmt == "float32" and "mask_value" not in kw:
        mask = None if allowed is None else torch.from_numpy(allowed)
        fused = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        check_against_torch(fp, fused, ins, fmt)


# ------------------------------------------------------------------------------ float64 and finite differences


def test_layer_norm_finite_differences():
    check_op([(3, 2, 9), (9,), (9,)], lambda x, w, b: np_layer_norm(x, w, b),
             lambda x, w, b: ops.layer_norm(x, 9, w, b), ranges=(-3.0, 3.0))
    check_op([(4, 3, 5)], lambda x: np_layer_norm(x, k=2), lambda x: ops.layer_norm(x, (3, 5)))


def test_attention_finite_differences():
    allowed = ops.causal_mask(5, 6)
    check_op([(2, 5, 3), (2, 6, 3), (2, 6, 4)], lambda q, k, v: np_attention(q, k, v, allowed),
             lambda q, k, v: ops.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_embedding_and_naive_softmax_finite_differences():
    ids = np.array([[0, 2, 2], [3, 0, 2]])
    check_op([(4, 5)], lambda w: w[ids], lambda w: ops.embedding(ids, w))
    check_op([(3, 5)], lambda x: np.exp(x) / np.exp(x).sum(-1, keepdims=True),
             lambda x: ops.softmax(x, stable=False), ranges=(-3.0, 3.0))


# ------------------------------------------------------------------------------ where half precision overflows


def test_naive_softmax_overflows_float16_only():
    x = np.array([[12.0, 0.0, -1.0]])  # exp(12) = 162755 > 65504: inf / inf = NaN, 1 / inf = 0
    assert np.array_equal(ops.softmax(tensor(x, "float16"), stable=False).numpy().astype(np.float32),
                          [[np.nan, 0.0, 0.0]], equal_nan=True)
    assert np.isfinite(ops.softmax(tensor(x, "float16")).numpy().astype(np.float32)).all()
    assert np.isfinite(ops.softmax(tensor(x, "bfloat16"), stable=False).numpy().astype(np.float32)).all()
    with amp.autocast("float16"):  # exp and sum are on the float32 list
        y = ops.softmax(tensor(x, "float16"), stable=False)
    assert y.fmt.name == "float32" and np.isfinite(y.numpy()).all()


def test_layer_norm_low_precision_statistics_overflow():
    """Activations near 300: the squares (about 90,000) overflow float16 in a float16
    accumulator; float32 statistics (the default, and autocast's) are fine."""
    x = 300 + randn(4, 64, seed=10)
    x16 = tensor(x, "float16")
    assert np.isnan(ops.layer_norm(x16, 64, acc="float16").numpy().astype(np.float32)).all()
    assert np.isnan(ops.layer_norm(x16, 64, acc="input").numpy().astype(np.float32)).all()
    good = ops.layer_norm(x16, 64).numpy().astype(np.float64)
    np.testing.assert_allclose(good, np_layer_norm(x16.numpy().astype(np.float64)), atol=2e-3)
    with amp.autocast("float16"):
        y = ops.layer_norm(x16, 64, acc="input")  # widened to float32 first: float32 statistics
    assert y.fmt.name == "float32" and np.isfinite(y.numpy()).all()


def test_attention_scores_overflow_in_float16():
    """q . k = 64 * 40 * 40 = 102,400 > 65,504: inf scores in float16 before the scale, then
    NaN from the softmax; bfloat16 holds the product.  Autocast does not help: the product is
    on its low list."""
    q = np.full((1, 2, 64), 40.0)
    want = np.full((1, 2, 64), 40.0)
    for fmt in ["float16", "bfloat16"]:
        t = tensor(q, fmt)
        out = ops.scaled_dot_product_attention(t, t, t).numpy().astype(np.float32)
        assert np.isnan(out).all() if fmt == "float16" else np.allclose(out, want)
    with amp.autocast("float16"):
        t = tensor(q, "float32")
        assert np.isnan(ops.scaled_dot_product_attention(t, t, t).numpy().astype(np.float32)).all()


def test_additive_finfo_min_mask_becomes_minus_inf():
    """transformers #17306: finfo(float16).min added to itself (two masks) or to a negative
    score rounds to -inf in float16; a row with every entry -inf is NaN.  The boolean mask
    gives that row zeros, as PyTorch's SDPA."""
    assert math.isinf((tensor([FP16_MIN], "float16") + tensor([FP16_MIN], "float16")).item())
    q = tensor(np.full((1, 4, 8), 4.0), "float16")
    k = tensor(np.full((1, 4, 8), -4.0), "float16")  # every score -128 / sqrt(8) = -45.25
    pad = np.array([[False, False, True, True]])  # keys 0 and 1 are padding
    out = ops.scaled_dot_product_attention(q, k, q, pad, is_causal=True, mask_value=FP16_MIN)
    rows = np.isnan(out.numpy().astype(np.float32)).all(axis=-1)[0]
    assert rows[:2].all() and not rows[2:].any()  # queries 0 and 1 see only masked keys: -inf + -inf
    out32 = ops.scaled_dot_product_attention(q.float(), k.float(), q.float(), pad, is_causal=True,
                                             mask_value=FP16_MIN)
    assert np.isfinite(out32.numpy()).all()
    boolean = ops.scaled_dot_product_attention(q, k, q, pad, is_causal=True).numpy().astype(np.float32)
    assert (boolean[0, :2] == 0).all() and np.isfinite(boolean).all()


def test_autocast_policy_for_the_new_ops():
    x = tensor(randn(2, 5, 8), "float32")
    w, b = tensor(np.ones(8)), tensor(np.zeros(8))
    with amp.autocast("float16"):
        assert ops.layer_norm(x, 8, w, b).fmt.name == "float32"
        assert ops.scaled_dot_product_attention(x, x, x, is_causal=True).fmt.name == "float16"
        assert ops.softmax(x.half()).fmt.name == "float32"
        assert ops.embedding(np.array([0, 1]), tensor(np.ones((3, 4)))).fmt.name == "float32"
    for op in ["layer_norm", "softmax", "log_softmax", "mse_loss", "exp", "sum"]:
        assert ops.AUTOCAST_POLICY[op] == "float32"
    assert ops.AUTOCAST_POLICY["matmul"] == ops.AUTOCAST_POLICY["linear"] == "low"


# ------------------------------------------------------------------------------ bad input


def test_bad_input_names_the_shapes():
    q = tensor(np.zeros((2, 4, 8)), requires_grad=True)
    k5 = tensor(np.zeros((2, 5, 8)))
    with pytest.raises(ValueError, match=r"attn_mask shape \(4, 4\).*\(2, 4, 5\)"):
        ops.scaled_dot_product_attention(q, k5, k5, np.ones((4, 4), dtype=bool))
    with pytest.raises(ValueError, match=r"q \(2, 4, 8\), k \(2, 5, 7\)"):
        ops.scaled_dot_product_attention(q, tensor(np.zeros((2, 5, 7))), k5)
    with pytest.raises(TypeError, match="boolean"):
        ops.scaled_dot_product_attention(q, q, q, np.ones((4, 4)))
    with pytest.raises(ValueError, match="no mask"):
        ops.scaled_dot_product_attention(q, q, q, mask_value=-1e4)
    w = tensor(np.zeros((10, 3)), requires_grad=True)
    with pytest.raises(ValueError, match=r"\[0, 10\).*\(10, 3\).*-1\.\.10"):
        ops.embedding(np.array([[-1, 10]]), w)
    with pytest.raises(TypeError, match="integers.*float64"):
        ops.embedding(np.array([1.0, 2.0]), w)
    with pytest.raises(ValueError, match=r"normalized_shape \(7,\).*\(2, 4, 8\)"):
        ops.layer_norm(q, 7)
    with pytest.raises(ValueError, match=r"weight shape \(7,\)"):
        ops.layer_norm(q, 8, tensor(np.ones(7)))
    with pytest.raises(ValueError, match=r"mask shape \(3,\).*\(2, 4, 8\)"):
        ops.masked_fill(q, np.ones(3, dtype=bool), 0.0)
    assert q.grad is None
