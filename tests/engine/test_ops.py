"""Every primitive op through ``check_op`` (float64 numpy + finite differences), the
broadcasting zoo, Python operators with constants on either side, and emulation fidelity:
float16 / bfloat16 arithmetic bit for bit against independent references."""

import math

import ml_dtypes
import numpy as np
import pytest
from helpers import assert_same_bits, bits, check_op, f64, spacing

from fpsim import nn, ops
from fpsim.backend import get_backend
from fpsim.tensor import tensor

pytestmark = pytest.mark.both_backends  # every test here runs on numpy and numpy-f32 (conftest.py)

BF16 = ml_dtypes.bfloat16
POS = (0.2, 3.0)


def gfloat_bf16(x64):
    """float64 -> bfloat16 values, rounded once to nearest even by gfloat (independent of ml_dtypes)."""
    gfloat = pytest.importorskip("gfloat")
    from gfloat.formats import format_info_bfloat16

    return gfloat.round_ndarray(format_info_bfloat16, x64)


def np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def np_log_softmax(x, axis=-1):
    z = x - x.max(axis=axis, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=axis, keepdims=True))


def np_gelu(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def np_sigmoid(x):
    return 1 / (1 + np.exp(-x))


# ------------------------------------------------------------------------------ binary ops + broadcasting

BINARY = {
    "add": (ops.add, np.add),
    "sub": (ops.sub, np.subtract),
    "mul": (ops.mul, np.multiply),
    "div": (ops.div, np.divide),
}
ZOO = [
    ((3, 4), (3, 4)),
    ((3, 4), (4,)),
    ((4,), (3, 4)),
    ((3, 1), (1, 4)),
    ((2, 3, 4), (3, 1)),
    ((1,), (5,)),
    ((5,), ()),
    ((), (2, 3)),
    ((2, 1, 4), (3, 1)),
]


@pytest.mark.parametrize("op", list(BINARY))
@pytest.mark.parametrize("sa,sb", ZOO)
def test_binary_broadcasting(op, sa, sb):
    fp, ref = BINARY[op]
    # denominators kept away from 0: division's gradient is steep there
    ranges = [(-2.0, 2.0), POS] if op == "div" else None
    check_op([sa, sb], ref, fp, ranges=ranges)


def test_binary_shape_mismatch_names_both_shapes():
    a, b = tensor(np.ones((3, 4))), tensor(np.ones((3,)))
    with pytest.raises(ValueError, match=r"\(3, 4\).*\(3,\)"):
        ops.add(a, b)
    with pytest.raises(ValueError, match=r"\(3, 4\).*\(3,\)"):
        a * b


# ------------------------------------------------------------------------------ matmul

MATMUL = [
    ((3, 4), (4, 5)),
    ((1, 7), (7, 1)),
    ((2, 3, 4), (4, 5)),
    ((3, 4), (2, 4, 5)),
    ((2, 3, 4), (2, 4, 5)),
    ((2, 1, 3, 4), (5, 4, 2)),
]


@pytest.mark.parametrize("sa,sb", MATMUL)
def test_matmul(sa, sb):
    check_op([sa, sb], np.matmul, ops.matmul)
    check_op([sa, sb], np.matmul, lambda a, b: a @ b, seed=1)


@pytest.mark.parametrize("sa,sb", [((3, 4), (5, 6)), ((4,), (4, 5)), ((2, 3, 4), (3, 4, 5)), ((3, 4), (3, 4))])
def test_matmul_shape_mismatch_names_both_shapes(sa, sb):
    a, b = tensor(np.ones(sa)), tensor(np.ones(sb))
    pattern = f"{sa}.*{sb}".replace("(", r"\(").replace(")", r"\)")
    with pytest.raises(ValueError, match=pattern):
        a @ b


# ------------------------------------------------------------------------------ elementwise

UNARY = [
    ("neg", ops.neg, np.negative, None),
    ("exp", ops.exp, np.exp, None),
    ("log", ops.log, np.log, POS),
    ("sqrt", ops.sqrt, np.sqrt, POS),
    ("tanh", ops.tanh, np.tanh, None),
    ("sigmoid", ops.sigmoid, np_sigmoid, (-6.0, 6.0)),
    ("relu", ops.relu, lambda x: np.maximum(x, 0), None),
    ("gelu", ops.gelu, np_gelu, (-3.0, 3.0)),
    ("abs", ops.abs, np.abs, None),
    ("pow2", lambda x: ops.pow(x, 2), lambda x: x**2, None),
    ("pow3", lambda x: x**3, lambda x: x**3, None),
    ("pow_half", lambda x: x**0.5, np.sqrt, POS),
    ("pow_minus1", lambda x: x**-1, lambda x: 1 / x, POS),
    ("pow_minus1.5", lambda x: x**-1.5, lambda x: x**-1.5, POS),
]


@pytest.mark.parametrize("name,fp,ref,rng", UNARY, ids=[u[0] for u in UNARY])
@pytest.mark.parametrize("shape", [(), (7,), (3, 4)])
def test_unary(name, fp, ref, rng, shape):
    check_op([shape], ref, fp, ranges=rng)


def test_unary_methods_match_functions():
    x = tensor(np.linspace(0.1, 2, 6).reshape(2, 3))
    for m in ("exp", "log", "sqrt", "tanh", "sigmoid", "relu", "gelu", "abs"):
        assert np.array_equal(getattr(x, m)().numpy(), getattr(ops, m)(x).numpy()), m


def test_special_values():
    x = tensor([-np.inf, -1.0, -0.0, 0.0, 2.0, np.inf, np.nan])
    with np.errstate(all="ignore"):
        r = ops.relu(x).numpy()
        s = ops.sigmoid(tensor([-1000.0, 1000.0, -np.inf, np.inf])).numpy()
        t = ops.tanh(tensor([-np.inf, np.inf])).numpy()
    want = np.array([0.0, 0.0, -0.0, 0.0, 2.0, np.inf, np.nan], np.float32)  # PyTorch: relu(-0) = -0
    assert_same_bits(r, want, "relu")
    assert s.tolist() == [0.0, 1.0, 0.0, 1.0]  # stable: no overflow warning, no NaN
    assert t.tolist() == [-1.0, 1.0]


# ------------------------------------------------------------------------------ reductions

RED_AXES = [None, 0, 1, -1, (0, 2), (0, 1, 2)]


@pytest.mark.parametrize("axis", RED_AXES)
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("name", ["sum", "mean", "max"])
def test_reductions(name, axis, keepdims):
    ref = getattr(np, name)
    check_op([(2, 3, 4)], lambda x: ref(x, axis=axis, keepdims=keepdims),
             lambda x: getattr(x, name)(axis=axis, keepdims=keepdims))


def test_max_ties_share_the_gradient():
    x = tensor([[1.0, 3.0, 3.0], [2.0, 0.0, 2.0]], requires_grad=True)
    x.max(axis=1).backward(np.array([1.0, 4.0], np.float32))
    assert x.grad.numpy().tolist() == [[0.0, 0.5, 0.5], [2.0, 0.0, 2.0]]


def test_reduction_bad_axis():
    with pytest.raises(ValueError, match="axis 3"):
        tensor(np.ones((2, 3))).sum(axis=3)


# ------------------------------------------------------------------------------ shapes and indexing

SHAPE_OPS = [
    ("reshape", (3, 4), lambda x: x.reshape(2, 6), lambda x: x.reshape(2, 6)),
    ("reshape_tuple", (3, 4), lambda x: x.reshape((4, -1)), lambda x: x.reshape(4, 3)),
    ("reshape_flat", (2, 3, 2), lambda x: ops.reshape(x, (-1,)), lambda x: x.reshape(-1)),
    ("transpose", (3, 4), lambda x: x.T, lambda x: x.T),
    ("transpose_axes", (2, 3, 4), lambda x: x.transpose(2, 0, 1), lambda x: x.transpose(2, 0, 1)),
    ("transpose_negative", (2, 3, 4), lambda x: ops.transpose(x, (-1, 0, -2)), lambda x: x.transpose(2, 0, 1)),
    ("broadcast_to", (3, 1), lambda x: ops.broadcast_to(x, (2, 3, 4)), lambda x: np.broadcast_to(x, (2, 3, 4))),
    ("slice", (4, 5), lambda x: x[1:, ::2], lambda x: x[1:, ::2]),
    ("int_index", (4, 5), lambda x: x[2], lambda x: x[2]),
    ("column", (4, 5), lambda x: x[:, -1], lambda x: x[:, -1]),
    ("ellipsis", (2, 3, 4), lambda x: x[..., 1:3], lambda x: x[..., 1:3]),
    ("int_array_repeats", (4, 3), lambda x: x[[0, 2, 2, 3]], lambda x: x[[0, 2, 2, 3]]),
    ("cross_entropy_pick", (5, 3), lambda x: x[np.arange(5), np.array([1, 0, 2, 2, 1])],
     lambda x: x[np.arange(5), np.array([1, 0, 2, 2, 1])]),
    ("pick_repeated_rows", (3, 4), lambda x: x[np.array([0, 0, 2]), np.array([1, 1, 3])],
     lambda x: x[np.array([0, 0, 2]), np.array([1, 1, 3])]),
]


@pytest.mark.parametrize("name,shape,fp,ref", SHAPE_OPS, ids=[s[0] for s in SHAPE_OPS])
def test_shape_ops(name, shape, fp, ref):
    out, (x,) = check_op([shape], ref, fp, rtol=0, atol=0)  # moves values: exact
    assert out.fmt == x.fmt


@pytest.mark.parametrize("fmt", ["float16", "bfloat16"])
def test_shape_ops_keep_low_format_bits(fmt):
    x = tensor(np.random.default_rng(0).standard_normal((3, 4)), fmt)
    for y, want in [(x.T, x.numpy().T), (x.reshape(12), x.numpy().reshape(12)), (x[1:, ::2], x.numpy()[1:, ::2])]:
        assert y.fmt.name == fmt
        assert_same_bits(y.numpy(), want, fmt)


def test_bad_shapes():
    x = tensor(np.ones((3, 4)))
    with pytest.raises(ValueError, match=r"\(3, 4\).*\(5,\)"):
        x.reshape(5)
    with pytest.raises(ValueError, match="permutation"):
        x.transpose(0, 0)
    with pytest.raises(IndexError, match=r"\(3, 4\)"):
        x[7]


@pytest.mark.parametrize("shapes,axis", [([(2, 3), (4, 3)], 0), ([(2, 3), (2, 1), (2, 2)], -1),
                                         ([(2, 1, 3), (2, 2, 3)], 1)])
def test_concat(shapes, axis):
    check_op(shapes, lambda *xs: np.concatenate(xs, axis=axis), lambda *ts: ops.concat(ts, axis=axis),
             rtol=0, atol=0)


def test_concat_mixed_formats_promote_exactly():
    a = tensor([1.0009765625, 3.0], "float16")
    b = tensor([1.0078125], "bfloat16")
    c = ops.concat([a, b])
    assert c.fmt.name == "float32"
    assert c.numpy().tolist() == [1.0009765625, 3.0, 1.0078125]
    with pytest.raises(ValueError, match=r"\(2,\).*\(1, 1\)"):
        ops.concat([a, tensor(np.ones((1, 1)))])


# ------------------------------------------------------------------------------ casts, softmax family, losses


LAYOUT_M = {"float16": 10, "bfloat16": 7}


@pytest.mark.parametrize("fmt", ["float16", "bfloat16"])
def test_cast_to(fmt):
    # forward: within half an ulp (one correct rounding); backward: W rounded into the cast's format
    out, _ = check_op([(3, 4)], lambda x: x, lambda x: ops.to_format(x, fmt), out_fmt=fmt, ulps=0.5,
                      grad_rtol=2.0 ** -LAYOUT_M[fmt])
    assert out.numpy().dtype == np.dtype(fmt if fmt == "float16" else BF16)


@pytest.mark.parametrize("axis", [-1, 0])
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_family(name, axis):
    ref = np_softmax if name == "softmax" else np_log_softmax
    check_op([(3, 5)], lambda x: ref(x, axis), lambda x: getattr(ops, name)(x, axis=axis), ranges=(-4.0, 4.0))


def test_softmax_large_logits_stay_finite():
    x = tensor([[1000.0, 0.0, -1000.0]])
    assert ops.softmax(x).numpy().tolist() == [[1.0, 0.0, 0.0]]
    assert ops.log_softmax(x).numpy().tolist() == [[0.0, -1000.0, -2000.0]]


def test_mse_loss():
    check_op([(4, 3), (4, 3)], lambda a, b: np.mean((a - b) ** 2), ops.mse_loss)
    target = np.random.default_rng(5).standard_normal((4, 3)).astype(np.float32)
    check_op([(4, 3)], lambda a: np.mean((a - target) ** 2), lambda a: nn.mse_loss(a, target))
    with pytest.raises(ValueError, match=r"\(4, 3\).*\(3, 4\)"):
        ops.mse_loss(tensor(np.ones((4, 3))), np.ones((3, 4)))


def test_cross_entropy():
    t = np.array([2, 0, 1, 1, 3])
    ref = lambda z: -np.mean(np_log_softmax(z)[np.arange(5), t])
    check_op([(5, 4)], ref, lambda z: nn.cross_entropy(z, t), ranges=(-3.0, 3.0))


def test_cross_entropy_bad_input():
    z = tensor(np.zeros((3, 4)), requires_grad=True)
    with pytest.raises(ValueError, match="4"):
        nn.cross_entropy(z, np.array([0, 4, 1]))
    with pytest.raises(ValueError, match=r"\(3, 4\)"):
        nn.cross_entropy(z, np.array([0, 1]))
    with pytest.raises(TypeError, match="integer"):
        nn.cross_entropy(z, np.array([0.0, 1.0, 2.0]))


# ------------------------------------------------------------------------------ Python operators and constants

A = np.array([[0.5, -1.25, 2.0, 3.0]], np.float32)  # float32-exact constants
M = np.array([[1.5, -0.5], [0.25, 2.0], [-1.0, 0.75], [0.5, 0.5]], np.float32)
OPERATORS = [
    ("scalar+x", lambda x: 2.5 + x),
    ("x+scalar", lambda x: x + 2.5),
    ("scalar-x", lambda x: 3 - x),
    ("x-scalar", lambda x: x - 0.75),
    ("scalar*x", lambda x: -1.5 * x),
    ("x*scalar", lambda x: x * 4),
    ("scalar/x", lambda x: 2.0 / x),
    ("x/scalar", lambda x: x / 8.0),
    ("x**2", lambda x: x**2),
    ("-x", lambda x: -x),
    ("array+x", lambda x: A + x),
    ("x-array", lambda x: x - A),
    ("array-x", lambda x: A - x),
    ("array*x", lambda x: A * x),
    ("x/array", lambda x: x / A),
    ("array/x", lambda x: A / x),
    ("x@array", lambda x: x @ M),
    ("array@x", lambda x: M.T @ x.T),
    ("chain", lambda x: (2 * x - 1) / (x * x + 1)),
]


@pytest.mark.parametrize("name,fn", OPERATORS, ids=[o[0] for o in OPERATORS])
def test_python_operators(name, fn):
    # both sides run the same lambda: on fpsim tensors and on float64 arrays
    out, _ = check_op([(3, 4)], fn, fn, ranges=POS if "/" in name else None)
    assert out.fmt.name == "float32"


def test_constants_do_not_promote():
    x = tensor([1.0, 2.0], "float16")
    assert (x * 1e-3).fmt.name == "float16"
    assert (np.float64(2.0) + x).fmt.name == "float16"
    assert (np.ones(2, np.float32) - x).fmt.name == "float16"
    assert (x.reshape(1, 2) @ np.ones((2, 2), np.float32)).fmt.name == "float16"
    assert (np.ones((2, 2), np.float32) @ x.reshape(2, 1)).fmt.name == "float16"


def test_bad_operands():
    x = tensor([1.0, 2.0])
    with pytest.raises(TypeError):
        x + "a"
    with pytest.raises(TypeError):
        x + True
    with pytest.raises(TypeError, match="scalar exponent"):
        x ** tensor([2.0])
    with pytest.raises(TypeError):  # no tensor exponents (no __rpow__): say so rather than guess
        2.0 ** x


# ------------------------------------------------------------------------------ against PyTorch float32

TORCH_CASES = [
    ("matmul", [(2, 3, 4), (4, 5)], None, ops.matmul, lambda t: t.matmul),
    ("broadcast_div", [(3, 4), (4,)], [(-2.0, 2.0), POS], ops.div, lambda t: t.div),
    ("tanh", [(3, 4)], None, ops.tanh, lambda t: t.tanh),
    ("sigmoid", [(3, 4)], None, ops.sigmoid, lambda t: t.sigmoid),
    ("gelu", [(3, 4)], None, ops.gelu, lambda t: lambda x: t.nn.functional.gelu(x, approximate="tanh")),
    ("relu", [(3, 4)], None, ops.relu, lambda t: t.relu),
    ("softmax", [(3, 4)], None, ops.softmax, lambda t: lambda x: t.softmax(x, -1)),
    ("log_softmax", [(3, 4)], None, ops.log_softmax, lambda t: lambda x: t.log_softmax(x, -1)),
    ("mse_loss", [(3, 4), (3, 4)], None, ops.mse_loss, lambda t: t.nn.functional.mse_loss),
    ("cross_entropy", [(4, 3)], None, lambda z: nn.cross_entropy(z, np.array([2, 0, 1, 1])),
     lambda t: lambda z: t.nn.functional.cross_entropy(z, t.tensor([2, 0, 1, 1]))),
    ("mean_keepdims", [(2, 3, 4)], None, lambda x: x.mean(axis=(0, 2), keepdims=True),
     lambda t: lambda x: x.mean(dim=(0, 2), keepdim=True)),
]


@pytest.mark.parametrize("name,shapes,rng,fp,tfn", TORCH_CASES, ids=[c[0] for c in TORCH_CASES])
def test_against_torch(name, shapes, rng, fp, tfn):
    torch = pytest.importorskip("torch")
    tf = tfn(torch)

    def ref(*xs):  # float64 through torch itself, for the finite differences
        return tf(*[torch.from_numpy(x) for x in xs]).numpy()

    check_op(shapes, ref, fp, ranges=rng, torch_fn=tf)


# ------------------------------------------------------------------------------ low formats through check_op

LOW_OPS = [
    ("add", [(3, 4), (4,)], np.add, ops.add, None),
    ("mul", [(3, 4), (3, 1)], np.multiply, ops.mul, None),
    ("div", [(3, 4), (3, 4)], np.divide, ops.div, [(-2.0, 2.0), POS]),
    ("sqrt", [(3, 4)], np.sqrt, ops.sqrt, POS),
    ("matmul", [(3, 8), (8, 2)], np.matmul, ops.matmul, None),
    ("sum", [(3, 8)], lambda x: x.sum(axis=1), lambda x: x.sum(axis=1), None),
    ("mean", [(3, 8)], lambda x: x.mean(), lambda x: x.mean(), None),
]


@pytest.mark.parametrize("fmt", ["float16", "bfloat16"])
@pytest.mark.parametrize("name,shapes,ref,fp,rng", LOW_OPS, ids=[o[0] for o in LOW_OPS])
def test_low_format_ops_round_once(fmt, name, shapes, ref, fp, rng):
    """Computed in float32, rounded once: within half an ulp of the exact float64 result
    (plus float32's own error, far below the low format's ulp - hence 0.5 + a hair)."""
    check_op(shapes, ref, fp, fmt=fmt, ranges=rng, ulps=0.5 + 1e-3, grad=False)


@pytest.mark.parametrize("fmt,rel", [("float16", 2.0**-9), ("bfloat16", 2.0**-6)])
def test_low_format_gradients(fmt, rel):
    """Gradients in the low format: each of the few roundings costs at most half an ulp."""
    check_op([(3, 4), (4, 2)], lambda a, b: np.tanh(a @ b), lambda a, b: ops.tanh(a @ b), fmt=fmt, ulps=1.5,
             grad_rtol=4 * rel, grad_atol=4 * rel)


# ------------------------------------------------------------------------------ emulation fidelity

N = 100_000
SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 65504.0, 2.0**-24, 2.0**-14, 3 * 2.0**-24])


def _operands(dtype, seed):
    """Random bit patterns (every class: normal, subnormal, zero, inf, NaN) plus the specials
    crossed with everything, so each pair class appears."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2**16, N, dtype=np.uint16).view(dtype)
    b = rng.integers(0, 2**16, N, dtype=np.uint16).view(dtype)
    # mostly-subnormal pairs and close-magnitude pairs (cancellation), where mistakes would show
    sub = rng.integers(0, 2**10 if dtype == np.float16 else 2**7, (2, N // 10), dtype=np.uint16)
    sub |= rng.integers(0, 2, (2, N // 10), dtype=np.uint16) << 15
    with np.errstate(all="ignore"):
        near = (a[: N // 10].astype(np.float32) * 1.001).astype(dtype)
    a = np.concatenate([a, sub[0].view(dtype), a[: N // 10]])
    b = np.concatenate([b, sub[1].view(dtype), near])
    s = SPECIALS.astype(dtype)
    a = np.concatenate([a, np.repeat(s, s.size), s.repeat(64)])
    b = np.concatenate([b, np.tile(s, s.size), b[: s.size * 64]])
    assert (np.isinf(a.astype(np.float32))).sum() > 10
    return a, b


FIDELITY_OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}


def _fp(name, a, b):
    x, y = tensor(a), tensor(b)
    assert x.fmt.name == np.dtype(a.dtype).name  # factory keeps the array's own format, exactly
    with np.errstate(all="ignore"):
        return getattr(ops, name)(x, y).numpy()


@pytest.mark.parametrize("name", list(FIDELITY_OPS))
def test_float16_arithmetic_bit_identical(name):
    a, b = _operands(np.float16, 1)
    ref = FIDELITY_OPS[name]
    with np.errstate(all="ignore"):
        native = ref(a, b)  # numpy's float16 ufuncs: correctly rounded
        exact = ref(a.astype(np.float64), b.astype(np.float64)).astype(np.float16)  # float64, one rounding
    got = _fp(name, a, b)
    assert got.dtype == np.float16
    assert_same_bits(got, native, f"float16 {name} vs numpy float16")
    assert_same_bits(got, exact, f"float16 {name} vs float64 rounded once")


@pytest.mark.parametrize("name", list(FIDELITY_OPS))
def test_bfloat16_arithmetic_bit_identical(name):
    a, b = _operands(BF16, 2)
    ref = FIDELITY_OPS[name]
    with np.errstate(all="ignore"):
        f32_model = ref(a.astype(np.float32), b.astype(np.float32)).astype(BF16)
        # float64 has >= 2p+2 bits for p = 8, so rounding its result once more is correct; gfloat
        # does that rounding with its own (not ml_dtypes') code
        exact = gfloat_bf16(ref(a.astype(np.float64), b.astype(np.float64)))
    got = _fp(name, a, b)
    assert got.dtype == BF16
    assert_same_bits(got, f32_model, f"bfloat16 {name} vs float32 + ml_dtypes round")
    assert_same_bits(got, exact.astype(np.float32).astype(BF16), f"bfloat16 {name} vs gfloat")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", list(FIDELITY_OPS))
def test_low_arithmetic_matches_torch(dtype, name):
    torch = pytest.importorskip("torch")
    a, b = _operands(np.float16 if dtype == "float16" else BF16, 3)
    tdt = getattr(torch, dtype)
    ta = torch.from_numpy(bits(a).astype(np.int16)).view(tdt)
    tb = torch.from_numpy(bits(b).astype(np.int16)).view(tdt)
    tout = getattr(torch, name)(ta, tb)
    want = tout.view(torch.int16).numpy().astype(np.uint16).view(a.dtype)
    assert_same_bits(_fp(name, a, b), want, f"{dtype} {name} vs torch")


@pytest.mark.parametrize("fmt", ["float16", "bfloat16"])
@pytest.mark.parametrize("sa,sb", [((16, 64), (64, 8)), ((2, 5, 33), (33, 3))])
def test_matmul_is_float32_accumulate_rounded_once(fmt, sa, sb):
    rng = np.random.default_rng(7)
    dt = np.float16 if fmt == "float16" else BF16
    a = rng.standard_normal(sa).astype(dt)
    b = rng.standard_normal(sb).astype(dt)
    got = ops.matmul(tensor(a), tensor(b))
    assert got.fmt.name == fmt
    want = np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(dt)
    assert_same_bits(got.numpy(), want, "matmul")


@pytest.mark.parametrize("fmt", ["float16", "bfloat16"])
def test_matmul_exact_products_one_rounding(fmt):
    """Small integers: float32 accumulation is exact, so the result is the exact sum rounded
    once (float64 reference); a low-precision running sum (acc=fmt) swamps instead."""
    dt = np.float16 if fmt == "float16" else BF16
    rng = np.random.default_rng(8)
    a = rng.integers(-8, 9, (4, 300)).astype(dt)
    b = rng.integers(-8, 9, (300, 3)).astype(dt)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    want = exact.astype(np.float16) if fmt == "float16" else gfloat_bf16(exact)
    assert_same_bits(ops.matmul(tensor(a), tensor(b)).numpy(), np.asarray(want).astype(dt), "matmul")
    # counting by one: a float32 accumulator reaches 4096; a float16 / bfloat16 running sum
    # stalls at 2048 / 256 (numbers.md)
    ones_a, ones_b = tensor(np.ones((1, 4096)), fmt), tensor(np.ones((4096, 1)), fmt)
    assert ops.matmul(ones_a, ones_b).item() == 4096.0
    assert ops.matmul(ones_a, ones_b, acc=fmt).item() == (2048.0 if fmt == "float16" else 256.0)
    assert ops.sum(tensor(np.ones(4096), fmt)).item() == 4096.0
    assert ops.sum(tensor(np.ones(4096), fmt), acc=fmt).item() == (2048.0 if fmt == "float16" else 256.0)


@pytest.mark.parametrize("fmt,itemsize", [("float32", 4), ("float16", 2), ("bfloat16", 2),
                                          ("float8_e4m3fn", 1), ("float8_e5m2", 1)])
def test_storage_dtype_and_nbytes(fmt, itemsize):
    x = tensor(np.linspace(-2, 2, 60).reshape(6, 10), fmt)
    assert x.numpy().dtype.name == fmt
    assert x.nbytes == 60 * itemsize
    y = ops.add(x, x)
    assert y.numpy().dtype.name == fmt and y.nbytes == 60 * itemsize
    assert y.data.dtype.name == (fmt if get_backend().name == "numpy" else "float32")
    assert tensor(np.ones((6, 10)), "float16").nbytes * 2 == tensor(np.ones((6, 10))).nbytes


def test_tensor_factory_rounds_float64_once():
    # float64 -> bfloat16 directly: 1 + 2^-8 + 2^-30 lies just above the tie 1 + 2^-8; a detour
    # through float32 would drop the 2^-30 and round the tie to even (1.0)
    v = 1 + 2.0**-8 + 2.0**-30
    assert tensor([v], "bfloat16").item() == 1 + 2.0**-7
    assert tensor([2.0**-25], "float16").item() == 0.0  # the tie goes to 0 (numbers.md)
    assert tensor([2.0**-25 * 1.0001], "float16").item() == 2.0**-24
    f = tensor([1e-8 * 1024], "float16")
    assert bits(f.numpy()).tolist() == [0x00AC]  # 172 * 2^-24 (numbers.md, example a)
    assert f64(f)[0] == spacing(0.0, "float16") * 172
