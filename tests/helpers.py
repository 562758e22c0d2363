"""The one op-checking helper (tinygrad's ``helper_test_op`` style), the bit and value comparisons,
the small reference task, and running the ``fpsim`` command in-process: one definition of each for
every test folder.

``check_op`` builds random inputs from shapes, runs the fpsim op and a reference written on
float64 numpy arrays, and checks the forward (shape, format, storage dtype, values) and the
backward (each input's gradient against central finite differences of
``sum(ref(x) * W)`` computed in float64, W random).  With ``torch_fn`` it also checks values
and gradients against PyTorch float32 (callers skip when torch is absent).  The references
never call fpsim.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from fpsim.formats.bitviews import UINT_VIEWS
from fpsim.tensor import Tensor, tensor

# (mantissa bits, exponent of the smallest normal, storage dtype), written from the layouts
LAYOUT = {
    "float32": (23, -126, np.dtype(np.float32)),
    "float16": (10, -14, np.dtype(np.float16)),
    "bfloat16": (7, -126, np.dtype(ml_dtypes.bfloat16)),
    "float8_e4m3fn": (3, -6, np.dtype(ml_dtypes.float8_e4m3fn)),
    "float8_e5m2": (2, -14, np.dtype(ml_dtypes.float8_e5m2)),
}
UINT = {n: dt.type for n, dt in UINT_VIEWS.items()}  # fpsim.formats.bitviews: one width -> uint table


def spacing(x, name: str) -> np.ndarray:
    """The gap between neighbouring values of format ``name`` around x (float64)."""
    m, emin, _ = LAYOUT[name]
    a = np.abs(np.asarray(x, dtype=np.float64))
    e = np.floor(np.log2(np.where(a > 0, a, 1.0)))
    return np.exp2(np.maximum(np.where(a > 0, e, emin), emin) - m)


def bits(a) -> np.ndarray:
    """The raw bit patterns of a float array (any width)."""
    a = np.ascontiguousarray(np.asarray(a))
    return a.view(UINT[a.dtype.itemsize])


def same_bits(got, want) -> np.ndarray:
    """Elementwise: identical bit patterns, or both NaN (NaN payloads and signs may differ)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    with np.errstate(invalid="ignore"):  # signalling NaN patterns
        g64, w64 = got.astype(np.float64), want.astype(np.float64)
    return (bits(got) == bits(want)) | (np.isnan(g64) & np.isnan(w64))


def identical(got, want) -> bool:
    """The same dtype, shape and bit patterns, NaN payloads and -0 included (a compiled path against the
    numpy path: nothing may differ)."""
    got, want = np.asarray(got), np.asarray(want)
    return got.dtype == want.dtype and got.shape == want.shape and np.array_equal(bits(got), bits(want))


def block_values(rng, shape) -> np.ndarray:
    """float32 Gaussians at a magnitude per leading index from 1e-42 to 1e37, with zeros of both signs,
    block-format grid ties, float32 subnormals and values near float32's max mixed in."""
    mag = 10.0 ** rng.uniform(-42, 37, (shape[0],) + (1,) * (len(shape) - 1))
    x = (rng.standard_normal(shape) * mag).astype(np.float32)
    flat = x.reshape(-1)
    special = np.float32([0.0, -0.0, 448.0, 464.0, 6.0, 5.0, -6.5, 0.25, 2.0**-9, 1e-45, -3e38, 3.4e38])
    pos = rng.choice(flat.size, 3 * special.size, replace=False)
    flat[pos] = np.resize(special, pos.size)
    return x


def assert_same_bits(got, want, what: str = "") -> None:
    ok = same_bits(got, want)
    if not ok.all():
        i = np.flatnonzero(~ok.ravel())[:5]
        raise AssertionError(f"{what}: {int((~ok).sum())} of {ok.size} differ, e.g. at {i.tolist()}: "
                             f"got {np.asarray(got).ravel()[i]} want {np.asarray(want).ravel()[i]}")


def same_values(a, b) -> np.ndarray:
    """Elementwise: the same value (compared in float64), NaN equal to NaN and -0 not equal to +0 -
    for results in different storage dtypes, where :func:`same_bits` cannot compare patterns."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (np.isnan(a) & np.isnan(b)) | ((a == b) & (np.signbit(a) == np.signbit(b)))


def same(a, b) -> bool:
    """The same shape and every element the same value (:func:`same_values`); for float32 results
    that is the same bit patterns, NaN payloads aside."""
    return np.shape(a) == np.shape(b) and bool(np.all(same_values(a, b)))


def state_bits(model) -> dict:
    """A model's state dict as raw bytes per entry: what a failed load must leave unchanged."""
    return {k: v.tobytes() for k, v in model.state_dict().items()}


def run_cli(capsys, *argv):
    """``fpsim ARGV...`` in this process (each argument made a string): (exit status, stdout, stderr)."""
    from fpsim.tools import cli

    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def strict_json(text: str):
    """Parse as a strict parser would: NaN, Infinity and -Infinity are not JSON (RFC 8259)."""
    import json

    def refuse(token):
        raise ValueError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)


def small_task(n: int = 256, **settings):
    """The reference autoencoder (``ReferenceTask``) on ``n`` samples instead of 16,384: the same
    model and data generator, a fraction of the time; ``settings`` override its other fields
    (``steps=3``)."""
    from fpsim.experiments.tasks import ReferenceTask

    return ReferenceTask(n=n, **settings)


def f64(t: Tensor) -> np.ndarray:
    """A tensor's exact values as float64 numpy."""
    return np.asarray(t.backend.to_numpy(t.f32()), dtype=np.float64)


def finite_difference(f, xs: list[np.ndarray], i: int, h: float = 1e-6) -> np.ndarray:
    """d f(xs) / d xs[i] by central differences in float64 (f returns a float)."""
    x = xs[i]
    g = np.zeros_like(x)
    flat, gflat = x.reshape(-1), g.reshape(-1)
    for j in range(flat.size):
        old = flat[j]
        step = h * max(1.0, abs(old))
        flat[j] = old + step
        hi = f(*xs)
        flat[j] = old - step
        lo = f(*xs)
        flat[j] = old
        gflat[j] = (hi - lo) / (2 * step)
    return g


def check_op(shapes, ref_fn, fp_fn, *, fmt="float32", out_fmt=None, ranges=None, inputs=None, grad=True,
             rtol=1e-6, atol=1e-6, ulps=1.0, grad_rtol=1e-4, grad_atol=1e-5, seed=0, torch_fn=None,
             backend=None):
    """Check one op: forward against float64 ``ref_fn`` and backward against finite differences.

    shapes: one shape per tensor input (``()`` for a 0-d tensor).  ranges: ``(low, high)`` for
    all inputs or a list of one per input (default (-2, 2)).  inputs: explicit arrays instead.
    Inputs are rounded into ``fmt``; the reference sees those exact values in float64.
    Forward: shape, ``out_fmt`` (default ``fmt``), storage dtype; float32 values within
    rtol/atol, low formats within ``ulps`` of the format's spacing at the reference.
    Backward (``grad``): ``out.backward(W)`` for random W; each input's gradient (shape, its
    format) against central differences of sum(ref_fn(x) * W) in float64.
    torch_fn: the same function on torch float32 tensors; values and grads compared too.
    Returns (out, tensors) for further checks.
    """
    rng = np.random.default_rng(seed)
    if inputs is None:
        rs = ranges if isinstance(ranges, list) else [ranges or (-2.0, 2.0)] * len(shapes)
        inputs = [rng.uniform(lo, hi, s) for s, (lo, hi) in zip(shapes, rs)]
    ts = [tensor(np.asarray(x, dtype=np.float64), fmt, requires_grad=True, backend=backend) for x in inputs]
    xs = [f64(t) for t in ts]
    out_fmt = out_fmt or fmt
    with np.errstate(all="ignore"):
        out = fp_fn(*ts)
        ref = np.asarray(ref_fn(*[x.copy() for x in xs]), dtype=np.float64)
    assert isinstance(out, Tensor), type(out)
    assert out.shape == ref.shape, f"shape {out.shape}, reference {ref.shape}"
    assert out.fmt.name == out_fmt, f"format {out.fmt.name}, expected {out_fmt}"
    assert out.numpy().dtype == LAYOUT[out_fmt][2]
    got = f64(out)
    if out_fmt == "float32":
        np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol, err_msg="forward values")
    else:
        err = np.abs(got - ref)
        tol = ulps * spacing(ref, out_fmt)
        assert np.all(err <= tol), f"forward off by {np.max(err / tol):.3g} x {ulps} ulp of {out_fmt}"

    W = rng.standard_normal(out.shape).astype(np.float32)
    if grad:
        out.backward(W)
        W64 = W.astype(np.float64)
        loss = lambda *a: float(np.sum(np.asarray(ref_fn(*a), dtype=np.float64) * W64))
        for i, t in enumerate(ts):
            assert t.grad is not None, f"input {i} got no gradient"
            assert t.grad.shape == t.shape and t.grad.fmt == t.grad_fmt
            fd = finite_difference(loss, [x.copy() for x in xs], i)
            scale = max(1.0, float(np.max(np.abs(fd))))
            np.testing.assert_allclose(f64(t.grad), fd, rtol=grad_rtol, atol=grad_atol * scale,
                                       err_msg=f"gradient of input {i}")
    if torch_fn is not None:
        _check_torch(torch_fn, ts, xs, out, W, grad)
    return out, ts


def _check_torch(torch_fn, ts, xs, out, W, grad):
    import torch

    tt = [torch.tensor(x.astype(np.float32), requires_grad=True) for x in xs]
    tout = torch_fn(*tt)
    np.testing.assert_allclose(f64(out), tout.detach().double().numpy(), rtol=1e-5, atol=1e-6,
                               err_msg="forward vs torch")
    if grad:
        tout.backward(torch.tensor(W))
        for i, (t, x) in enumerate(zip(ts, tt)):
            np.testing.assert_allclose(f64(t.grad), x.grad.double().numpy(), rtol=1e-4, atol=1e-6,
                                       err_msg=f"gradient of input {i} vs torch")


# --------------------------------------------------------------------------------- against PyTorch, per format

TORCH_DTYPE = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16"}


def round_once(x64, fmt: str) -> np.ndarray:
    """float64 values rounded ONCE to nearest-even into ``fmt`` (numpy's float64 -> float16 is
    correct; bfloat16 goes through gfloat, not ml_dtypes, whose float64 -> bfloat16 rounds twice)."""
    x64 = np.asarray(x64, dtype=np.float64)
    if fmt == "float32":
        return x64.astype(np.float32)
    if fmt == "float16":
        return x64.astype(np.float16)
    import pytest

    gfloat = pytest.importorskip("gfloat")
    from gfloat.formats import format_info_bfloat16

    return np.asarray(gfloat.round_ndarray(format_info_bfloat16, x64)).astype(np.float32).astype(ml_dtypes.bfloat16)


def _agreement(got, want, fmt: str, what: str, min_identical: float) -> float:
    """Share of bit-identical elements; asserts >= min_identical and the rest within 1 ulp
    (float32: 1e-6 relative to the largest |want|)."""
    got = np.asarray(got).astype(LAYOUT[fmt][2])
    want = np.asarray(want).astype(LAYOUT[fmt][2])
    assert got.shape == want.shape, f"{what}: shape {got.shape}, reference {want.shape}"
    if fmt == "float32":
        g64, w64 = got.astype(np.float64), want.astype(np.float64)
        scale = float(np.max(np.abs(w64), initial=0.0)) or 1.0
        np.testing.assert_allclose(g64, w64, rtol=1e-6, atol=1e-6 * scale, err_msg=what)
        return float(same_bits(got, want).mean())
    ok = same_bits(got, want)
    share = float(ok.mean())
    g64, w64 = got.astype(np.float64), want.astype(np.float64)
    with np.errstate(invalid="ignore"):
        near = np.abs(g64 - w64) <= spacing(w64, fmt)
    bad = ~(ok | near)
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {ok.size} elements more than 1 ulp of {fmt} away, e.g. "
                           f"got {g64[bad][:4]} want {w64[bad][:4]}")
    assert share >= min_identical, f"{what}: only {share:.2%} bit-identical (need {min_identical:.0%})"
    return share


def check_against_torch(fp_fn, torch_fn, inputs, fmt: str, *, grads=True, fwd_ref64=False, bwd_ref64=False,
                        torch_fn64=None, min_identical=0.99, seed=0):
    """One fpsim op against PyTorch CPU, in ``fmt`` (float32, float16 or bfloat16).

    ``inputs``: float64 arrays, rounded into ``fmt`` once; both sides see the same values.
    The fpsim op gets fpsim tensors, ``torch_fn`` torch tensors of the same dtype; the output's
    gradient W (random, in ``fmt``) is the same on both sides.  float32: values and gradients
    within 1e-6 relative (to the largest magnitude).  float16 / bfloat16: at least
    ``min_identical`` of the elements bit-identical, the rest within 1 ulp.

    ``fwd_ref64`` / ``bwd_ref64``: where PyTorch CPU is not single-rounding in ``fmt`` (its
    layer_norm backward, its embedding backward), the reference is instead torch's float64
    result rounded once into ``fmt`` - what the engine's contract promises.  ``torch_fn64``
    computes that reference instead of ``torch_fn`` where it needs to differ (a backward that
    reads the op's rounded output must be evaluated at that output).
    Returns {name: share bit-identical} for the output and each gradient.
    """
    import torch

    tdt = getattr(torch, TORCH_DTYPE[fmt])
    ts = [tensor(np.asarray(x, dtype=np.float64), fmt, requires_grad=grads) for x in inputs]
    vals64 = [f64(t) for t in ts]
    with np.errstate(all="ignore"):
        out = fp_fn(*ts)

    def run(dtype, fn):
        tt = [torch.tensor(v, dtype=torch.float64).to(dtype).requires_grad_(grads) for v in vals64]
        return tt, fn(*tt)

    tt, tout = run(tdt, torch_fn)
    rng = np.random.default_rng(seed)
    W = round_once(rng.standard_normal(out.shape), fmt).astype(np.float32)
    shares = {}
    want = tout.detach().float().numpy()
    if fwd_ref64 or bwd_ref64:
        tt64, tout64 = run(torch.float64, torch_fn64 or torch_fn)
    if fwd_ref64:
        want = round_once(tout64.detach().numpy(), fmt)
    shares["forward"] = _agreement(out.numpy(), want, fmt, f"{fmt} forward", min_identical)
    if not grads:
        return shares
    out.backward(W)
    tout.backward(torch.tensor(W).to(tdt))
    if bwd_ref64:
        tout64.backward(torch.tensor(W, dtype=torch.float64))
    for i, t in enumerate(ts):
        want = round_once(tt64[i].grad.numpy(), fmt) if bwd_ref64 else tt[i].grad.float().numpy()
        assert t.grad is not None, f"input {i} got no gradient"
        shares[f"grad {i}"] = _agreement(t.grad.numpy(), want, fmt, f"{fmt} gradient of input {i}", min_identical)
    return shares


# ------------------------------------------------------------------ fpsim's definitions, written out
# The engine's sums are exact sums rounded once to float32, its exp / log / tanh correctly rounded
# float32 values (fpsim.numerics).  These references compute the same from the definition, with
# exact rationals and float64, never with fpsim: tests/numerics/test_numerics.py checks fpsim.numerics
# itself on the hard cases (ties, cancellation, halfway points) against fractions and mpmath.


def rne_f32(q) -> np.float32:
    """The float32 nearest to the exact number q (a Fraction or int), ties to even; +-inf from the
    overflow threshold up; an exact 0 is +0, a tiny negative q rounds to -0."""
    from fractions import Fraction

    q = Fraction(q)
    if q == 0:
        return np.float32(0.0)
    sign, a = (-1 if q < 0 else 1), abs(q)
    big = Fraction(float(np.finfo(np.float32).max))
    if a >= big + Fraction(2) ** 103:
        return np.float32(sign * np.inf)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    e = e if Fraction(2) ** e <= a else e - 1
    e = max(e, -126)
    ulp = Fraction(2) ** (e - 23)
    k, rem = divmod(a, ulp)
    if rem * 2 > ulp or (rem * 2 == ulp and k % 2 == 1):
        k += 1
    return np.float32(sign * float(k * ulp))


def exact_sum_f32(x, axis=None, keepdims: bool = False) -> np.ndarray:
    """The exact sum of float32 values over ``axis`` (fractions), rounded once to float32; inf
    and NaN by IEEE's rules (NaN if any NaN or +inf meets -inf)."""
    from fractions import Fraction

    x = np.asarray(x, dtype=np.float32)
    axes = tuple(range(x.ndim)) if axis is None else ((axis,) if np.isscalar(axis) else tuple(axis))
    axes = tuple(a % x.ndim for a in axes)
    moved = np.moveaxis(x, axes, tuple(range(x.ndim - len(axes), x.ndim)))
    lead = moved.shape[: x.ndim - len(axes)]
    rows = moved.reshape(lead + (-1,)).reshape(-1, int(np.prod(moved.shape[len(lead):], dtype=int)))
    out = []
    for r in rows:
        if np.isnan(r).any() or (np.isposinf(r).any() and np.isneginf(r).any()):
            out.append(np.float32(np.nan))
        elif np.isinf(r).any():
            out.append(np.float32(r[np.isinf(r)][0]))
        else:
            out.append(rne_f32(sum((Fraction(float(v)) for v in r), Fraction(0))))
    res = np.array(out, np.float32).reshape(lead)
    if keepdims:
        res = res.reshape(tuple(1 if i in axes else n for i, n in enumerate(x.shape)))
    return res


def exact_mean_f32(x, axis=None, keepdims: bool = False) -> np.ndarray:
    """:func:`exact_sum_f32` divided by the count in float32 (two roundings, as the engine's mean)."""
    x = np.asarray(x, dtype=np.float32)
    axes = tuple(range(x.ndim)) if axis is None else ((axis,) if np.isscalar(axis) else tuple(axis))
    n = int(np.prod([x.shape[a] for a in axes], dtype=int))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(exact_sum_f32(x, axis, keepdims) / np.float32(n), np.float32)


def exact_matmul_f32(a, b) -> np.ndarray:
    """2-d a @ b: every product exact, their exact sum (fractions) rounded once to float32."""
    from fractions import Fraction

    fa = [[Fraction(float(v)) for v in row] for row in np.asarray(a, np.float32)]
    fb = [[Fraction(float(v)) for v in col] for col in np.asarray(b, np.float32).T]
    return np.array([[rne_f32(sum((p * q for p, q in zip(r, c)), Fraction(0))) for c in fb] for r in fa],
                    np.float32).reshape(len(fa), len(fb))


def cr_f32(f64_fn, x) -> np.ndarray:
    """f64_fn (numpy's float64 exp, log, tanh, ...) of float32 x, rounded to float32: the correctly
    rounded value but in about one case in two million, which the fixed inputs of the tests avoid
    (tests/numerics/test_numerics.py checks the engine's own functions on random inputs against mpmath)."""
    with np.errstate(all="ignore"):
        return f64_fn(np.asarray(x, np.float32).astype(np.float64)).astype(np.float32)
