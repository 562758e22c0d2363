"""``fpsim.state``, the one owner of program-wide state: ``state.environment`` sets variables for a
block (a child process inherits them) and restores them afterwards, when the block raises too."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.both_backends  # every test here runs on numpy and numpy-f32 (conftest.py)


def test_environment_is_restored_exceptions_included(monkeypatch):
    """state.environment: set inside (a child process would inherit it), as it was afterwards -
    a variable that was not set is removed again - also when the block raises."""
    import os

    from fpsim import state

    monkeypatch.setenv("FPSIM_TEST_KEPT", "before")
    monkeypatch.delenv("FPSIM_TEST_NEW", raising=False)
    with pytest.raises(KeyError):
        with state.environment({"FPSIM_TEST_KEPT": "inside", "FPSIM_TEST_NEW": "1"}):
            assert os.environ["FPSIM_TEST_KEPT"] == "inside" and os.environ["FPSIM_TEST_NEW"] == "1"
            raise KeyError("boom")
    assert os.environ["FPSIM_TEST_KEPT"] == "before" and "FPSIM_TEST_NEW" not in os.environ


def test_one_no_grad_object_entered_again_nested_and_as_a_decorator():
    """As torch.no_grad(): one object used for several blocks (it raised contextlib's AttributeError
    on the second), nested, and decorating a function."""
    import fpsim

    ng = fpsim.no_grad()
    for _ in range(2):
        with ng:
            assert not fpsim.state.is_grad_enabled()
        assert fpsim.state.is_grad_enabled()
    with ng:
        with ng:
            assert not fpsim.state.is_grad_enabled()
        assert not fpsim.state.is_grad_enabled()
    assert fpsim.state.is_grad_enabled()

    @fpsim.no_grad()
    def evaluate():
        return fpsim.state.is_grad_enabled()

    assert evaluate() is False and evaluate() is False and fpsim.state.is_grad_enabled()
    with pytest.raises(RuntimeError, match="exited a block that was not entered"):
        ng.__exit__(None, None, None)


@pytest.mark.parametrize("seed", ["a", -1, 1.5, True])
def test_manual_seed_names_a_bad_seed(seed):
    import fpsim

    with pytest.raises(ValueError, match=rf"^manual_seed: seed must be an integer >= 0, got {re.escape(repr(seed))}$"):
        fpsim.manual_seed(seed)


@pytest.mark.parametrize("params", [None, 3])
def test_an_optimizer_without_an_iterable_of_parameters_says_so(params):
    import fpsim

    with pytest.raises(TypeError, match=r"^params must be an iterable of Tensors \(model.parameters\(\)\), got "):
        fpsim.optim.SGD(params, lr=0.1)
    with pytest.raises(TypeError, match="params must be an iterable"):
        fpsim.optim.SGD(fpsim.tensor([1.0], requires_grad=True), lr=0.1)
