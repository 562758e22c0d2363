"""Backends: every test runs on numpy, on the cupy code paths with numpy standing in for
cupy (``CupyBackend(xp=numpy)``: bfloat16 / fp8 stored as float32 arrays holding exact format
values), on the strict stand-in (``GuardBackend``, tests/support/cupy_standin.py: arrays that refuse
to mix with numpy arrays, as CuPy's do, and count device -> host copies; also with bfloat16 stored
natively, as CuPy >= 14 can), and on real CuPy when it imports and sees a GPU (skipped
otherwise).  References: ml_dtypes / numpy casts from float32, exact values written out,
and the numpy backend's own results for the strict stand-in, whose "libraries" compute fpsim's
definitions (the same numbers are the contract).  The plain stand-in and a real GPU sum in their
libraries' orders (numpy's, cuBLAS's) and use their own exp: the same numbers within a few roundings."""

import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
from helpers import LAYOUT, assert_same_bits, bits, small_task
from support.cupy_standin import GUARD, GuardArray, GuardBackend, HostArrayError

import fpsim
from fpsim import backend as B
from fpsim import nn, ops
from fpsim.experiments import train
from fpsim.formats import get_format
from fpsim.formats.kernels import rne_round
from fpsim.optim import SGD, Adam
from fpsim.tensor import Tensor, tensor

FORMATS = ["float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"]
STANDIN = B.CupyBackend(xp=np)
GUARDED = GuardBackend()
GUARDED_BF16 = GuardBackend(native_bfloat16=True)
STANDINS = {"cupy-standin": STANDIN, "cupy-guard": GUARDED, "cupy-guard-bf16": GUARDED_BF16}
HAVE_GPU = B.BACKENDS["cupy"].available()


@pytest.fixture(params=["numpy", *STANDINS, "cupy"])
def be(request):
    if request.param == "numpy":
        return B.get_backend("numpy")
    if request.param in STANDINS:
        return STANDINS[request.param]
    if not HAVE_GPU:
        pytest.skip("CuPy with a GPU is not available here")
    return B.get_backend("cupy")


def is_real_gpu(be):
    return be.name == "cupy" and not getattr(be, "stand_in", False)


def sums_in_library_order(be):
    """The cupy backend's sums, products and exp are its array library's: on a GPU cuBLAS's, on
    the plain stand-in numpy's (only the strict stand-in computes fpsim's definitions)."""
    return is_real_gpu(be) or be is STANDIN


def host(be, x):
    return np.asarray(be.to_numpy(x))


# ------------------------------------------------------------------------------ registry and import


def test_available_and_lookup():
    names = B.available()
    assert "numpy" in names
    assert B.get_backend("numpy") is B.BACKENDS["numpy"] and B.get_backend("numpy-f32") is B.BACKENDS["numpy-f32"]
    assert B.get_backend() is B.BACKENDS[B._DEFAULT]
    assert B.get_backend(STANDIN) is STANDIN and STANDIN.available() and STANDIN.stand_in
    with pytest.raises(ValueError, match="unknown backend 'tpu'; known: numpy, numpy-f32, cupy"):
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
    assert out.stdout.strip() == "['numpy', 'numpy-f32']"


# ------------------------------------------------------------------------------ storage and rounding


@pytest.mark.parametrize("fmt", FORMATS)
def test_storage_dtype(be, fmt):
    f = get_format(fmt)
    want = LAYOUT[fmt][2]
    if be.name == "cupy" and fmt not in ("float32", "float16") and not (fmt == "bfloat16" and be.native_bfloat16):
        want = np.dtype(np.float32)  # CuPy has no fp8 dtype (nor bfloat16 before CuPy 14)
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
        got = host(be, be.to_f32(be.round(be.asarray(x, dtype=np.float32), get_format(fmt))))
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
    if sums_in_library_order(be):
        # cuBLAS (numpy) sums in another order: the same numbers to within a few roundings
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


# ------------------------------------------------------------------------------ the device rounding


def _every_4099th_float32():
    """About a million float32 bit patterns spread over every class (zeros, subnormals,
    normals, inf, NaN, both signs), plus the patterns next to the ties of every format."""
    x = (np.arange(0, 2**32, 4099, dtype=np.uint64)).astype(np.uint32).view(np.float32)
    edges = np.array([0x7F7FFFFF, 0x7F800000, 0x7FC00000, 0x00000001, 0x00800000, 0x007FFFFF], np.uint32)
    return np.concatenate([x, edges.view(np.float32), -edges.view(np.float32)])


@pytest.mark.parametrize("fmt", ["float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_rne_round_algorithm_matches_reference(fmt):
    """The device kernel's algorithm (backend.rne_round, run here on numpy) against ml_dtypes /
    numpy's float32 casts, over ~10^6 bit patterns of every class."""
    x = _every_4099th_float32()
    with np.errstate(all="ignore"):
        want = x.astype(LAYOUT[fmt][2]).astype(np.float32)
    got = rne_round(x, get_format(fmt))
    assert got.dtype == np.float32
    assert_same_bits(got, want, f"rne_round to {fmt}")


@pytest.mark.parametrize("be_name", ["cupy-standin", "cupy-guard", "cupy"])
def test_device_rounding_exact_cases(be_name):
    """Pinned cases, written out from the formats' layouts: ties to even, the subnormal
    ties, overflow to inf (or NaN in e4m3fn, which has no inf), inf and NaN, -0."""
    if be_name == "cupy" and not HAVE_GPU:
        pytest.skip("CuPy with a GPU is not available here")
    be = STANDINS.get(be_name) or B.get_backend("cupy")
    inf, nan = np.inf, np.nan
    cases = {
        "bfloat16": [(1 + 2.0**-8, 1.0), (1 + 3 * 2.0**-8, 1 + 2.0**-6), (2.0**-134, 0.0),
                     (1.5 * 2.0**-134, 2.0**-133), (2.0**-133 * 2.5, 2.0**-132), (-(2.0**-126) * 1.00390625, -(2.0**-126)),
                     (np.finfo(np.float32).max, inf), (3.3895313892515355e38, 3.3895313892515355e38), (-0.0, -0.0),
                     (inf, inf), (-inf, -inf)],
        "float8_e4m3fn": [(464.0, 448.0), (465.0, nan), (-465.0, nan), (inf, nan), (17.0, 16.0), (19.0, 20.0),
                          (2.0**-10, 0.0), (1.5 * 2.0**-10, 2.0**-9), (3 * 2.0**-10, 2.0**-8), (-0.0, -0.0)],
        "float8_e5m2": [(61439.0, 57344.0), (61440.0, inf), (-61440.0, -inf), (2.0**-17, 0.0),
                        (1.5 * 2.0**-17, 2.0**-16), (4.5, 4.0), (5.5, 6.0), (inf, inf)],
        "float16": [(65519.0, 65504.0), (65520.0, inf), (2.0**-25, 0.0), (1.5 * 2.0**-25, 2.0**-24),
                    (1 + 2.0**-11, 1.0), (1 + 3 * 2.0**-11, 1 + 2.0**-9), (-0.0, -0.0)],
    }
    for fmt, pairs in cases.items():
        x = np.array([p[0] for p in pairs] + [nan], np.float32)
        want = np.array([p[1] for p in pairs] + [nan], np.float32)
        with np.errstate(over="ignore"):
            got = host(be, be.to_f32(be.round(be.asarray(x, dtype=np.float32), get_format(fmt))))
        assert_same_bits(got, want, f"{be_name} {fmt}")
        assert np.array_equal(np.signbit(got[~np.isnan(want)]), np.signbit(want[~np.isnan(want)]))


@pytest.mark.skipif(not HAVE_GPU, reason="CuPy with a GPU is not available here")
def test_kernel_equals_array_algorithm_on_device():
    """On a GPU: the ElementwiseKernel and rne_round written in cupy array ops agree bit for bit."""
    be = B.get_backend("cupy")
    cp = be.xp
    x = cp.asarray(_every_4099th_float32())
    for fmt in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        f = get_format(fmt)
        assert_same_bits(cp.asnumpy(be.rne_round(x, f)), cp.asnumpy(rne_round(x, f, cp)), f"kernel vs array ops {fmt}")


# ------------------------------------------------------------------------------ no silent host round trips


def test_guard_refuses_host_arrays():
    x = GUARD.asarray(np.arange(4, dtype=np.float32))
    assert isinstance(x, GuardArray) and isinstance(x * 2 + np.float32(1), GuardArray)
    with pytest.raises(HostArrayError, match="numpy array"):
        x + np.ones(4, np.float32)  # CuPy: TypeError
    with pytest.raises(HostArrayError, match="numpy array"):
        GUARD.where(x > 1, x, np.zeros(4, np.float32))
    with pytest.raises(HostArrayError, match="implicit conversion"):
        np.asarray(x)
    assert not hasattr(GUARD, "errstate")  # CuPy has none: code must not rely on it
    GUARD.reset()
    assert x.get().tolist() == [0.0, 1.0, 2.0, 3.0] and float(x.sum()) == 6.0 and GUARD.syncs == 2


def _op_with_backward(make_grad):
    """A custom op, built as ops.py builds them, whose backward makes its gradient with make_grad."""
    from fpsim.tensor import round_result

    def op(x):
        out32 = x.f32() * 2
        return Tensor._from_op(round_result(out32, x.fmt, x.backend, "double", "forward"), x.fmt, (x,),
                               lambda g, out: (make_grad(g, x),), "double", x.backend)

    return op


def test_guard_catches_a_backward_built_on_the_host():
    good = _op_with_backward(lambda g, x: g * 2)
    bad = _op_with_backward(lambda g, x: np.zeros(x.shape, np.float32) + 2)  # np.zeros instead of xp.zeros
    for be in (B.get_backend("numpy"), STANDIN, GUARDED):
        x = tensor([1.0, -3.0], "float16", requires_grad=True, backend=be)
        good(x).sum().backward()
        assert x.grad.numpy().tolist() == [2.0, 2.0]
    x = tensor([1.0, -3.0], "float16", requires_grad=True, backend=GUARDED)
    y = bad(x).sum()
    with pytest.raises(HostArrayError, match="computed on the host|numpy array"):
        y.backward()
    with pytest.raises(HostArrayError, match="numpy array"):  # a numpy constant inside an op's forward
        Tensor._from_op(x.f32() * np.array([1.0, 2.0], np.float32), x.fmt, (x,), None, "bad", x.backend)


def _reference_step(be, recipe_fmt="float32"):
    """One full training step of the reference task's model (forward, MSE over every output,
    backward, Adam) on a 256-sample slice of its data."""
    task = small_task()
    model = task.model(0)
    model.to(backend=be)
    model.to(recipe_fmt)
    x_np = task.data()
    x = tensor(x_np, recipe_fmt, backend=be)
    target = tensor(x_np, "float32", backend=be)
    opt = Adam(model.parameters(), lr=1e-2, master_weights=recipe_fmt != "float32")
    return model, opt, x, target


def test_training_step_makes_no_host_copies():
    """On the guard, a training step copies nothing to the host - with a monitor running too:
    the monitor's counts stay on the device until they are read, then come over in one copy."""
    counts = {}
    for be in (B.get_backend("numpy"), GUARDED):
        model, opt, x, target = _reference_step(be, "bfloat16")
        GUARD.reset()
        with fpsim.monitor() as m:
            opt.zero_grad()
            loss = ops.mse_loss(model(x).to("float32"), target)
            loss.backward()
            opt.step()
        if be is GUARDED:
            assert GUARD.syncs == 0, GUARD.sync_sites
        counts[be.name] = dict(m.counts)
        if be is GUARDED:
            assert GUARD.syncs == 1, GUARD.sync_sites  # reading the counts: one copy
            m.totals(), m.table()
            assert GUARD.syncs == 1
    assert counts["numpy"] == counts["cupy"] and len(counts["numpy"]) > 20


@pytest.mark.parametrize("recipe", ["fp32", "fp16-dynamic", "bf16-master"])
def test_reference_task_through_the_guard(recipe):
    """Full training steps of the reference task (fp32, fp16-dynamic with its GradScaler,
    bf16-master) run through the strict stand-in and give the numpy backend's numbers."""
    task = small_task()
    a = train(task, recipe, steps=3)
    b = train(task, recipe, steps=3, backend=GUARDED)
    assert a.losses == b.losses and a.scales == b.scales and a.skipped == b.skipped
    assert a.act_grad_flushed == b.act_grad_flushed and a.metrics == b.metrics


def test_move_between_backends():
    model = nn.MLP([3, 4, 2], fmt="bfloat16", seed=0)
    before = [p.numpy().copy() for p in model.parameters()]
    model.to(backend=STANDIN)
    assert all(p.backend is STANDIN and p.data.dtype == np.float32 for p in model.parameters())
    assert all(np.array_equal(bits(a), bits(p.numpy())) for a, p in zip(before, model.parameters()))
    model.to(backend="numpy")
    assert all(p.data.dtype == ml_dtypes.bfloat16 for p in model.parameters())
    t = tensor([1.5, 2.0], "float16", requires_grad=True, backend="numpy")
    moved = t.to(backend=STANDIN)
    assert moved.backend is STANDIN and moved.numpy().tolist() == [1.5, 2.0] and moved.requires_grad
    with pytest.raises(ValueError, match="different backends: numpy and cupy"):
        t + moved
    g = fpsim.tensor([0.5, -1.0], "bfloat16", backend=GUARDED_BF16)
    assert isinstance(g.data, GuardArray) and g.data.dtype == ml_dtypes.bfloat16 and g.numpy().tolist() == [0.5, -1.0]
    model.to(backend=GUARDED)
    assert all(isinstance(p.data, GuardArray) and p.data.dtype == np.float32 for p in model.parameters())
    assert all(np.array_equal(bits(a), bits(p.numpy())) for a, p in zip(before, model.parameters()))


def test_the_default_backend_comes_from_the_environment():
    code = ("import fpsim, fpsim.backend as B\n"
            "try:\n    t = fpsim.tensor([1.5], 'float16')\n"
            "    print(B.get_backend().name, t.data.dtype, t.numpy().dtype, t.nbytes)\n"
            "except ValueError as e:\n    print('ValueError', e)\n")
    env = {**os.environ, "FPSIM_BACKEND": "numpy-f32"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0 and out.stdout.split() == ["numpy-f32", "float32", "float16", "2"], out.stderr
    env["FPSIM_BACKEND"] = "tpu"  # importing still works; the first use says what is wrong
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ("ValueError the environment variable FPSIM_BACKEND='tpu' names no backend; "
                                  "known: numpy, numpy-f32, cupy")


# ---- bfloat16: ml_dtypes' own casts ------------------------------------------------------------


def _bf16_patterns():
    """Every float32 high half (each sign, exponent and kept mantissa, subnormals, inf and NaN) with
    low halves at and around the rounding boundary and a few random ones."""
    hi = np.arange(65536, dtype=np.uint32) << 16
    lows = np.r_[[0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF], np.random.default_rng(0).integers(0, 65536, 4)]
    return (hi[:, None] | lows.astype(np.uint32)[None, :]).ravel().view(np.float32)


@pytest.mark.parametrize("name", ["numpy", "numpy-f32"])
def test_backends_round_and_widen_bfloat16_as_ml_dtypes(name):
    """Both backends' bfloat16 rounding and widening are ml_dtypes' casts, bit for bit: ties to
    even, carries into the next binade and into inf, subnormals, NaN."""
    be = B.get_backend(name)
    x = _bf16_patterns()
    with np.errstate(all="ignore"):
        want = x.astype(ml_dtypes.bfloat16)
    stored = be.round(x, get_format("bfloat16"))
    assert np.array_equal(be.to_f32(stored).view(np.uint32), want.astype(np.float32).view(np.uint32))
    if name == "numpy":
        assert stored.dtype == ml_dtypes.bfloat16 and np.array_equal(stored.view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize("size", [6, 60_000])
@pytest.mark.parametrize("fmt", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_float32_roundings_by_ml_dtypes_raise_no_floating_point_flags(fmt, size):
    """The numpy backend rounds float32 into bfloat16 / fp8 with ml_dtypes' cast outside
    ``np.errstate``: overflow, inf and NaN must not warn (or raise, with numpy's flags set to raise)."""
    x = np.resize(np.array([3.4e38, -3.4e38, np.inf, np.nan, 1e-45, 1.0], np.float32), size)
    with np.errstate(all="raise"):
        stored = B.get_backend("numpy").round(x, get_format(fmt))
    with np.errstate(all="ignore"):
        want = x.astype(get_format(fmt).dtype)
    assert np.array_equal(stored.view(np.uint8), want.view(np.uint8))
