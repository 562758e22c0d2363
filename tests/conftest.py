"""Run the engine's tests on both numpy backends; keep freed memory for reuse, as fpsim's commands do.

Every test in a module marked ``both_backends`` (``pytestmark = pytest.mark.both_backends`` in the
file itself) runs twice: once with the default backend ``numpy``
(tensors stored in their real dtypes) and once with ``numpy-f32`` as the default (the same
values held in float32 arrays), so "the same numbers bit for bit" is checked by the same
assertions.  A test about the real storage dtypes themselves is marked ``real_storage`` and
skipped on the float32 carrier.  ``FPSIM_BACKEND=numpy-f32 pytest`` runs the whole suite on it.

Each test process (and, through the environment, the processes it starts: lab kernels, --jobs
workers) runs with glibc's allocator thresholds that ``fpsim`` commands set
(``fpsim.tools.allocator``): the training steps the tests run are faster, their bits the same.

fpsim's own modules are byte-compiled once at the start (``_compile_fpsim``), for the processes the
tests start.

Runs read by tests in several modules (the reference task's default runs, the findings' quick
runs: ``support.shared_runs``) are made once per session: under pytest-xdist the workers share
them through the session's temporary folder (``shared_runs_folder``).

The longest modules are collected first (``LONGEST_FIRST``), so that pytest-xdist, handing out
whole modules in collection order, never starts one of them last.
"""

from __future__ import annotations

import pytest
from support.shared_runs import set_folder

import fpsim.backend as B
from fpsim.tools.allocator import keep_freed_memory

# The modules that take longest, longest first (seconds in one run on 2 cores, 2026-12-02: labs 195,
# experiments 40, fp8 34, bf16_updates 25, findings 25, figures 19, formats 19, compareplot 17,
# determinism 17, commands_bad_input 16, tinygpt_task 14, block_formats 13, labs_html 13,
# compare_jobs 13, tensorcore 12, pipeline 10; every other module under 10 - the property tests, once one
# 14 s module, are split by subject into *_fuzz.py files of a few seconds each; added 2026-12-04, when
# they were collected 148th, 100th and 48th of 150 modules: samebits 50-73, labs_wheel 19-38,
# pipeline_docs_commands 13-27, quiet - under load).  They are collected
# first and the rest after, in their own order: pytest-xdist hands out whole modules in that order
# (pyproject: --dist loadscope --no-loadscope-reorder), so a long module never starts last while
# the other worker has nothing left to do.  Only the order changes, never what runs.
LONGEST_FIRST = ("test_labs", "test_samebits", "test_experiments", "test_fp8", "test_bf16_updates", "test_findings",
                 "test_labs_wheel", "test_figures", "test_formats", "test_compareplot", "test_determinism",
                 "test_commands_bad_input", "test_tinygpt_task", "test_pipeline_docs_commands", "test_block_formats",
                 "test_labs_html", "test_compare_jobs", "test_tensorcore", "test_pipeline")


def pytest_configure(config):
    keep_freed_memory()
    if not hasattr(config, "workerinput"):  # once, in the process that starts the workers
        _compile_fpsim()


def _compile_fpsim() -> None:
    """Byte-compile fpsim's own modules into their ``__pycache__`` (only those out of date), as pip
    does for an installed package but not for an editable one: the suite starts a few hundred Python
    processes (CLI commands, lab kernels, --jobs workers), and with no bytecode on disk - a fresh
    clone, or ``PYTHONDONTWRITEBYTECODE=1``, which stops Python writing it on import - each would
    compile the modules it imports again (about 0.4 s a process).  Where the folder is read-only,
    nothing is written and nothing fails."""
    import compileall
    from pathlib import Path

    compileall.compile_dir(Path(B.__file__).parent, quiet=2, workers=1)


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # stable: the rest keep their order


@pytest.fixture(scope="session", autouse=True)
def shared_runs_folder(request, tmp_path_factory):
    """Under pytest-xdist, the folder of this session where the workers share their runs (every
    worker's temporary folder sits in the session's root); in one process, none (memory is shared)."""
    folder = None
    if hasattr(request.config, "workerinput"):
        folder = tmp_path_factory.getbasetemp().parent / "shared-runs"
        folder.mkdir(exist_ok=True)
    set_folder(folder)
    yield folder
    set_folder(None)


def pytest_generate_tests(metafunc):
    if metafunc.definition.get_closest_marker("both_backends") and B._DEFAULT == "numpy":
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

