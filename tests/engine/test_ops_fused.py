"""The ops whose float32 passes write into arrays the op owns (gelu, layer_norm, softmax,
log_softmax, mul with a constant, Adam): bit for bit against the formula as written out, one
fresh numpy float32 temporary per operation in the same order (tanh and exp correctly rounded,
every sum exact and rounded once: fpsim's definitions, from tests/helpers.py), rounded once by
ml_dtypes into float32 / float16 / bfloat16 - forward and every gradient, on both numpy backends.  A second
backward through a retained graph gives the same bits (the backward writes into nothing the
forward saved), and the incoming gradient is never written into."""

import math

import ml_dtypes
import numpy as np
import pytest
from helpers import assert_same_bits, cr_f32, exact_mean_f32, exact_sum_f32

from fpsim import ops
from fpsim.tensor import tensor

DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
FORMATS = list(DTYPES)
BACKENDS = ["numpy", "numpy-f32"]
F = np.float32


def _values(rng, shape, fmt, scale=1.0, specials=True):
    """Normal values in ``fmt`` (as that dtype), with zeros, -0, subnormals, huge values, inf
    and NaN spread over the first row where ``specials``."""
    x = (rng.standard_normal(shape) * scale).astype(np.float32)
    if specials:
        dt = DTYPES[fmt]
        fi = ml_dtypes.finfo(dt)
        sp = np.array([0.0, -0.0, float(fi.smallest_subnormal), -float(fi.tiny), 1e-3, 9.0, -9.0,
                       float(fi.max), np.inf, -np.inf, np.nan], dtype=np.float32)
        flat = x.reshape(-1)
        flat[: sp.size] = sp[: flat.size]
    return x.astype(DTYPES[fmt])


def _round(x32, fmt):
    return np.asarray(x32, dtype=np.float32).astype(DTYPES[fmt])


def _run(op, xs, g, fmt, backend, retain=False):
    """op on tensors made from ``xs`` (each requires grad), backward with gradient ``g``; the
    output and the gradients, in the storage dtype.  ``retain``: a second backward through the
    retained graph must give the same gradients (compared here)."""
    ts = [tensor(x, fmt, requires_grad=True, backend=backend) for x in xs]
    y = op(*ts)
    gt = tensor(g, fmt, backend=backend)
    g_before = gt.numpy().copy()
    y.backward(gt, retain_graph=retain)
    grads = [t.grad.numpy().copy() for t in ts]
    assert_same_bits(gt.numpy(), g_before, "the incoming gradient was written into")
    if retain:
        for t in ts:
            t.grad = None
        y.backward(gt)
        for t, want in zip(ts, grads):
            assert_same_bits(t.grad.numpy(), want, "second backward through the retained graph")
    return y.numpy(), grads


# ------------------------------------------------------------------ the formulas as written before


def gelu_ref(x, g):
    c = F(0.7978845608028654)
    u = c * (x + F(0.044715) * (x * x * x))
    t = cr_f32(np.tanh, u)
    out = F(0.5) * x * (1 + t)
    du = c * (1 + F(3 * 0.044715) * x * x)
    return out, [g * (F(0.5) * (1 + t) + F(0.5) * x * (1 - t * t) * du)]


def layer_norm_ref(x, w, b, g, eps=1e-5):
    axes = (x.ndim - 1,)
    lead = tuple(range(x.ndim - 1))
    mean = exact_mean_f32(x, axes, keepdims=True)
    d = x - mean
    var = exact_mean_f32(d * d, axes, keepdims=True)
    rstd = F(1) / np.sqrt(var + F(eps))
    xhat = (x - mean) * rstd
    out = xhat * w if w is not None else xhat
    if b is not None:
        out = out + b
    gw = g * w if w is not None else g
    m1 = exact_mean_f32(gw, axes, keepdims=True)
    m2 = exact_mean_f32(gw * xhat, axes, keepdims=True)
    grads = [rstd * (gw - m1 - xhat * m2)]
    if w is not None:
        grads.append(exact_sum_f32(g * xhat, lead))
    if b is not None:
        grads.append(exact_sum_f32(g, lead))
    return out, grads


def softmax_ref(x, g, y_stored):
    e = cr_f32(np.exp, x - x.max(axis=-1, keepdims=True))
    out = e / exact_sum_f32(e, -1, keepdims=True)
    y = y_stored
    return out, [y * (g - exact_sum_f32(g * y, -1, keepdims=True))]


def log_softmax_ref(x, g, y_stored):
    z = x - x.max(axis=-1, keepdims=True)
    out = z - cr_f32(np.log, exact_sum_f32(cr_f32(np.exp, z), -1, keepdims=True))
    return out, [g - cr_f32(np.exp, y_stored) * exact_sum_f32(g, -1, keepdims=True)]


def _check(got, grads, ref_out, ref_grads, fmt, what):
    assert_same_bits(got, _round(ref_out, fmt), f"{what} forward")
    assert len(grads) == len(ref_grads)
    for i, (a, b) in enumerate(zip(grads, ref_grads)):
        assert_same_bits(a, _round(b, fmt), f"{what} gradient {i}")


# ------------------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shape", [(), (7,), (4, 9, 33)])
def test_gelu_bits(fmt, backend, shape):
    rng = np.random.default_rng(1)
    x = _values(rng, shape, fmt, 3.0, specials=bool(shape))
    g = _values(rng, shape, fmt, specials=False)
    got, grads = _run(ops.gelu, [x], g, fmt, backend, retain=True)
    with np.errstate(all="ignore"):
        ref_out, ref_grads = gelu_ref(x.astype(F), g.astype(F))
    _check(got, grads, ref_out, ref_grads, fmt, "gelu")


def test_gelu_wide_range_float32():
    """Every float32 exponent: tiny inputs whose cube is subnormal, huge ones whose cube is inf."""
    rng = np.random.default_rng(2)
    x = (rng.uniform(1, 2, 4096) * 2.0 ** rng.integers(-149, 128, 4096)).astype(F)
    x[::2] *= -1
    g = rng.standard_normal(4096).astype(F)
    got, grads = _run(ops.gelu, [x], g, "float32", "numpy")
    with np.errstate(all="ignore"):
        ref_out, ref_grads = gelu_ref(x, g)
    _check(got, grads, ref_out, ref_grads, "float32", "gelu")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("affine", ["both", "weight", "bias", "none"])
def test_layer_norm_bits(fmt, backend, affine):
    rng = np.random.default_rng(3)
    x = _values(rng, (3, 5, 24), fmt, 2.0, specials=False)
    x[0, 0] = _values(rng, (24,), fmt, 2.0)  # one row with inf / NaN / extremes
    x[1, 2] = np.float32(1000)  # a constant row: variance 0
    w = _values(rng, (24,), fmt, specials=False) if affine in ("both", "weight") else None
    b = _values(rng, (24,), fmt, specials=False) if affine in ("both", "bias") else None
    g = _values(rng, x.shape, fmt, specials=False)
    xs = [a for a in (x, w, b) if a is not None]

    def op(xt, *rest):
        rest = list(rest)
        wt = rest.pop(0) if w is not None else None
        bt = rest.pop(0) if b is not None else None
        return ops.layer_norm(xt, (24,), wt, bt)

    got, grads = _run(op, xs, g, fmt, backend, retain=True)
    with np.errstate(all="ignore"):
        ref_out, ref_grads = layer_norm_ref(*(a.astype(F) if a is not None else None for a in (x, w, b, g)))
    _check(got, grads, ref_out, ref_grads, fmt, "layer_norm")


def _low_stats(x, fmt, eps=1e-5):
    """The naive statistics with every step rounded into ``fmt`` by ml_dtypes: running sums of x
    and x*x one element at a time, E[x^2] - E[x]^2 clamped at 0, 1/sqrt(var + eps)."""
    r = lambda v: np.asarray(v, F).astype(DTYPES[fmt]).astype(F)  # noqa: E731
    n = x.shape[-1]
    s = np.zeros(x.shape[:-1], F)
    s2 = np.zeros(x.shape[:-1], F)
    for j in range(n):
        v = x[..., j]
        s = r(s + v)
        s2 = r(s2 + r(v * v))
    mean = r(s / F(n))
    var = np.maximum(r(r(s2 / F(n)) - r(mean * mean)), F(0))
    rstd = r(F(1) / np.sqrt(r(var + F(eps))))
    return mean[..., None], rstd[..., None]


@pytest.mark.parametrize("fmt", ["float16", "bfloat16"])
def test_layer_norm_low_statistics_bits(fmt):
    """acc="input": statistics accumulated in x's format, then (x - mean) * rstd * w + b and the
    backward in float32 from them, as before."""
    rng = np.random.default_rng(7)
    x, w, b, g = (_values(rng, s, fmt, specials=False) for s in ((3, 2, 16), (16,), (16,), (3, 2, 16)))
    got, grads = _run(lambda *t: ops.layer_norm(t[0], (16,), t[1], t[2], acc="input"), [x, w, b], g, fmt,
                      "numpy", retain=True)
    x32, w32, b32, g32 = (a.astype(F) for a in (x, w, b, g))
    mean, rstd = _low_stats(x32, fmt)
    xhat = (x32 - mean) * rstd
    gw = g32 * w32
    m1 = gw.mean(axis=-1, keepdims=True, dtype=F)
    m2 = (gw * xhat).mean(axis=-1, keepdims=True, dtype=F)
    ref = [rstd * (gw - m1 - xhat * m2), (g32 * xhat).sum(axis=(0, 1), dtype=F), g32.sum(axis=(0, 1), dtype=F)]
    _check(got, grads, xhat * w32 + b32, ref, fmt, "layer_norm acc=input")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_bits(fmt, backend, name):
    rng = np.random.default_rng(4)
    x = _values(rng, (4, 3, 17), fmt, 4.0, specials=False)
    x[0, 0] = _values(rng, (17,), fmt, 4.0)
    x[0, 1, 3:] = -np.inf  # a masked row
    g = _values(rng, x.shape, fmt, specials=False)
    op = getattr(ops, name)
    got, grads = _run(op, [x], g, fmt, backend, retain=True)
    ref = softmax_ref if name == "softmax" else log_softmax_ref
    with np.errstate(all="ignore"):
        ref_out, ref_grads = ref(x.astype(F), g.astype(F), got.astype(F))
    _check(got, grads, ref_out, ref_grads, fmt, name)


def test_softmax_matches_torch_float32():
    """The same float32 softmax and its gradient as PyTorch CPU's, within a few ulps (the
    exactness against the formula is pinned above; this is the formula's meaning)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    x = rng.standard_normal((8, 32)).astype(F)
    g = rng.standard_normal((8, 32)).astype(F)
    got, (gx,) = _run(ops.softmax, [x], g, "float32", "numpy")
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.softmax(xt, -1)
    yt.backward(torch.tensor(g))
    np.testing.assert_allclose(got, yt.detach().numpy(), rtol=4 * 2.0**-23, atol=1e-30)
    np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fmt", FORMATS)
def test_gelu_matches_float64(fmt):
    """The formula's meaning: within a few float32 ulps of float64 before the one rounding."""
    rng = np.random.default_rng(6)
    x = _values(rng, (512,), fmt, 3.0, specials=False)
    x64 = x.astype(np.float64)
    y64 = 0.5 * x64 * (1 + np.tanh(math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64**3)))
    got, _ = _run(ops.gelu, [x], np.ones_like(x), fmt, "numpy")
    tol = 8 * 2.0**-23 if fmt == "float32" else float(ml_dtypes.finfo(DTYPES[fmt]).eps)
    np.testing.assert_allclose(got.astype(np.float64), y64, rtol=tol, atol=1e-6)


# ------------------------------------------------------------------------------- mul, div, Adam


@pytest.mark.parametrize("fmt", FORMATS)
def test_mul_div_by_constant_bits(fmt):
    """A constant factor gets no gradient computed; the tensor's gradient is g * c (g / c) as before."""
    rng = np.random.default_rng(8)
    x = _values(rng, (4, 6), fmt, specials=False)
    g = _values(rng, (4, 6), fmt, specials=False)
    for op, ref, c in ((ops.mul, np.multiply, 0.125), (ops.div, np.divide, 3.0)):
        got, (gx,) = _run(lambda t, op=op, c=c: op(t, c), [x], g, fmt, "numpy", retain=True)
        assert_same_bits(got, _round(ref(x.astype(F), F(c)), fmt), "forward")
        assert_same_bits(gx, _round(ref(g.astype(F), F(c)), fmt), "gradient")


def adam_ref(w, grads, fmt, lr=1e-2, betas=(0.9, 0.999), eps=1e-8, wd=0.0, decoupled=False):
    """PyTorch's single-tensor Adam as fpsim wrote it before: every in-place op rounded into
    ``fmt`` (ml_dtypes), each float32 expression as written."""
    r = lambda v: np.asarray(v, F).astype(DTYPES[fmt]).astype(F)  # noqa: E731
    b1, b2 = betas
    w = w.astype(F)
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    for step, g in enumerate(grads, 1):
        g = g.astype(F)
        if wd and decoupled:
            w = r(w * F(1 - lr * wd))
        elif wd:
            g = r(g + F(wd) * w)
        m = r(m + F(1 - b1) * (g - m))
        v = r(v * F(b2))
        v = r(v + F(1 - b2) * g * g)
        step_size = lr / (1 - b1**step)
        denom = r(np.sqrt(v))
        denom = r(denom / F(math.sqrt(1 - b2**step)))
        denom = r(denom + F(eps))
        with np.errstate(all="ignore"):
            w = r(w + F(-step_size) * (m / denom))
    return w, m, v


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("wd", [(0.0, False), (0.1, False), (0.1, True)])
def test_adam_bits(fmt, wd):
    from fpsim import optim

    rng = np.random.default_rng(9)
    w0 = _values(rng, (5, 7), fmt, specials=False)
    grads = [_values(rng, (5, 7), fmt, scale=10.0 ** -i, specials=False) for i in range(4)]
    grads[1].reshape(-1)[:3] = 0  # zero gradients: m / denom with small denominators
    p = tensor(w0, fmt, requires_grad=True)
    cls = optim.AdamW if wd[1] else optim.Adam
    opt = cls([p], lr=1e-2, weight_decay=wd[0])
    for g in grads:
        p.grad = tensor(g, fmt)
        opt.step()
    w, m, v = adam_ref(w0, grads, fmt, wd=wd[0], decoupled=wd[1])
    assert_same_bits(p.numpy(), w.astype(DTYPES[fmt]), "weights")
    assert_same_bits(opt.state[0]["exp_avg"].numpy(), m.astype(DTYPES[fmt]), "exp_avg")
    assert_same_bits(opt.state[0]["exp_avg_sq"].numpy(), v.astype(DTYPES[fmt]), "exp_avg_sq")


# ------------------------------------------------------------------------------- embedding


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", ["tokens", "one-hot-heavy", "unique", "zeros"])
def test_embedding_gradient_is_add_at(fmt, backend, case):
    """The weight's gradient: numpy's add.at into float32 zeros (rows added in index order),
    then rounded once - with cancellations, magnitudes 1e-30..1e30, -0, inf and NaN among the
    rows, and an id so frequent that add.at itself is used."""
    rng = np.random.default_rng(10)
    v, d = 13, 6
    shape = (8, 40)
    ids = {"tokens": rng.integers(0, v, shape), "unique": rng.permutation(v)[:12].reshape(3, 4),
           "one-hot-heavy": np.where(rng.random(shape) < 0.97, 3, rng.integers(0, v, shape)),
           "zeros": rng.integers(0, 3, shape)}[case]
    g32 = (rng.standard_normal(ids.shape + (d,)) * 10.0 ** rng.integers(-30, 30, ids.shape + (1,))).astype(F)
    m = rng.random(g32.shape)
    g32[m < 0.1] = -0.0
    g32[(m > 0.1) & (m < 0.15)] = 0.0
    if case == "zeros":
        g32[:] = -0.0
    if case == "tokens":
        g32[0, 0, 0], g32[1, 1, 1], g32[2, 2, 2] = np.inf, -np.inf, np.nan
    with np.errstate(over="ignore"):  # magnitudes past float16's range become inf: rows of inf
        g = g32.astype(DTYPES[fmt])
    w = _values(rng, (v, d), fmt, specials=False)
    t = tensor(w, fmt, requires_grad=True, backend=backend)
    ops.embedding(ids, t).backward(tensor(g, fmt, backend=backend))
    z = np.zeros((v, d), F)
    with np.errstate(all="ignore"):
        np.add.at(z, ids.reshape(-1), g.astype(F).reshape(-1, d))
    assert_same_bits(t.grad.numpy(), _round(z, fmt), f"embedding gradient ({case})")
    if case == "zeros":  # a sum from +0 is +0, never -0
        assert not np.signbit(t.grad.numpy()).any()
