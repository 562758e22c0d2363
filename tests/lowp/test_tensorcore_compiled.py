"""The compiled tensor-core chain (fpsim/numerics/compiled/_tensorcore.py) against the numpy model,
bit for bit, and against MMA-Sim.

Every instruction of every architecture (each input format, float32 and float16 accumulators) on
random operands spread over the whole format - subnormals, zeros of both signs, the largest values,
inf and NaN, and for tf32 the float32 low bits the hardware ignores - with accumulators holding
zeros, subnormals, values near the format's largest, inf and NaN; K not a whole number of steps,
M > N (worked on the transpose), more columns than one tile, broadcast batches and promotion.  The
MMA-Sim tests of test_tensorcore.py and test_tensorcore_fast.py run here once more with the
compiled chain taking every product (where torch and MMA-Sim are installed).  Skipped where numba
is not installed or the compiled path is off (FPSIM_NUMBA=0), but for the one test of the numpy
model itself (products beyond float32's range).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from helpers import assert_same_bits as same

from fpsim import tensorcore as tc
from fpsim.numerics import compiled
from fpsim.numerics.compiled import use_compiled

needs_compiled = pytest.mark.skipif(not (compiled.numba_installed() and compiled.enabled()),
                                    reason="numba is not installed or the compiled path is off (FPSIM_NUMBA=0)")

_NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "tf32": np.float32,
       "float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2}
# (least, largest) exponent of a normal value, fraction bits
_RANGE = {"float16": (-14, 15, 10), "bfloat16": (-126, 127, 7), "tf32": (-126, 127, 10),
          "float8_e4m3fn": (-6, 8, 3), "float8_e5m2": (-14, 15, 2)}
INSTRUCTIONS = [(arch, f, out) for arch, at in tc.ARCHITECTURES.items() for f in at.inputs
                for out in ("float32", "float16") if out == "float32" or f not in ("bfloat16", "tf32")]


@pytest.fixture
def forced(monkeypatch):
    """The compiled chain for every product, however small; counts its calls."""
    if not compiled.enabled():
        pytest.skip("numba is not installed or the compiled path is off (FPSIM_NUMBA=0)")
    calls = []
    real = tc._chain_compiled
    monkeypatch.setattr(tc, "COMPILED_MIN_PRODUCTS", 0)
    monkeypatch.setattr(tc, "_chain_compiled", lambda *args: calls.append(1) or real(*args))
    return calls


def both(f, *args, **kwargs):
    """f's results on the numpy path and on the compiled path."""
    with use_compiled(False):
        r0 = f(*args, **kwargs)
    with use_compiled(True):
        r1 = f(*args, **kwargs)
    return r0, r1


def operand(rng, shape, fmt, special: bool):
    """Values over the format's whole exponent range, a tenth of them subnormal, a tenth zeros
    (both signs), a few the largest values, and with ``special`` a few inf and NaN (e4m3fn: NaN)."""
    lo, hi, fbits = _RANGE[fmt]
    x = rng.standard_normal(shape) * np.exp2(rng.integers(lo - fbits, hi + 1, shape).astype(np.float64))
    u = rng.random(shape)
    x[u < 0.1] = 0.0
    x[(u >= 0.1) & (u < 0.15)] *= -0.0
    sub = (u >= 0.15) & (u < 0.25)
    x[sub] = rng.integers(-(1 << fbits), 1 << fbits, int(sub.sum())) * 2.0 ** (lo - fbits)
    top = float(ml_dtypes.finfo(_NP[fmt]).max) if fmt != "tf32" else float(np.finfo(np.float32).max)
    x[(u >= 0.25) & (u < 0.27)] = top * np.sign(rng.standard_normal(int(((u >= 0.25) & (u < 0.27)).sum())))
    if special:
        x[(u >= 0.27) & (u < 0.272)] = np.inf
        x[(u >= 0.272) & (u < 0.274)] = -np.inf
        x[(u >= 0.274) & (u < 0.276)] = np.nan
    with np.errstate(over="ignore", invalid="ignore"):
        v = x.astype(np.float32)
    if fmt == "tf32":  # the low 13 bits the tensor core ignores: random
        low = rng.integers(0, 1 << 13, shape, dtype=np.uint32)
        fin = np.isfinite(v)
        v.view(np.uint32)[fin] |= low[fin]
        return v
    if fmt == "float8_e4m3fn":
        v[np.isinf(v)] = np.nan
    with np.errstate(over="ignore"):
        return v.astype(_NP[fmt])


def accumulator(rng, shape, out: str, special: bool):
    """c: normal values of several sizes, zeros of both signs, subnormals, values near the largest,
    and with ``special`` inf and NaN."""
    dt = np.dtype(out)
    info = np.finfo(dt)
    c = rng.standard_normal(shape) * np.exp2(rng.integers(-20, 20 if out == "float32" else 12, shape).astype(np.float64))
    u = rng.random(shape)
    c[u < 0.15] = 0.0
    c[(u >= 0.15) & (u < 0.2)] = -0.0
    c[(u >= 0.2) & (u < 0.3)] = rng.integers(-50, 50, int(((u >= 0.2) & (u < 0.3)).sum())) * float(info.smallest_subnormal)
    c[(u >= 0.3) & (u < 0.35)] = float(info.max) * (1 - rng.random(int(((u >= 0.3) & (u < 0.35)).sum())) * 2.0**-6)
    if special:
        c[(u >= 0.35) & (u < 0.37)] = -np.inf
        c[(u >= 0.37) & (u < 0.39)] = np.nan
    return c.astype(dt)


SHAPES = [((9, 70), (70, 13)), ((37, 45), (45, 5)), ((3, 40), (40, 300)), ((2, 5, 33), (33, 7))]


@needs_compiled
@pytest.mark.parametrize("arch,fmt,out", INSTRUCTIONS)
def test_every_instruction_on_random_operands_equals_the_numpy_model(forced, arch, fmt, out):
    rng = np.random.default_rng(abs(hash((arch, fmt, out))) % 2**32)
    for (sa, sb) in SHAPES:
        for special in (False, True):
            a = operand(rng, sa, fmt, special)
            b = operand(rng, sb, fmt, special)
            c = accumulator(rng, sa[:-1] + sb[-1:], out, special)
            r0, r1 = both(tc.matmul, a, b, c, arch=arch)
            same(r1, r0, f"{arch} {fmt} {out} {sa} @ {sb} special={special}")
            assert r1.dtype == np.dtype(out)
            if not special and out == "float32" and fmt != "tf32":  # float32 values of the format
                v0, v1 = both(tc.matmul_values, a.astype(np.float32), b.astype(np.float32), fmt, fmt, arch=arch)
                same(v1, v0, f"matmul_values {arch} {fmt}")
                same(v1, both(tc.matmul, a, b, arch=arch)[0], f"matmul_values {arch} {fmt} against matmul")
    assert forced


@needs_compiled
@pytest.mark.parametrize("arch", ["ada", "hopper", "blackwell"])
def test_mixed_fp8_formats_and_promotion_equal_the_numpy_model(forced, arch):
    rng = np.random.default_rng(7)
    for fa, fb in (("float8_e4m3fn", "float8_e5m2"), ("float8_e5m2", "float8_e4m3fn")):
        for special in (False, True):
            a, b = operand(rng, (20, 200), fa, special), operand(rng, (200, 30), fb, special)
            c = accumulator(rng, (20, 30), "float32", special)
            same(*both(tc.matmul, a, b, c, arch=arch), f"{arch} {fa} x {fb}")
            same(*both(tc.matmul, a, b, c, arch=arch, promote_every=64), f"{arch} {fa} x {fb} promote_every=64")
            same(*both(tc.matmul, b.T, a.T, c.T, arch=arch), f"{arch} transposed")
            c16 = accumulator(rng, (20, 30), "float16", special)
            same(*both(tc.matmul, a, b, c16, arch=arch), f"{arch} {fa} x {fb} into float16")
    assert forced


@needs_compiled
def test_the_fp8_recipe_shapes_take_the_compiled_chain_by_default(monkeypatch):
    """Without forcing: the tiny GPT's GEMMs (1024 x 64 x 64 and up) are above the threshold, and a
    docstring's product is below it (it keeps the numpy steps, which import no numba)."""
    calls = []
    real = tc._chain_compiled
    monkeypatch.setattr(tc, "_chain_compiled", lambda *args: calls.append(1) or real(*args))
    rng = np.random.default_rng(8)
    a = operand(rng, (1024, 64), "float8_e4m3fn", False)
    b = operand(rng, (64, 64), "float8_e4m3fn", False)
    r0, r1 = both(tc.matmul, a, b, arch="hopper")
    same(r1, r0, "1024 x 64 x 64")
    assert calls == [1]
    tc.matmul(a[:8], b[:, :8], arch="hopper")
    assert calls == [1]


def test_products_beyond_float32s_range_against_mmasim():
    """bfloat16 and tf32 products of 2^200 that cancel exactly leave the accumulator and the small
    products, truncated away below 2^(200 - F): 0, not the NaN of inf - inf (the numpy model forms
    such products in float64); two that do not cancel give inf (the sum is beyond 2^128).  On both
    paths where the compiled one is on."""
    tr = pytest.importorskip("support.tensorcore_reference")
    for fmt in ("bfloat16", "tf32"):
        dt = _NP[fmt]
        a = np.array([[2.0**100, 2.0**100, 1, 2.0**-60, 0, 0, 0, 0]], dt)
        b = np.array([[2.0**100, 2.0**100], [-(2.0**100), 2.0**99], [1, 1], [2.0**90, 0], [0, 0], [0, 0], [0, 0],
                      [0, 0]], dt)
        c = np.array([[2.0**30, -3.0]], np.float32)
        want = tr.mmasim("ampere", a, b, c, fmt, fmt)
        assert want[0, 0] == 0 and want[0, 1] == np.inf
        runs = both(tc.matmul, a, b, c, arch="ampere") if compiled.enabled() else (tc.matmul(a, b, c, arch="ampere"),)
        for got in runs:
            same(got, want, fmt)


# --------------------------------------------------- the MMA-Sim tests, with the compiled chain taking every product


try:
    import test_tensorcore as _ref
    import test_tensorcore_fast as _fast
except pytest.skip.Exception:  # no torch or no MMA-Sim: those tests skip where they live, and here
    _ref = _fast = None


@pytest.fixture(autouse=True)
def _compiled_for_the_reference_tests(request, monkeypatch):
    """The reference tests imported below run with the compiled chain taking every product (those
    that only check an error message take none)."""
    if getattr(request.function, "__module__", "") not in ("test_tensorcore", "test_tensorcore_fast"):
        yield
        return
    if not compiled.enabled():
        pytest.skip("numba is not installed or the compiled path is off (FPSIM_NUMBA=0)")
    monkeypatch.setattr(tc, "COMPILED_MIN_PRODUCTS", 0)
    with use_compiled(True):
        yield


if _ref is not None:
    from test_tensorcore import (  # noqa: F401
        test_cancellation_and_zeros,
        test_e8m13_output_keeps_13_fraction_bits,
        test_float32_overflow_of_the_sum_is_inf,
        test_fp8_mixed_e4m3_e5m2,
        test_long_k_all_positive_and_zero_mean,
        test_non_finite_inputs,
        test_promotion_is_a_float32_add_of_each_chunk,
        test_random_data_every_arch_and_input,
        test_subnormal_products_and_tiny_accumulator,
    )
    from test_tensorcore_fast import (  # noqa: F401
        test_batches_and_promotion_equal_the_general_chain,
        test_every_bit_pattern_equals_the_general_chain,
        test_fast_path_equals_the_general_chain,
        test_finite_inputs_near_float32s_largest_against_mmasim,
        test_random_and_wide_against_mmasim,
        test_small_accumulator_over_zero_products_against_mmasim,
        test_special_values_against_mmasim,
    )
