"""The same run gives the same bits whatever the BLAS thread count of the process
(OPENBLAS_NUM_THREADS / OMP_NUM_THREADS, threadpoolctl, ``fpsim.set_blas_threads``) and whatever
the process layout (--jobs, Dask).

OpenBLAS gives other float32 bits for the same ``a @ b`` at 1 and at 2 threads (other kernels,
another order of the K sum).  fpsim's products are the exact sums rounded once
(fpsim.numerics.matmul_f32, checked against fractions in test_numerics), so no thread count can
change them: the thread count fpsim pins its products to is a speed setting only."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import threadpoolctl

import fpsim
from fpsim import nn, state
from fpsim.numerics import matmul_f32, sum_f32

# shapes of the reference task and the MLP bench; at 2 threads OpenBLAS's Haswell kernels give other
# float32 bits than at 1 for all of these
SHAPES = [((512, 64), (64, 32)), ((16384, 64), (64, 32)), ((64, 16384), (16384, 32)),
          ((128, 784), (784, 256)), ((32, 512), (512, 64))]


def _numpy_blas_threads() -> int:
    infos = [i for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
    if not infos:
        pytest.skip("threadpoolctl finds no BLAS to set in this process")
    return infos[0]["num_threads"]


def _operands(sa, sb, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)


def test_the_default_is_one_thread_and_the_setting_is_checked(monkeypatch):
    assert state.blas_threads() == 1
    for bad in (0, -1, 1.5, "2", True):
        with pytest.raises(ValueError, match="set_blas_threads"):
            state.set_blas_threads(bad)
    monkeypatch.setenv("FPSIM_BLAS_THREADS", "two")
    with pytest.raises(ValueError, match="FPSIM_BLAS_THREADS must be a whole number >= 1, got 'two'"):
        state._threads_from_environment()


def test_pinned_blas_gives_the_users_count_back():
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        assert _numpy_blas_threads() == 2
        with state.pinned_blas():
            inside = _numpy_blas_threads()
            with state.pinned_blas():
                nested = _numpy_blas_threads()
            after_nested = _numpy_blas_threads()
        assert (inside, nested, after_nested) == (1, 1, 1)
        assert _numpy_blas_threads() == 2  # the user's setting, untouched outside fpsim's calls
        with pytest.raises(KeyError):
            with state.pinned_blas():
                raise KeyError("inside")
        assert _numpy_blas_threads() == 2


@pytest.mark.parametrize("sa,sb", SHAPES, ids=[f"{a}@{b}" for a, b in SHAPES])
def test_matmul_bits_depend_on_no_thread_count(sa, sb):
    a, b = _operands(sa, sb)
    ref = matmul_f32(a, b)
    try:
        for pinned in (1, 2):
            state.set_blas_threads(pinned)
            for threads in (1, 2):
                with threadpoolctl.threadpool_limits(threads, user_api="blas"):
                    got = fpsim.ops.matmul(fpsim.tensor(a), fpsim.tensor(b)).numpy()
                assert got.tobytes() == ref.tobytes(), f"{threads} user threads, {pinned} pinned"
    finally:
        state.set_blas_threads(1)


def test_a_training_step_depends_on_no_thread_count():
    """A Linear's output, its weight gradient and its bias gradient: the exact sums, at 1 and 2
    user threads and 1 and 2 pinned threads."""
    x, w = _operands((16384, 64), (32, 64), seed=1)
    ref_out = matmul_f32(x, w.T)
    ref_gw = matmul_f32(np.ones((16384, 32), np.float32).T, x)
    try:
        for pinned in (1, 2):
            state.set_blas_threads(pinned)
            for threads in (1, 2):
                lin = nn.Linear(64, 32)
                lin.weight.data[...] = w
                with threadpoolctl.threadpool_limits(threads, user_api="blas"):
                    out = lin(fpsim.tensor(x))
                    out.sum().backward()
                assert out.numpy().tobytes() == (ref_out + lin.bias.f32()).tobytes()
                assert lin.weight.grad.numpy().tobytes() == ref_gw.tobytes()
                assert lin.bias.grad.numpy().tobytes() == sum_f32(np.ones((16384, 32), np.float32), 0).tobytes()
    finally:
        state.set_blas_threads(1)


def _compare_json(args, threads=None, backend=None):
    """``fpsim compare ARGS --json`` in a fresh process with the given BLAS thread variables; the
    results without their timings."""
    env = {k: v for k, v in os.environ.items() if k not in ("FPSIM_BLAS_THREADS", "FPSIM_BACKEND")}
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.pop(name, None)
        if threads is not None:
            env[name] = str(threads)
    if backend is not None:
        env["FPSIM_BACKEND"] = backend
    cmd = [sys.executable, "-m", "fpsim.tools.cli", "compare", *args, "--json", "--figure", "none", "--quiet"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)

    def strip(d):
        if isinstance(d, dict):
            return {k: strip(v) for k, v in d.items() if k != "seconds"}
        return d
    return strip(results)


RUNS = {
    "reference task": ["--recipes", "fp32", "fp16-dynamic", "bf16-master", "--steps", "5"],
    "block recipe": ["--recipes", "mxfp8", "--steps", "4"],
    "tiny GPT": ["--task", "tinygpt", "--recipes", "fp16-amp", "--steps", "3"],
}


@pytest.mark.parametrize("name", list(RUNS))
def test_a_run_gives_the_same_bits_at_one_and_two_blas_threads(name):
    one = _compare_json(RUNS[name], threads=1)
    two = _compare_json(RUNS[name], threads=2)
    assert one == two


def test_numpy_f32_gives_the_same_bits_at_one_and_two_blas_threads():
    args = RUNS["reference task"]
    assert _compare_json(args, threads=1, backend="numpy-f32") == _compare_json(args, threads=2, backend="numpy-f32")


def test_a_sweep_gives_the_same_bits_in_one_process_and_in_two():
    args = ["--recipes", "fp32", "fp16-dynamic", "--steps", "4", "--seeds", "0", "1"]
    assert _compare_json([*args, "--jobs", "1"]) == _compare_json([*args, "--jobs", "2"])


def test_library_arithmetic_is_the_libraries_own_and_off_by_default():
    """fpsim.arithmetic("library"): numpy's float32 product and exp, faster and outside the promise;
    the default and fpsim.arithmetic("exact") are fpsim's definitions; a context variable, so
    another thread keeps its own; a bad mode is one error naming the modes."""
    import threading

    from fpsim.numerics import exp_f32

    a, b = _operands((128, 784), (784, 256), seed=4)
    x = np.linspace(-30, 30, 100_001, dtype=np.float32)
    assert state.arithmetic_mode() == "exact"
    exact = fpsim.ops.matmul(fpsim.tensor(a), fpsim.tensor(b)).numpy()
    assert exact.tobytes() == matmul_f32(a, b).tobytes()
    seen = {}

    def other():
        seen["mode"] = state.arithmetic_mode()

    with fpsim.arithmetic("library"):
        t = threading.Thread(target=other)
        t.start()
        t.join()
        with threadpoolctl.threadpool_limits(1, user_api="blas"):
            lib = fpsim.ops.matmul(fpsim.tensor(a), fpsim.tensor(b)).numpy()
            want = a @ b
        assert lib.tobytes() == want.tobytes()
        assert fpsim.ops.exp(fpsim.tensor(x)).numpy().tobytes() == np.exp(x).tobytes()
    assert seen["mode"] == "exact"
    assert fpsim.ops.exp(fpsim.tensor(x)).numpy().tobytes() == exp_f32(x).tobytes()
    with pytest.raises(ValueError, match="mode must be one of exact, library, got 'fast'"):
        with fpsim.arithmetic("fast"):
            pass
