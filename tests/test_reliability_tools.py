"""Issue 28: the `fpsim` commands under an unusable environment - each defect reproduced here
first, then pinned: one line on stderr and exit 2, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fpsim import backend as B

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fpsim_cmd(*argv, env=None, timeout=300):
    env = {**os.environ, "PYTHONPATH": ROOT, "OPENBLAS_NUM_THREADS": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "fpsim.tools.cli", *map(str, argv)], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


@pytest.mark.skipif(B.BACKENDS["cupy"].available(), reason="CuPy with a GPU is available here")
def test_fpsim_backend_cupy_without_a_gpu_is_one_line_naming_the_variable():
    out = fpsim_cmd("compare", "--recipes", "fp32", "--steps", "1", "--figure", "none", "--quiet",
                    env={"FPSIM_BACKEND": "cupy"})
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("fpsim compare: error: ") and last.endswith(
        "the environment variable FPSIM_BACKEND='cupy' names a backend that is not available here (it needs CuPy "
        "and a CUDA GPU); unset it or set FPSIM_BACKEND=numpy")


@pytest.mark.skipif(B.BACKENDS["cupy"].available(), reason="CuPy with a GPU is available here")
def test_fpsim_formats_still_runs_with_an_unusable_fpsim_backend():
    out = fpsim_cmd("formats", env={"FPSIM_BACKEND": "cupy"})
    assert out.returncode == 0 and "float16" in out.stdout, out.stderr
