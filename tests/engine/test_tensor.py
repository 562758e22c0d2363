"""The graph (node used twice, diamond, long chain, no_grad, accumulation, bad seeds) and
formats in the graph (promotion, gradient formats, underflow in backward).  References are
float64 numpy and numpy float16 / ml_dtypes arithmetic, never fpsim."""

import sys

import ml_dtypes
import numpy as np
import pytest
from helpers import bits, f64

from fpsim import Format, nn, ops
from fpsim.state import hooked
from fpsim.tensor import Tensor, is_grad_enabled, no_grad, promote, tensor

pytestmark = pytest.mark.both_backends  # every test here runs on numpy and numpy-f32 (conftest.py)

BF16 = ml_dtypes.bfloat16
RNG = np.random.default_rng(0)


# ------------------------------------------------------------------------------ graph


def test_node_used_twice():
    v = RNG.uniform(-2, 2, (3, 4))
    x = tensor(v, requires_grad=True)
    (x * x).sum().backward()
    assert np.array_equal(f64(x.grad), 2 * f64(x))  # 2x is exact in float32


def test_diamond():
    v = RNG.uniform(-1, 1, 5)
    x = tensor(v, requires_grad=True)
    a = x * 2
    b, c = a * 3, a + 1  # two paths from a to d
    (b * c).sum().backward()
    x64 = f64(x)
    np.testing.assert_allclose(f64(x.grad), 24 * x64 + 6, rtol=1e-6)  # d = 3a(a+1), a = 2x


def test_node_used_twice_in_float16_adds_rounded_contributions():
    x = tensor([1.5, -3.0], "float16", requires_grad=True)
    (x * (1 / 3) + x * (1 / 7)).sum().backward()
    # each contribution rounded into float16, then added and rounded once more (float16 grads)
    want = np.float16(np.float32(1 / 3)) + np.float16(np.float32(1 / 7))
    assert x.grad.fmt.name == "float16"
    assert bits(x.grad.numpy()).tolist() == [int(bits(np.array([want]))[0])] * 2


def test_long_chain_backward_is_iterative():
    assert sys.getrecursionlimit() < 10_000
    x = tensor([0.5, -1.0], requires_grad=True)
    y = x
    for i in range(10_000):
        y = y + 1.0 if i % 2 else y * 1.0
    assert y._op in ("add", "mul")
    y.sum().backward()
    assert x.grad.numpy().tolist() == [1.0, 1.0]
    # a chain that also fans in: y_k = y_{k-1} / 2 + x, so dy/dx = sum 2^-k = 2 - 2^-(n-1)
    y = x
    for _ in range(10_000):
        y = y * 0.5 + x
    y.sum().backward()
    assert x.grad.numpy().tolist() == [3.0, 3.0]  # 1 (before) + 2 (2 - 2^-9999 rounds to 2)


def test_no_grad_records_nothing():
    x = tensor([1.0, 2.0], requires_grad=True)
    with no_grad():
        assert not is_grad_enabled()
        y = (x * 2).exp()
    assert is_grad_enabled()
    assert not y.requires_grad and y._parents == () and y.is_leaf
    with pytest.raises(RuntimeError, match="does not require grad"):
        y.sum().backward()
    with pytest.raises(KeyError), no_grad():
        raise KeyError("inside no_grad")
    assert is_grad_enabled()  # restored after an exception too


def test_constants_and_detach_do_not_track():
    x = tensor([1.0, 2.0], requires_grad=True)
    y = tensor([3.0, 4.0])
    assert (x * y).requires_grad and not (y * 2).requires_grad
    d = x.detach()
    assert not d.requires_grad and np.array_equal(d.numpy(), x.numpy())
    (x * y + d).sum().backward()
    assert x.grad.numpy().tolist() == [3.0, 4.0] and y.grad is None


def test_gradients_accumulate_across_backward_calls():
    x = tensor([1.0, -2.0], requires_grad=True)
    (x * 3).sum().backward()
    (x * x).sum().backward()
    assert x.grad.numpy().tolist() == [3.0 + 2.0, 3.0 - 4.0]
    x.zero_grad()
    assert x.grad is None


def test_backward_seed_checks():
    x = tensor(np.ones((2, 3)), requires_grad=True)
    y = x * 2
    with pytest.raises(RuntimeError, match=r"scalar.*\(2, 3\)"):
        y.backward()
    with pytest.raises(ValueError, match=r"\(3, 2\).*\(2, 3\)"):
        y.backward(np.ones((3, 2)))
    y.backward(np.full((2, 3), 0.5), retain_graph=True)  # walked again below
    assert x.grad.numpy().tolist() == [[1.0] * 3] * 2
    y.backward(tensor(np.ones((2, 3))))
    assert x.grad.numpy().tolist() == [[3.0] * 3] * 2
    with pytest.raises(RuntimeError, match="does not require grad"):
        tensor([1.0]).backward()


def test_leaf_backward_and_item():
    x = tensor([2.5], requires_grad=True)
    x.backward()
    assert x.grad.item() == 1.0
    with pytest.raises(ValueError, match="one element"):
        tensor([1.0, 2.0]).item()


# ------------------------------------------------------------------------------ formats in the graph


@pytest.mark.parametrize("fa,fb,want", [
    ("float16", "float32", "float32"),
    ("bfloat16", "float32", "float32"),
    ("float16", "bfloat16", "float32"),
    ("float16", "float16", "float16"),
    ("bfloat16", "bfloat16", "bfloat16"),
    ("float8_e4m3fn", "float16", "float16"),
    ("float8_e5m2", "bfloat16", "bfloat16"),
    ("float8_e4m3fn", "float8_e5m2", "float16"),
])
def test_promotion(fa, fb, want):
    a = tensor([1.5, -0.25], fa, requires_grad=True)
    b = tensor([0.75, 2.0], fb, requires_grad=True)
    for y in (a + b, b * a, a - b, ops.matmul(a.reshape(1, 2), b.reshape(2, 1))):
        assert y.fmt.name == want
    (a * b).sum().backward()
    assert a.grad.fmt.name == fa and b.grad.fmt.name == fb  # gradients come back in each input's format
    assert promote(a.fmt, b.fmt).name == want


E3M4 = ml_dtypes.float8_e3m4
HAND_BUILT = {"ml_dtypes": Format("float8_e3m4", np.dtype(E3M4), 3, 4), "float32-held": Format("e3m4", np.float32, 3, 4)}


@pytest.mark.parametrize("kind", list(HAND_BUILT))
def test_a_hand_built_format_computes_with_the_others(kind):
    """A format the table does not have (float8_e3m4, in its ml_dtypes dtype or held in float32):
    stored rounded, promoted by the formats' fields, differentiated; references by ml_dtypes."""
    hand = HAND_BUILT[kind]
    va, vb = np.array([1.3, -0.7, 3.1], np.float32), np.array([0.5, 0.3, -2.0], np.float32)
    a = tensor(va, hand, requires_grad=True)
    b = tensor(vb, "float16", requires_grad=True)
    a32, b32 = va.astype(E3M4).astype(np.float32), vb.astype(np.float16).astype(np.float32)
    assert a.fmt is hand and a.nbytes == 3 and np.array_equal(bits(a.f32()), bits(a32))
    events = []
    with hooked(events.append):
        y = a * b
        w = a * a
        z = ops.matmul(a.reshape(1, 3), tensor(vb, "bfloat16").reshape(3, 1))
    assert (y.fmt.name, w.fmt, z.fmt.name) == ("float16", hand, "bfloat16")
    assert np.array_equal(bits(y.numpy()), bits((a32 * b32).astype(np.float16)))
    assert np.array_equal(bits(w.f32()), bits((a32 * a32).astype(E3M4).astype(np.float32)))
    dot = np.float32(np.sum(a32.astype(np.float64) * vb.astype(BF16).astype(np.float64)))  # exact, then once
    assert np.array_equal(bits(z.numpy().reshape(-1)), bits(np.array([dot]).astype(BF16)))
    assert [e.fmt for e in events if e.op == "mul"][1] is hand  # the hooks see the format itself
    (a * b).sum().backward()
    assert a.grad.fmt is hand and np.array_equal(bits(a.grad.f32()), bits(b32.astype(E3M4).astype(np.float32)))
    assert b.grad.fmt.name == "float16" and np.array_equal(bits(b.grad.numpy()), bits(a32.astype(np.float16)))


def test_float16_plus_bfloat16_is_exact_in_float32():
    a = tensor([1 + 2.0**-10], "float16")
    b = tensor([2.0**-7 * 3], "bfloat16")
    y = a + b
    assert y.fmt.name == "float32" and y.numpy().dtype == np.float32
    assert y.item() == 1 + 2.0**-10 + 3 * 2.0**-7  # neither 16-bit format holds this sum


def test_python_scalar_does_not_promote():
    x = tensor([1.0, 3.0], "float16", requires_grad=True)
    y = x * 1e-3
    assert y.fmt.name == "float16"
    # float32(x) * float32(1e-3), rounded once into float16
    want = (np.array([1.0, 3.0], np.float32) * np.float32(1e-3)).astype(np.float16)
    assert bits(y.numpy()).tolist() == bits(want).tolist()
    assert (2 ** -3 + x).fmt.name == "float16" and (x / 7).fmt.name == "float16"


def test_float16_activation_gets_float16_gradient():
    x = tensor([1.0, 2.0, 4.0], "float16", requires_grad=True)
    (x * (1 / 3)).sum().backward()
    assert x.grad.fmt.name == "float16" and x.grad.numpy().dtype == np.float16
    want = np.float16(np.float32(1 / 3))
    assert bits(x.grad.numpy()).tolist() == [int(bits(np.array([want]))[0])] * 3


def test_float32_param_through_cast_gets_float32_grad():
    rng = np.random.default_rng(1)
    w = tensor(rng.standard_normal((3, 4)), requires_grad=True)
    xv = rng.standard_normal((5, 4)).astype(np.float16)
    x = tensor(xv)
    seen = []
    with hooked(lambda ev: seen.append((ev.op, ev.direction, ev.fmt.name))):
        y = ops.matmul(x, ops.to_format(w, "float16").T)  # an fp16 matmul on a float32 param
        assert y.fmt.name == "float16"
        W = rng.standard_normal((5, 3)).astype(np.float32)
        y.backward(W)
    assert w.grad.fmt.name == "float32"
    # the seed is rounded into y's float16 gradient format, the matmul's weight gradient is
    # accumulated in float32 and rounded into float16 (the cast's output), then widened exactly
    W16 = W.astype(np.float16).astype(np.float32)
    g32 = W16.T @ xv.astype(np.float32)
    assert np.array_equal(w.grad.numpy(), g32.astype(np.float16).astype(np.float32))
    assert ("matmul", "backward", "float16") in seen and ("cast", "backward", "float32") in seen
    assert ("cast", "forward", "float16") in seen and ("matmul", "forward", "float16") in seen


def test_to_is_a_differentiable_cast():
    x = tensor([1 / 3, 2.0], requires_grad=True)
    h = x.half()
    assert h.fmt.name == "float16" and h.requires_grad
    assert h.to("float16") is h and x.float() is x
    assert h.bfloat16().fmt.name == "bfloat16"
    (h * 3).sum().backward()
    assert x.grad.fmt.name == "float32" and x.grad.numpy().tolist() == [3.0, 3.0]


def test_mean_gradient_2_pow_minus_20_survives_in_float16():
    n = 2**20
    x = tensor(np.ones(n), "float16", requires_grad=True)
    m = x.mean()
    assert m.fmt.name == "float16" and m.item() == 1.0
    m.backward()
    g = x.grad.numpy()
    assert g.dtype == np.float16
    # 2^-20 = 16 * 2^-24: a float16 subnormal, held exactly
    assert np.all(bits(g) == 0x0010) and float(g[0]) == 2.0**-20


def test_gradient_below_flush_threshold_becomes_zero_in_float16():
    x16 = tensor([1.0, -2.0, 0.5], "float16", requires_grad=True)
    x32 = tensor([1.0, -2.0, 0.5], "float32", requires_grad=True)
    (x16 * 1e-8).sum().backward()
    (x32 * 1e-8).sum().backward()
    # 1e-8 < 2^-25 (half the smallest float16 subnormal): it flushes to +0
    assert bits(x16.grad.numpy()).tolist() == [0, 0, 0]
    assert x32.grad.numpy().tolist() == [float(np.float32(1e-8))] * 3
    # loss scaling by 1024 keeps it: 1.024e-5 -> 172 * 2^-24, bits 0x00AC (numbers.md, example a)
    y = tensor([1.0], "float16", requires_grad=True)
    (y * 1e-8 * 1024).sum().backward()
    assert bits(y.grad.numpy()).tolist() == [0x00AC]
    assert float(y.grad.numpy()[0]) == 1.0251998901367188e-05


def test_grad_fmt_override():
    x = tensor([1.0, 2.0], "float16", requires_grad=True, grad_fmt="float8_e5m2")
    (x * 0.3).sum().backward()
    assert x.grad.fmt.name == "float8_e5m2"
    # 0.3 in e5m2 (2 mantissa bits): neighbours 0.25 and 0.3125; 0.3 is nearer 0.3125
    assert x.grad.numpy().astype(np.float32).tolist() == [0.3125, 0.3125]


def test_hooks_see_scopes_and_targets():
    model = nn.MLP([2, 3, 1], fmt="float16", seed=0)
    seen = []
    with hooked(lambda ev: seen.append((ev.op, ev.direction, ev.scope, ev.target))):
        loss = nn.mse_loss(model(tensor(np.ones((4, 2)), "float16")), np.zeros((4, 1)))
        loss.backward()
    assert ("linear", "forward", "0", "") in seen and ("linear", "forward", "2", "") in seen
    # linear is one fused op (as PyTorch's addmm): it rounds the weight's and the bias's gradients itself
    assert ("linear", "backward", "2", "weight") in seen and ("linear", "backward", "0", "bias") in seen
    assert ("mse_loss", "backward", "", "") in seen


# ------------------------------------------------------------------------------ tensor basics


@pytest.mark.parametrize("dtype,name", [(np.float16, "float16"), (BF16, "bfloat16"), (np.float32, "float32"),
                                        (np.float64, "float32"), (np.int64, "float32")])
def test_factory_default_format_follows_data(dtype, name):
    t = tensor(np.arange(3).astype(dtype))
    assert t.fmt.name == name and t.numpy().tolist() == [0.0, 1.0, 2.0]


def test_factory_bad_input():
    with pytest.raises(ValueError, match="fp17"):
        tensor([1.0], "fp17")
    with pytest.raises(TypeError, match="real"):
        tensor(1 + 2j)


def test_basic_properties():
    t = tensor(np.arange(6.0).reshape(2, 3), "bf16", requires_grad=True)
    assert t.shape == (2, 3) and t.ndim == 2 and t.size == 6 and len(t) == 2
    assert t.dtype.name == "bfloat16" and t.nbytes == 12 and t.is_leaf
    assert t.T.shape == (3, 2)
    assert "bfloat16" in repr(t) and "requires_grad=True" in repr(t)
    assert isinstance(t.numpy(), np.ndarray) and t.numpy().dtype == BF16
    assert Tensor(np.zeros(2, np.float32)).fmt.name == "float32"


@pytest.mark.parametrize("op", ["relu", "reshape", "transpose", "masked_fill"])
def test_moved_gradients_are_not_rounded_again_unless_the_format_changes(op):
    """The backward of an op that only moves or selects values hands on the stored gradient
    (tensor.Exact): nothing is rounded when the input's gradient format is the output's; into
    another gradient format it is rounded once, like any gradient - and hooks see it either way."""
    eye = np.eye(3, 4, dtype=bool)
    fwd = {"relu": ops.relu, "reshape": lambda t: t.reshape(4, 3), "transpose": lambda t: t.transpose(),
           "masked_fill": lambda t: ops.masked_fill(t, eye, 0.0)}[op]
    back = {"relu": lambda a: np.where(vals > 0, a, 0.0), "reshape": lambda a: a.reshape(3, 4),
            "transpose": lambda a: a.T, "masked_fill": lambda a: np.where(eye, 0.0, a)}[op]
    vals = np.linspace(-1.5, 2.0, 12).reshape(3, 4)
    shape = (4, 3) if op in ("reshape", "transpose") else (3, 4)
    g = ((1 + 2.0**-10) * np.arange(1, 13)).reshape(shape).astype(np.float16).astype(np.float64)  # not bfloat16's
    for grad_fmt, dtype in (("float16", np.float16), ("bfloat16", ml_dtypes.bfloat16)):
        x = tensor(vals, "float16", requires_grad=True, grad_fmt=grad_fmt)
        y = fwd(x)
        events = []
        with hooked(events.append):
            y.backward(tensor(g, "float16"))
        ours = [e for e in events if e.op == y._op]
        assert len(ours) == 1 and ours[0].direction == "backward" and ours[0].fmt.name == grad_fmt
        want = back(g).astype(dtype)  # g is exact in float16: one rounding, into grad_fmt
        assert x.grad.fmt.name == grad_fmt and np.array_equal(bits(x.grad.numpy()), bits(want))
        assert np.array_equal(bits(x.grad.f32()), bits(want.astype(np.float32)))  # the values held, not just shown
        if grad_fmt == "float16":  # nothing rounded: the hooks get the stored value alone
            assert ours[0].exact32 is None and np.array_equal(x.grad.f32(), back(g))
        else:  # the moved float32 gradient, rounded once
            assert np.array_equal(np.asarray(ours[0].exact32), back(g))


@pytest.mark.parametrize("fmt", ["fp4", "float6_e2m3fn", "e3m2", "e8m0"])
def test_block_element_formats_are_not_tensor_formats(fmt):
    """fp6 / fp4 / e8m0 exist only inside block-scaled formats: a tensor, a cast, a model or a
    gradient format in one of them is refused, naming it and the tensor formats."""
    import fpsim

    x = tensor([1.0, 2.5])
    msg = "is not a tensor format but an element or scale format of the block-scaled formats"
    for make in (lambda: tensor([1.0, 2.5], fmt), lambda: Tensor(np.ones(2, np.float32), fmt),
                 lambda: tensor([1.0], "float16", grad_fmt=fmt), lambda: x.to(fmt), lambda: ops.to_format(x, fmt),
                 lambda: nn.Linear(2, 2).to(fmt), lambda: fpsim.autocast(fmt)):
        with pytest.raises(ValueError, match=msg) as e:
            make()
        assert "float32, float16, bfloat16, float8_e4m3fn, float8_e5m2" in str(e.value)
    assert fpsim.quantize(np.ones(32, np.float32), "mxfp4").elements.dtype.name == "float4_e2m1fn"  # their place


def test_make_node_is_how_a_new_op_is_written():
    """``fpsim.tensor.make_node``: a float32 result rounded once into the format (the hooks see it)
    and a node whose backward hands float32 gradients to the parents."""
    from fpsim.tensor import make_node

    def cube(x):
        x32 = x.f32()
        return make_node(x32 * x32 * x32, x.fmt, (x,), lambda g, out: (g * 3 * x32 * x32,), "cube")

    v = np.array([1.1, -0.3, 2.5], np.float32)
    x = tensor(v, "bfloat16", requires_grad=True)
    events = []
    with hooked(events.append):
        y = cube(x)
    x32 = x.f32()
    assert np.array_equal(bits(y.numpy()), bits((x32 * x32 * x32).astype(BF16)))
    assert [(e.op, e.direction, e.fmt.name) for e in events] == [("cube", "forward", "bfloat16")]
    y.sum().backward()
    assert np.array_equal(bits(x.grad.numpy()), bits((np.float32(3) * x32 * x32).astype(BF16)))
    with no_grad():
        assert cube(x).is_leaf  # no graph where grad mode is off


# -- a block format's name where a tensor format goes (issue 42) ---------------------------------

@pytest.mark.parametrize("make, owner, name", [
    (lambda: Tensor(np.ones(2, np.float32), fmt="mxfp8"), "Tensor: fmt", "mxfp8"),
    (lambda: Tensor(np.ones(2, np.float32), grad_fmt="NVFP4"), "Tensor: grad_fmt", "NVFP4"),
    (lambda: tensor([1.0], "mxfp8"), "tensor: fmt", "mxfp8"),
    (lambda: tensor([1.0]).to("mxfp8"), "Tensor.to: fmt", "mxfp8"),
])
def test_a_block_formats_name_as_a_tensors_format_says_it_is_one(make, owner, name):
    block = {"mxfp8": "mxfp8_e4m3", "NVFP4": "nvfp4"}[name]
    with pytest.raises(ValueError, match=rf"^{owner} '{name}' is the block-scaled format {block}: a tensor is stored "
                                         rf"in a tensor format \(float32, .*fpsim\.quantize\(x, '{block}'\)"):
        make()  # was "unknown format 'mxfp8'; known: ..." (with no word of the block formats)


def test_other_format_refusals_are_unchanged():
    with pytest.raises(ValueError, match=r"^unknown format 'fp17'; known: float32"):
        tensor([1.0], "fp17")
    with pytest.raises(ValueError, match=r"^float4_e2m1fn is not a tensor format but an element or scale format"):
        Tensor(np.ones(2, np.float32), fmt="fp4")


# -- Tensor(data, fmt) holds fmt's values whatever it is given (issue 42) ---------------------------

def test_tensor_of_numbers_in_another_dtype_rounds_them_into_its_format():
    t = Tensor(np.array([1.5, 0.1]), fmt="bf16")  # float64 data: held as given, 0.1 in a "bfloat16" tensor
    assert t.data.dtype == t.backend.storage_dtype(t.fmt) and t.fmt.name == "bfloat16"  # numpy: ml_dtypes.bfloat16
    assert t.f32().tolist() == [1.5, 0.10009765625]  # 0.1's nearest bfloat16: 0x3DCD = 205 * 2**-11
    assert Tensor(np.array([2049.0]), fmt="fp16").f32().tolist() == [2048.0]  # the tie to even
    lst = Tensor([1.0, 2.0])  # a list: was "'list' object has no attribute 'dtype'" at its first use
    assert lst.data.dtype == np.float32 and lst.f32().tolist() == [1.0, 2.0]
    be = lst.backend
    with pytest.raises(TypeError, match=r"^expected a number or an array of numbers, got str"):
        Tensor("a")
    same = np.array([1.0, 3.0], be.storage_dtype(t.fmt))
    assert Tensor(same, fmt="bf16").data is same  # already in the storage dtype: kept, not copied
