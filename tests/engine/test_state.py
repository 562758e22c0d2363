"""``fpsim.state``, the one owner of program-wide state: ``state.environment`` sets variables for a
block (a child process inherits them) and restores them afterwards, when the block raises too."""

from __future__ import annotations

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
