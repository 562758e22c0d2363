"""Backends: every test runs on numpy, on the cupy code paths with numpy standing in for
cupy (``CupyBackend(xp=numpy)``: bfloat16 / fp8 stored as float32 arrays holding exact format
values), and on real CuPy when it imports and sees a GPU (skipped otherwise).  References:
ml_dtypes / numpy casts from float32, and the numpy backend's own results for the
stand-in (the same numbers are the contract)."""

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
from helpers import LAYOUT, assert_same_bits, bits

from fpsim import backend as B
from fpsim import nn, ops
from fpsim.formats import get_format
from fpsim.optim import SGD, Adam
from fpsim.tensor import tensor

FORMATS = ["float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"]
STANDIN = B.CupyBackend(xp=np)


@pytest.fixture(params=["numpy", "cupy-standin", "cupy"])
def be(request):
    if request.param == "numpy":
        return B.get_backend("numpy")
    if request.param == "cupy-standin":
        return STANDIN
    if not B.BACKENDS["cupy"].available():
        pytest.skip("CuPy with a GPU is not available here")
    return B.get_backend("cupy")


def is_real_gpu(be):
    return be.name == "cupy" and not getattr(be, "stand_in", False)


def host(be, x):
    return np.asarray(be.to_numpy(x))


# ------------------------------------------------------------------------------ registry and import


def test_available_and_lookup():
    names = B.available()
    assert "numpy" in names
    assert B.get_backend() is B.get_backend("numpy") is B.BACKENDS["numpy"]
    assert B.get_backend(STANDIN) is STANDIN and STANDIN.available() and STANDIN.stand_in
    with pytest.raises(ValueError, match="unknown backend 'tpu'; known: numpy, cupy"):
        B.get_backend("tpu")
    if "cupy" not in names:
        with pytest.raises(RuntimeError, match="not available"):
            B.get_backend("cupy")
        with pytest.raises(RuntimeError, match="not available"):
            tensor([1.0], backend="cupy")


def test_import_never_needs_cupy():
    code = ("import sys; sys.modules['cupy'] = None; sys.modules['cupyx'] = None\n"
            "import fpsim, fpsim.backend, fpsim.tensor, fpsim.ops, fpsim.nn, fpsim.optim, fpsim.checkpoint\n"
            "print(fpsim.backend.available())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['numpy']"


# ------------------------------------------------------------------------------ storage and rounding


@pytest.mark.parametrize("fmt", FORMATS)
def test_storage_dtype(be, fmt):
    f = get_format(fmt)
    want = LAYOUT[fmt][2]
    if be.name == "cupy" and fmt not in ("float32", "float16"):
        want = np.dtype(np.float32)  # CuPy has no bfloat16 / fp8 dtype
    assert np.dtype(be.storage_dtype(f)) == want
    t = tensor(np.linspace(-3, 3, 8), fmt, backend=be)
    assert np.dtype(t.data.dtype) == want and t.backend is be
    assert t.numpy().dtype == LAYOUT[fmt][2]  # numpy() always gives the real format dtype


def _round_inputs():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 2**32, 50_000, dtype=np.uint64).astype(np.uint32).view(np.float32)  # every class
    y = (rng.standard_normal(50_000) * np.exp2(rng.integers(-30, 20, 50_000))).astype(np.float32)
    fmax = np.finfo(np.float32).max
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, fmax, -fmax, 3.4e38, 3.3961e38, 65519.99, 65520.0,
                        448.0, 464.0, 465.0, 57344.0, 61440.0, 2.0**-25, 2.0**-24 * 1.5, 2.0**-133, 2.0**-134,
                        2.0**-149], np.float32)
    return np.concatenate([x, y, special, -special])


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_matches_reference(be, fmt):
    """One round-to-nearest-even from float32 (ml_dtypes / numpy casts, correct from float32),
    over random bit patterns plus the overflow and flush edges of every format."""
    x = _round_inputs()
    dt = LAYOUT[fmt][2]
    with np.errstate(all="ignore"):
        want = x.astype(dt)
        got = host(be, be.to_f32(be.round(be.asarray(x), get_format(fmt))))
    assert got.dtype == np.float32
    assert_same_bits(got.astype(dt), want, f"{be.name} round to {fmt}")
    assert_same_bits(got, want.astype(np.float32), f"{be.name} values of {fmt}")


def test_standin_stores_exact_values():
    x = np.array([1 + 2.0**-8, 1 + 3 * 2.0**-8, 3.0e38, np.inf], np.float32)
    with np.errstate(all="ignore"):
        s = STANDIN.round(x, get_format("bfloat16"))
        e = STANDIN.round(x, get_format("float8_e4m3fn"))
    assert s.dtype == np.float32 and s.tolist() == [1.0, 1 + 2**-6, float(np.float32(3.0e38).astype(ml_dtypes.bfloat16)),
                                                    np.inf]
    assert e.dtype == np.float32 and e[:2].tolist() == [1.0, 1.0] and np.isnan(e[2:]).all()  # no inf in e4m3fn


# ------------------------------------------------------------------------------ the same numbers on every backend


def _train(be, fmt, opt_kind, steps=3):
    rng = np.random.default_rng(0)
    model = nn.MLP([4, 8, 3], activation="gelu", fmt=fmt, seed=0, backend=be)
    opt = (SGD(model.parameters(), lr=0.1, momentum=0.9, master_weights=fmt != "float32") if opt_kind == "sgd"
           else Adam(model.parameters(), lr=1e-2, master_weights=fmt != "float32"))
    losses, grads = [], []
    for _ in range(steps):
        x = rng.standard_normal((5, 4))
        y = rng.integers(0, 3, 5)
        opt.zero_grad()
        logits = model(tensor(x, fmt, backend=be))
        loss = nn.cross_entropy(logits.to("float32"), y) + nn.mse_loss(logits, np.zeros((5, 3))) * 0.1
        loss.backward()
        opt.step()
        losses.append(loss.item())
        grads.append([p.grad.numpy() for p in model.parameters()])
    return losses, grads, [p.numpy() for p in model.parameters()]


@pytest.mark.parametrize("opt_kind", ["sgd", "adam"])
@pytest.mark.parametrize("fmt", ["float32", "float16", "bfloat16"])
def test_training_step_same_numbers(be, fmt, opt_kind):
    ref_losses, ref_grads, ref_params = _train(B.get_backend("numpy"), fmt, opt_kind)
    losses, grads, params = _train(be, fmt, opt_kind)
    if is_real_gpu(be):
        # cuBLAS may sum in another order: the same numbers to within a few roundings
        tol = {"float32": 1e-5, "float16": 1e-2, "bfloat16": 4e-2}[fmt]
        np.testing.assert_allclose(losses, ref_losses, rtol=tol)
        for a, b in zip(params, ref_params):
            np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=tol, atol=tol)
        return
    assert losses == ref_losses
    for step_g, step_ref in zip(grads, ref_grads):
        for a, b in zip(step_g, step_ref):
            assert a.dtype == b.dtype and np.array_equal(bits(a), bits(b))
    for a, b in zip(params, ref_params):
        assert np.array_equal(bits(a), bits(b))


def test_ops_on_backend(be):
    x = tensor([[1.0, -2.0, 3.0], [0.5, 0.25, -4.0]], "bfloat16", requires_grad=True, backend=be)
    y = (x[np.array([1, 1, 0]), np.array([0, 0, 2])].sum() + x.max(axis=1).sum() + x.T.reshape(6)[2]) * 2
    y.backward()
    assert y.item() == 2 * ((0.5 + 0.5 + 3.0) + (3.0 + 0.5) + -2.0)
    # index gradients add where an index repeats (x[1, 0] twice), plus each row's max, plus x[0, 1]
    assert x.grad.numpy().astype(np.float32).tolist() == [[0.0, 2.0, 4.0], [6.0, 0.0, 0.0]]
    z = ops.concat([x, tensor(np.ones((1, 3)), "float16", backend=be)])
    assert z.fmt.name == "float32" and z.shape == (3, 3)
    with np.errstate(all="ignore"):
        assert ops.matmul(x, x.T, acc="bfloat16").numpy().astype(np.float32)[0, 0] == 14.0


def test_move_between_backends():
    model = nn.MLP([3, 4, 2], fmt="bfloat16", seed=0)
    before = [p.numpy().copy() for p in model.parameters()]
    model.to(backend=STANDIN)
    assert all(p.backend is STANDIN and p.data.dtype == np.float32 for p in model.parameters())
    assert all(np.array_equal(bits(a), bits(p.numpy())) for a, p in zip(before, model.parameters()))
    model.to(backend="numpy")
    assert all(p.data.dtype == ml_dtypes.bfloat16 for p in model.parameters())
    t = tensor([1.5, 2.0], "float16", requires_grad=True)
    moved = t.to(backend=STANDIN)
    assert moved.backend is STANDIN and moved.numpy().tolist() == [1.5, 2.0] and moved.requires_grad
    with pytest.raises(ValueError, match="different backends: numpy and cupy"):
        t + moved
