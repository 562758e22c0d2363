"""The ``numpy-f32`` backend: float32 arrays holding exactly the format's values.

Its rounding is checked against numpy's / ml_dtypes' own casts (not against fpsim), and whole
training runs against the ``numpy`` backend, which stores the real dtypes: the same losses, the
same loss scales, the same weights, bit for bit.  (conftest.py also runs the engine's test
modules a second time with ``numpy-f32`` as the default backend.)
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from helpers import small_task

import fpsim
from fpsim import checkpoint, nn
from fpsim.backend import BACKENDS, NumpyF32Backend
from fpsim.experiments import train
from fpsim.experiments.tinygpt import TinyGPTTask
from fpsim.formats import FORMATS, get_format
from fpsim.formats.kernels import snap_f16

CARRIER = BACKENDS["numpy-f32"]
NUMPY = BACKENDS["numpy"]
U32 = np.uint32


def numpy_f16(x32):
    """numpy's own float32 -> float16 cast, widened back: the reference."""
    with np.errstate(over="ignore", invalid="ignore"):
        return x32.astype(np.float16).astype(np.float32)


def same_bits(got, want):
    """Bit-identical, NaN anywhere NaN is (a NaN's payload aside)."""
    nan = np.isnan(want)
    return bool(np.array_equal(np.isnan(got), nan)) and np.array_equal(got[~nan].view(U32), want[~nan].view(U32))


def float16_edges() -> np.ndarray:
    """Every float16 value, the float32 midpoints between neighbours and one float32 ulp either side
    of each midpoint (the ties and near-ties), both signs, and the overflow threshold's region."""
    v = np.arange(0x7C01, dtype=np.uint16).view(np.float16).astype(np.float64)  # 0 .. inf
    mid = (v[:-1] + v[1:]) / 2  # exact in float64, and a float32 value too (12 significant bits)
    mid32 = mid.astype(np.float32)
    up, down = np.nextafter(mid32, np.float32(np.inf)), np.nextafter(mid32, np.float32(0))
    extra = np.array([65504, 65519, 65519.996, 65520, 65520.004, 65536, 1e30, 3.4028235e38, np.inf, np.nan,
                      2.0**-24, 2.0**-25, 2.0**-25 * 1.0000001, 3 * 2.0**-26, 2.0**-149, 1e-45, 0.0], np.float32)
    pos = np.concatenate([v.astype(np.float32), mid32, up, down, extra])
    return np.concatenate([pos, -pos])


def test_snap_f16_is_numpys_cast_on_every_edge():
    x = float16_edges()
    assert x.size > 250_000
    assert same_bits(snap_f16(x), numpy_f16(x))
    neg_zero = snap_f16(np.array([-0.0, -2.0**-26, -1e-30], np.float32))  # the sign of a zero result is kept
    assert neg_zero.view(U32).tolist() == [0x80000000] * 3


def test_snap_f16_on_random_bit_patterns_and_shapes():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 2**32, 2**21 + 3, dtype=np.uint64).astype(U32).view(np.float32)  # chunks and a tail
    assert same_bits(snap_f16(x), numpy_f16(x))
    big = x[: 3 * 2**16].reshape(3 * 2**8, 2**8)
    assert same_bits(snap_f16(big.T), numpy_f16(big.T))  # non-contiguous, several chunks
    m = x[: 64 * 48].reshape(64, 48)
    assert same_bits(snap_f16(m.T), numpy_f16(m.T))  # non-contiguous
    assert snap_f16(np.float32(1 + 2.0**-11)).shape == () and float(snap_f16(np.float32(1 + 2.0**-11))) == 1.0
    assert float(snap_f16(np.array(1 + 3 * 2.0**-11, np.float32))) == 1 + 2.0**-9  # the tie goes to even


@pytest.mark.parametrize("fmt", FORMATS)
def test_carrier_rounding_is_the_storage_cast(fmt):
    f = get_format(fmt)
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.integers(0, 2**32, 2**16, dtype=np.uint64).astype(U32).view(np.float32),
                        rng.standard_normal(4096).astype(np.float32) * np.float32(f.max / 4)])
    x = x[~np.isnan(x)] if not f.has_nan else x
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(f.dtype).astype(np.float32)
    got = CARRIER.round(x, f)
    assert got.dtype == np.float32 and same_bits(got, want)
    if f.bits == 8:
        sat = CARRIER.round_saturating(x, f)
        assert sat.dtype == np.float32 and same_bits(sat, NUMPY.round_saturating(x, f).astype(np.float32))
    assert CARRIER.to_f32(got) is got  # reading is free


def test_tensor_on_the_carrier_reports_the_format():
    t = fpsim.tensor(np.linspace(-3, 3, 12).reshape(3, 4), "float16", backend="numpy-f32")
    ref = fpsim.tensor(np.linspace(-3, 3, 12).reshape(3, 4), "float16", backend="numpy")
    assert isinstance(CARRIER, NumpyF32Backend) and t.data.dtype == np.float32
    assert t.nbytes == 24 and t.dtype == np.float16 and t.numpy().dtype == np.float16
    assert np.array_equal(t.numpy().view(np.uint16), ref.numpy().view(np.uint16))
    b = fpsim.tensor([1.0, 2.0**-133, 3.0e38], "bfloat16", backend="numpy-f32")
    assert b.numpy().dtype == ml_dtypes.bfloat16 and b.nbytes == 6
    want = np.array([1.0, 2.0**-133, 3.0e38]).astype(ml_dtypes.bfloat16)  # no double-rounding case among them
    assert np.array_equal(b.numpy().view(np.uint16), want.view(np.uint16))
    with pytest.raises(ValueError, match="different backends: numpy-f32 and numpy"):
        t + ref


RECIPES = ("fp32", "fp16-pure", "fp16-master", "fp16-static", "fp16-dynamic", "bf16-pure", "bf16-master",
           "bf16-kahan", "bf16-stochastic", "fp8-delayed", "mxfp8", "nvfp4")


@pytest.mark.parametrize("recipe", RECIPES)
def test_training_is_bit_identical_to_the_real_dtypes(recipe):
    task = small_task(512, steps=12)
    a = train(task, recipe, backend="numpy")
    seen = set()
    with fpsim.state.hooked(lambda ev: seen.add((ev.backend.name, ev.stored.dtype.name))):
        b = train(task, recipe, backend="numpy-f32")
    assert seen == {("numpy-f32", "float32")} and b.losses  # it ran on the carrier
    assert a.failure == b.failure and len(a.losses) == (12 if not a.failure else 1)
    assert np.array_equal(np.float32(a.losses).view(U32), np.float32(b.losses).view(U32)), recipe
    assert a.scales == b.scales and a.skipped == b.skipped and a.died_at == b.died_at
    assert a.weight_grad_flushed == b.weight_grad_flushed and a.stalled == b.stalled
    assert a.metrics == b.metrics or (np.isnan(a.metrics["r2"]) and np.isnan(b.metrics["r2"]))


def test_tinygpt_amp_step_is_bit_identical():
    task = TinyGPTTask(steps=3, batch=8, n_digits=6, d_model=32, eval_size=16)
    a = train(task, "fp16-amp", backend="numpy")
    b = train(task, "fp16-amp", backend="numpy-f32")
    assert np.array_equal(np.float32(a.losses).view(U32), np.float32(b.losses).view(U32))
    assert a.scales == b.scales


def test_checkpoint_moves_between_the_two(tmp_path):
    m = nn.MLP([5, 7, 3], fmt="float16", seed=3).to(backend="numpy-f32")
    assert all(p.data.dtype == np.float32 for p in m.parameters())
    checkpoint.save(tmp_path / "c.npz", m)
    n = nn.MLP([5, 7, 3], fmt="float16", seed=4).to(backend="numpy")  # real float16 storage
    checkpoint.load(tmp_path / "c.npz", n)
    for p, q in zip(m.parameters(), n.parameters()):
        assert q.data.dtype == np.float16 and np.array_equal(p.numpy().view(np.uint16), q.data.view(np.uint16))
