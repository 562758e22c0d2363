"""Run the engine's tests on both numpy backends; keep freed memory for reuse, as fpsim's commands do.

Every test in the modules of ``ON_BOTH`` runs twice: once with the default backend ``numpy``
(tensors stored in their real dtypes) and once with ``numpy-f32`` as the default (the same
values held in float32 arrays), so "the same numbers bit for bit" is checked by the same
assertions.  A test about the real storage dtypes themselves is marked ``real_storage`` and
skipped on the float32 carrier.  ``FPSIM_BACKEND=numpy-f32 pytest`` runs the whole suite on it.

Each test process (and, through the environment, the processes it starts: lab kernels, --jobs
workers) runs with glibc's allocator thresholds that ``fpsim`` commands set
(``fpsim.tools.allocator``): the training steps the tests run are faster, their bits the same.
"""

from __future__ import annotations

import pytest

import fpsim.backend as B
from fpsim.tools.allocator import keep_freed_memory

ON_BOTH = {"test_ops", "test_tensor", "test_amp", "test_nn_optim", "test_monitor", "test_monitor_fast",
           "test_trace", "test_clip", "test_transformer_ops", "test_transformer", "test_checkpoint",
           "test_reliability", "test_block_training"}


def pytest_configure(config):
    keep_freed_memory()


def pytest_generate_tests(metafunc):
    if metafunc.module.__name__.rsplit(".", 1)[-1] in ON_BOTH and B._DEFAULT == "numpy":
        metafunc.parametrize("default_backend", ["numpy", "numpy-f32"], indirect=True)


@pytest.fixture(autouse=True)
def default_backend(request, monkeypatch):
    """The backend ``get_backend(None)`` returns during the test (its name)."""
    name = getattr(request, "param", B._DEFAULT)
    if name != B._DEFAULT:
        monkeypatch.setattr(B, "_DEFAULT", name)
    if name != "numpy" and request.node.get_closest_marker("real_storage"):
        pytest.skip("about numpy's real storage dtypes; numpy-f32 holds the values in float32")
    return name

