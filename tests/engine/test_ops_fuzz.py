"""Property tests of the transformer ops: softmax, log_softmax and mean on random shapes and axes
(empty ones included) within one rounding of float64 numpy; scaled dot-product attention against
PyTorch's float64, empty queries and keys and fully masked rows included."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import fpsim
from fpsim import ops

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


SHAPES = hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=5)


@FUZZ
@given(x=hnp.arrays(np.float32, SHAPES, elements=st.floats(-20, 20, width=32)), data=st.data(),
       fmt=st.sampled_from(["float32", "float16", "bfloat16"]))
def test_softmax_log_softmax_and_mean_match_float64_to_one_rounding(x, data, fmt):
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    t = fpsim.tensor(x, fmt)
    x64 = t.numpy().astype(np.float64)
    eps = fpsim.get_format(fmt).eps
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's "mean of empty slice": NaN is the answer
        z = x64 - (x64.max(axis=axis, keepdims=True) if x.shape[axis] else 0)
        sm = np.exp(z) / np.exp(z).sum(axis=axis, keepdims=True)
        lsm = z - np.log(np.exp(z).sum(axis=axis, keepdims=True))
        mean = x64.mean(axis=axis)
    for got, want in ((ops.softmax(t, axis), sm), (ops.log_softmax(t, axis), lsm), (ops.mean(t, axis), mean)):
        g = got.numpy().astype(np.float64)
        assert g.shape == want.shape
        assert np.array_equal(np.isnan(g), np.isnan(want))  # NaN exactly where float64 has it (a mean of nothing)
        ok = ~np.isnan(want)
        # one rounding into fmt of a float32 computation: within 2 eps relative, plus float32's own error
        tol = 2 * eps * np.abs(want[ok]) + 4 * 2.0**-23 * np.abs(want[ok]).max(initial=1.0)
        assert np.all(np.abs(g[ok] - want[ok]) <= tol), (got, want)


@FUZZ
@given(tq=st.integers(0, 4), tk=st.integers(0, 4), d=st.integers(1, 4), causal=st.booleans(),
       seed=st.integers(0, 100))
def test_attention_matches_pytorch_including_empty_queries_and_keys(tq, tk, d, causal, seed):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((1, tq, d), (1, tk, d), (1, tk, 3)))
    tq_, tk_, tv_ = (torch.tensor(a, dtype=torch.float64) for a in (q, k, v))
    mask = None
    if causal and tq and tk:
        mask = np.tril(np.ones((tq, tk), bool))
    want = torch.nn.functional.scaled_dot_product_attention(
        tq_, tk_, tv_, attn_mask=None if mask is None else torch.tensor(mask)).numpy()
    if mask is not None:  # a row with no key allowed: fpsim gives zeros, as PyTorch's fused kernels
        want[:, ~mask.any(axis=-1)] = 0
    got = ops.scaled_dot_product_attention(*(fpsim.tensor(a) for a in (q, k, v)), attn_mask=mask).numpy()
    assert got.shape == want.shape and np.allclose(got, want, rtol=1e-5, atol=1e-6)
