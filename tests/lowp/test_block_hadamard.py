"""The random Hadamard transform's compiled pass (``_blocks.block_hadamard``: the fast Walsh-Hadamard
transform in float64, exact where its quanta prove it, the rest summed exactly by ``matmul_f32``)
against the exact sums (fractions, rounded once to float32) and against the numpy path, bit for
bit: zeros of both signs, float32 subnormals and sums that underflow to -0, spreads of magnitude
that leave sums unproven, cancellations, inf and NaN; and which matrices it recognises."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import bits, exact_matmul_f32

from fpsim.lowp import hadamard_matrix, hadamard_transform
from fpsim.lowp.block import _signed_hadamard
from fpsim.numerics import compiled
from fpsim.numerics.compiled import use_compiled

needs_compiled = pytest.mark.skipif(not compiled.enabled(), reason="numba missing or the compiled path off")


def _spy(monkeypatch):
    """The compiled Hadamard kernel's calls, and the columns it left open each time."""
    calls = []
    table = compiled.kernels().roundings
    fn = table["block_hadamard"]

    def spy(*a):
        out, left = fn(*a)
        calls.append(int(left.sum()))
        return out, left
    monkeypatch.setitem(table, "block_hadamard", spy)
    return calls


def _inputs(rng) -> np.ndarray:
    """(200, 12) float32: 13 groups of 16 rows (the last one padded), each column group with its
    own spread of magnitudes (up to 2**20, the last two up to 2**140), zeros of both signs, float32 subnormals, a column
    cancelling 2**60, one of the smallest subnormals (whose sums, +-2**-151, round to +-0), and a
    column with an inf and one with a NaN."""
    spread = rng.choice([0, 6, 14, 20], (13, 1, 12))
    spread[11:] = rng.integers(40, 141, (2, 1, 12))  # two groups wide enough to leave sums unproven
    e = rng.integers(-1, 2, (13, 16, 12)) * spread // 2
    a = (rng.standard_normal((13, 16, 12)) * 2.0 ** e).astype(np.float32).reshape(208, 12)[:200]
    a[rng.random(a.shape) < 0.15] = 0.0
    a[rng.random(a.shape) < 0.1] = -0.0
    a[16:32, 0] = np.float32(1e-44) * rng.integers(-3, 4, 16)
    a[32:48, 1] = 0.0
    a[32, 1], a[40, 1] = 2.0**60, -(2.0**60)
    a[41, 1] = 3.0
    a[48:64, 2] = 0.0
    a[50, 2] = -np.float32(2.0**-149)
    a[64:80, 3] = -0.0
    a[5, 4], a[70, 5] = np.inf, np.nan
    return a


def _exact(a, h) -> np.ndarray:
    n, (t, c) = h.shape[0], a.shape
    padded = np.zeros((t + (-t % n), c), np.float32)
    padded[:t] = a
    return np.concatenate([exact_matmul_f32(h, g) for g in padded.reshape(-1, n, c)])


@needs_compiled
def test_compiled_transform_is_the_exact_sum_rounded_once(monkeypatch):
    calls = _spy(monkeypatch)
    rng = np.random.default_rng(3)
    a = _inputs(rng)
    for h, exact in ((hadamard_matrix(5), True), (hadamard_matrix(6).T.copy(), False), (hadamard_matrix(1, 4), True)):
        with use_compiled(True):
            got = hadamard_transform(a, h)
        with use_compiled(False):
            numpy_path = hadamard_transform(a, h)
        assert got.shape == (a.shape[0] + (-a.shape[0] % h.shape[0]), a.shape[1]) and got.dtype == np.float32
        assert np.array_equal(bits(got), bits(numpy_path))
        finite = np.isfinite(a).all(axis=0)
        if exact:  # (fractions are slow: the transposed matrix against the numpy path alone)
            assert np.array_equal(bits(got[:, finite]), bits(_exact(a[:, finite], h)))
        n = h.shape[0]
        assert np.isinf(got[5 // n * n:(5 // n + 1) * n, 4]).all() and np.isnan(got[70 // n * n:(70 // n + 1) * n, 5]).all()
    assert np.signbit(got[48:52, 2]).any() and not np.signbit(got[64:68, 3]).any()  # -2**-151 is -0; a sum of -0s +0
    # the kernel ran each time, proved most sums exact, and left some (wide spreads, inf, NaN) to matmul_f32
    assert len(calls) == 3 and all(0 < k < a.size // n // 4 for k, n in zip(calls, (16, 16, 4))), calls


@needs_compiled
def test_other_matrices_keep_matmul(monkeypatch):
    calls = _spy(monkeypatch)
    rng = np.random.default_rng(4)
    a = rng.standard_normal((256, 8)).astype(np.float32)
    h = hadamard_matrix(2)
    h[3, 5] = -h[3, 5]  # no longer signs times a Hadamard matrix
    q, _ = np.linalg.qr(rng.standard_normal((16, 16)))
    for m in (h, q.astype(np.float32), hadamard_matrix(2) * np.float32(0.3)):
        with use_compiled(True):
            got = hadamard_transform(a, m)
        with use_compiled(False):
            assert np.array_equal(bits(got), bits(hadamard_transform(a, m)))
    assert calls == []


def test_which_matrices_are_signed_hadamard_matrices():
    h = hadamard_matrix(7)
    s, r = _signed_hadamard(h)
    assert np.array_equal(np.abs(r), np.full(16, 0.25)) and np.array_equal(np.abs(s), np.ones(16))
    assert np.array_equal((r[:, None] * s * _sylvester16()).astype(np.float32), h)
    s, r = _signed_hadamard(h.T.copy())  # H diag(signs) / 4: signs on the columns
    assert np.array_equal((r[:, None] * s * _sylvester16()).astype(np.float32), h.T)
    assert _signed_hadamard(h * np.float32(2.0)) is not None
    assert _signed_hadamard(h[:, ::-1].copy()) is not None  # columns reversed: j -> 15 xor j, row signs H[:, 15]
    assert _signed_hadamard(h[:8, :8].copy()) is not None  # H_16's corner is H_8
    for bad in (h * np.float32(3.0), h.astype(np.float64), h[[1, 0, *range(2, 16)]],
                np.eye(16, dtype=np.float32), hadamard_matrix(0, 2)[:1], np.zeros((16, 16), np.float32)):
        assert _signed_hadamard(bad) is None


def _sylvester16() -> np.ndarray:
    h = np.array([[1.0]])
    for _ in range(4):
        h = np.block([[h, h], [h, -h]])
    return h
