"""``Tensor.backward`` frees the graph it walked: a second call raises as PyTorch's does, and
``retain_graph=True`` walks it again and accumulates - checked against PyTorch on the same code;
fpsim frees a graph that saved nothing too (a documented departure)."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.both_backends  # every test here runs on numpy and numpy-f32 (conftest.py)


def _graph(x):
    """The same graph in fpsim and PyTorch (same code): tanh and a product save tensors in both."""
    return (x * x).tanh().sum()


def test_backward_twice_raises_as_pytorch_does_and_retain_graph_accumulates():
    torch = pytest.importorskip("torch")
    from fpsim import tensor

    v = np.array([0.5, -0.75, 0.25], np.float32)  # away from tanh's saturation, where 1 - y*y cancels
    tx = torch.tensor(v, requires_grad=True)
    tl = _graph(tx)
    tl.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        tl.backward()
    x = tensor(v, requires_grad=True)
    loss = _graph(x)
    loss.backward()
    once = x.grad.numpy().copy()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()
    assert np.array_equal(x.grad.numpy(), once)  # nothing accumulated by the refused call
    np.testing.assert_allclose(once, tx.grad.numpy(), rtol=2e-7)
    # retain_graph=True: walk it twice, the gradient doubles - in both
    tx.grad = None
    tl = _graph(tx)
    tl.backward(retain_graph=True)
    tl.backward()
    x.grad = None
    loss = _graph(x)
    loss.backward(retain_graph=True)
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=2e-7)
    np.testing.assert_array_equal(x.grad.numpy(), 2 * once)
    with pytest.raises(RuntimeError, match="second time"):
        loss.backward()  # the last call did not retain it


def test_a_graph_of_saved_nothing_is_freed_too_a_departure_from_pytorch():
    torch = pytest.importorskip("torch")
    from fpsim import tensor

    tx = torch.ones(3, requires_grad=True)
    tl = (tx + 1).sum()
    tl.backward()
    tl.backward()  # PyTorch: add and sum save no tensors, so nothing was freed
    assert tx.grad.tolist() == [2.0] * 3
    x = tensor(np.ones(3), requires_grad=True)
    loss = (x + 1).sum()
    loss.backward()
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        loss.backward()  # fpsim frees every graph it walked (docs/guarantees.md)
    assert x.grad.numpy().tolist() == [1.0] * 3
