"""The engine's ops and tensors under unusual input - each defect reproduced here
first, then pinned against PyTorch (or float64 numpy where PyTorch is not installed)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fpsim
from fpsim import ops

torch = pytest.importorskip("torch")
F = torch.nn.functional


def t(a, fmt="float32", backend="numpy", grad=True):
    return fpsim.tensor(np.asarray(a, np.float32), fmt, requires_grad=grad, backend=backend)


# -- Tensor.to(backend=) keeps the graph ----------------------------------------------------------

@pytest.mark.parametrize("src, dst", [("numpy", "numpy-f32"), ("numpy-f32", "numpy")])
@pytest.mark.parametrize("fmt", ["float16", "bfloat16", "float32"])
def test_to_backend_keeps_the_graph_and_the_gradient_comes_home(src, dst, fmt):
    vals = np.array([0.1, -2.5, 3.0, 1e-3], np.float32)
    x = fpsim.tensor(vals, fmt, requires_grad=True, backend=src)
    y = x.to(backend=dst)
    assert y.backend.name == dst and y.requires_grad and not y.is_leaf
    assert np.array_equal(y.numpy().astype(np.float64), x.numpy().astype(np.float64))
    (y * y).sum().backward()  # d/dx sum(x*x) = 2x, stored in x's format on x's backend
    assert x.grad is not None and x.grad.backend.name == src
    tx = torch.tensor(x.numpy().astype(np.float64), dtype=getattr(torch, fmt), requires_grad=True)
    (tx * tx).sum().backward()
    assert np.array_equal(x.grad.numpy().astype(np.float64), tx.grad.to(torch.float64).numpy())


def test_to_backend_of_a_tensor_without_grad_is_a_plain_copy():
    x = t([1.0, 2.0], grad=False)
    y = x.to(backend="numpy-f32")
    assert not y.requires_grad and y.backend.name == "numpy-f32" and np.array_equal(y.numpy(), x.numpy())


# -- masked_fill(value=None) ----------------------------------------------------------------------

@pytest.mark.parametrize("value", [None, "1", True, [1.0]])
def test_masked_fill_refuses_a_value_that_is_not_a_number(value):
    x, m = t([1.0, 2.0, 3.0]), np.array([True, False, True])
    with pytest.raises(TypeError, match="masked_fill: value must be a real number"):
        ops.masked_fill(x, m, value)
    if value is None:
        with pytest.raises(TypeError):
            torch.ones(3).masked_fill(torch.tensor(m), value)


# -- empty reductions, softmax over an empty axis, attention with no keys -------------------------

@pytest.mark.parametrize("shape, axis", [((0,), None), ((3, 0), 1), ((3, 0), None), ((0, 4), 0), ((2, 0, 3), (1, 2))])
def test_mean_of_nothing_is_nan_as_in_pytorch(shape, axis):
    x = t(np.zeros(shape))
    y = ops.mean(x, axis)
    tx = torch.zeros(shape, requires_grad=True)
    ty = tx.mean() if axis is None else tx.mean(dim=axis)
    assert y.shape == tuple(ty.shape)
    assert np.array_equal(y.numpy(), ty.detach().numpy(), equal_nan=True) and np.isnan(y.numpy()).all()
    ops.sum(y).backward()
    ty.sum().backward()
    assert x.grad.shape == tuple(tx.grad.shape) == shape


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("shape, axis", [((3, 0), -1), ((0,), 0), ((2, 0, 4), 1)])
def test_softmax_over_an_empty_axis_is_empty_as_in_pytorch(op, shape, axis):
    x = t(np.zeros(shape))
    y = getattr(ops, op)(x, axis)
    ty = getattr(torch, op)(torch.zeros(shape), axis)
    assert y.shape == tuple(ty.shape) == shape
    ops.sum(y).backward()
    assert x.grad.shape == shape


def test_softmax_axis_that_does_not_exist_is_named():
    with pytest.raises(ValueError, match="softmax: axis 2 does not exist for a tensor of shape"):
        ops.softmax(t(np.zeros((2, 3))), 2)


@pytest.mark.parametrize("op", ["sum", "mean", "max"])
@pytest.mark.parametrize("axis", ["a", 1.5, True, (0, "b")])
def test_a_reduction_axis_that_is_no_integer_is_named(op, axis):
    # 'a' was "'<=' not supported between instances of 'int' and 'str'", 1.5 "'float' object is not iterable"
    with pytest.raises(TypeError, match=rf"^{op}: axis must be an integer, a tuple of integers or None, got "):
        getattr(ops, op)(t(np.zeros((2, 3))), axis=axis)


@pytest.mark.parametrize("axis", [np.int64(1), np.array([0]), [0, 1], range(2)])
def test_a_reduction_takes_numpys_integer_axes_as_torch_takes_them(axis):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)  # small integers: every sum and mean exact in float32
    dims = [int(a) for a in np.atleast_1d(axis)]  # np.int64(1) was "'numpy.int64' object is not iterable"
    assert ops.sum(t(x), axis=axis).f32().tolist() == torch.sum(torch.from_numpy(x), dim=dims).tolist()
    assert ops.mean(t(x), axis=axis).f32().tolist() == torch.mean(torch.from_numpy(x), dim=dims).tolist()
    assert ops.max(t(x), axis=axis).f32().tolist() == torch.amax(torch.from_numpy(x), dim=dims).tolist()


@pytest.mark.parametrize("fmt", ["float32", "float16"])
def test_attention_with_no_keys_is_zeros_as_in_pytorch(fmt):
    q, k, v = t(np.ones((1, 2, 4)), fmt), t(np.ones((1, 0, 4)), fmt), t(np.ones((1, 0, 3)), fmt)
    out = ops.scaled_dot_product_attention(q, k, v)
    tq = torch.ones(1, 2, 4, dtype=getattr(torch, fmt), requires_grad=True)
    tout = F.scaled_dot_product_attention(tq, torch.ones(1, 0, 4, dtype=tq.dtype), torch.ones(1, 0, 3, dtype=tq.dtype))
    assert np.array_equal(out.numpy().astype(np.float64), tout.detach().to(torch.float64).numpy())
    ops.sum(out).backward()
    tout.sum().backward()
    assert np.array_equal(q.grad.numpy().astype(np.float64), tq.grad.to(torch.float64).numpy())


def test_attention_with_no_queries_is_empty():
    q, k, v = t(np.ones((1, 0, 4))), t(np.ones((1, 5, 4))), t(np.ones((1, 5, 3)))
    assert ops.scaled_dot_product_attention(q, k, v).shape == (1, 0, 3)


# -- numpy arrays given to ops: one TypeError naming the op and the argument -------------------------

X = np.ones((2, 3), np.float32)
UNARY = ["exp", "log", "sqrt", "tanh", "sigmoid", "relu", "gelu", "abs", "neg", "sum", "mean", "max", "softmax",
         "log_softmax", "transpose"]


@pytest.mark.parametrize("name", UNARY)
def test_unary_ops_given_a_numpy_array_name_the_op_and_argument(name):
    with pytest.raises(TypeError, match=rf"^{name}: x must be a Tensor, got ndarray"):
        getattr(ops, name)(X)


@pytest.mark.parametrize("call, match", [
    (lambda: ops.reshape(X, (3, 2)), "reshape: x must be a Tensor"),
    (lambda: ops.getitem(X, 0), "getitem: x must be a Tensor"),
    (lambda: ops.pow(X, 2), "pow: x must be a Tensor"),
    (lambda: ops.masked_fill(X, X > 0, 0.0), "masked_fill: x must be a Tensor"),
    (lambda: ops.layer_norm(X, 3), "layer_norm: x must be a Tensor"),
    (lambda: ops.layer_norm(t(X), 3, np.ones(3)), "layer_norm: weight must be a Tensor or None"),
    (lambda: ops.linear(t(X), np.ones((2, 3))), "linear: weight must be a Tensor"),
    (lambda: ops.embedding(np.array([0]), X), "embedding: weight must be a Tensor"),
    (lambda: ops.concat([t(X), X]), r"concat: tensors\[1\] must be a Tensor"),
    (lambda: ops.mse_loss(X, t(X)), "mse_loss: pred must be a Tensor"),
    (lambda: ops.scaled_dot_product_attention(X, t(X), t(X)), "scaled_dot_product_attention: q must be a Tensor"),
    (lambda: ops.add(X, X), "add: one operand must be a Tensor"),
    (lambda: ops.matmul(X, X.T), "matmul: one operand must be a Tensor"),
    (lambda: ops.to_format(X, "float16"), "to_format: x must be a Tensor"),
])
def test_other_ops_given_numpy_arrays_name_the_op_and_argument(call, match):
    with pytest.raises(TypeError, match=match):
        call()


def test_numpy_constants_still_combine_with_tensors_in_arithmetic():
    x = t([1.0, 2.0], "float16")
    assert (x * np.float32(3)).numpy().tolist() == [3.0, 6.0] and (np.ones(2) + x).fmt.name == "float16"
    assert ops.linear(np.ones((1, 2), np.float32), t([[1.0, 2.0]])).numpy().tolist() == [[3.0]]
    assert ops.mse_loss(x, np.zeros(2)).item() == 2.5


# -- one backend rule for every op ---------------------------------------------------------------

def _mixed(a="numpy", b="numpy-f32"):
    return (lambda *shape, v=1.0: fpsim.tensor(np.full(shape, v, np.float32), backend=a),
            lambda *shape, v=1.0: fpsim.tensor(np.full(shape, v, np.float32), backend=b))


A, B = _mixed()
MIXED = {
    "add": lambda: A(2) + B(2),
    "matmul": lambda: A(2, 2) @ B(2, 2),
    "linear": lambda: ops.linear(A(1, 2), B(3, 2)),
    "linear-bias": lambda: ops.linear(A(1, 2), A(3, 2), B(3)),
    "layer_norm": lambda: ops.layer_norm(A(2, 3), 3, B(3)),
    "concat": lambda: ops.concat([A(2), B(2)]),
    "concat-generator": lambda: ops.concat(x for x in (A(2), B(2))),
    "embedding": lambda: ops.embedding(fpsim.tensor(np.array([0]), backend="numpy-f32"), A(3, 2)),
    "mse_loss": lambda: ops.mse_loss(A(2), B(2)),
    "getitem-index": lambda: ops.getitem(A(3), B(1, v=0.0)),
    "attention": lambda: ops.scaled_dot_product_attention(A(1, 2, 4), B(1, 2, 4), A(1, 2, 4)),
}


@pytest.mark.parametrize("name", list(MIXED))
def test_every_op_refuses_tensors_on_two_backends_naming_both(name):
    with pytest.raises(ValueError, match="different backends: (numpy and numpy-f32|numpy-f32 and numpy)"):
        MIXED[name]()


def test_a_move_across_backends_is_the_way_to_mix_them():
    a, b = A(2, v=2.0), B(2, v=3.0)
    assert (a + b.to(backend="numpy")).numpy().tolist() == [5.0, 5.0]
    assert not math.isnan(ops.mse_loss(a.to(backend="numpy-f32"), b).item())


def test_to_backend_graph_crosses_the_strict_cupy_standin_and_back():
    from support.cupy_standin import GuardArray, GuardBackend

    guard = GuardBackend()
    for fmt in ("float16", "bfloat16"):
        x = fpsim.tensor([0.5, -1.5, 3.0], fmt, requires_grad=True)
        y = x.to(backend=guard)
        assert isinstance(y.data, GuardArray) and not y.is_leaf
        (y * y).sum().backward()  # computed on the stand-in; the gradient comes home to numpy
        assert x.grad.backend.name == "numpy" and x.grad.numpy().astype(np.float64).tolist() == [1.0, -3.0, 6.0]
        w = fpsim.tensor([2.0, 4.0], fmt, requires_grad=True, backend=guard)
        ops.sum(w.to(backend="numpy") * 3.0).backward()
        assert isinstance(w.grad.data, GuardArray) and w.grad.numpy().tolist() == [3.0, 3.0]


@pytest.mark.parametrize("shape", [-1, 6, np.int64(6), [3, -1]])
def test_reshape_takes_one_integer_as_numpy_does(shape):  # -1 and 6 were "'int' object is not iterable"
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert ops.reshape(t(x), shape).f32().tolist() == np.reshape(x, shape).tolist()


@pytest.mark.parametrize("shape", ["ab", (1.5, 4), None])
def test_reshape_to_what_is_no_shape_is_named(shape):  # "ab" was "'str' object cannot be interpreted as an integer"
    with pytest.raises(TypeError, match=r"^reshape: shape must be an integer or a tuple of integers, got "):
        ops.reshape(t(np.zeros((2, 3))), shape)
