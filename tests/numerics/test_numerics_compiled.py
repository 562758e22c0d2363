"""fpsim.numerics' compiled path (numba kernels) against its numpy path and the exact references.

The hard cases of numerics/test_numerics.py - ties (float16 and bfloat16 products on halfway points),
cancellation, 120 binades, subnormals, the overflow threshold, inf, NaN, -0 - run on both paths,
with its helpers and case generators, and every result must be the same bits on both and the
exact value rounded once; so must batched, broadcast, transposed and strided products, a long
(chunked) K, every sum forced through the exact summation, and every elementary value forced
through decimal.  Skipped where numba is not installed.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

pytest.importorskip("numba")

import test_numerics as base  # noqa: E402  (the cases and references of the numpy path's tests)

from fpsim import numerics  # noqa: E402
from fpsim.numerics import compiled, elementary  # noqa: E402
from fpsim.numerics import matmul as numpy_matmul  # noqa: E402
from fpsim.numerics.compiled import _exact, use_compiled  # noqa: E402
from fpsim.numerics.compiled import _matmul as compiled_matmul  # noqa: E402

F16 = (10, 2.0**-24)
BF16 = (7, 2.0**-133)
F32_MAX = np.float32(np.finfo(np.float32).max)


def both(f, *args, **kwargs):
    """f's results on the numpy path and on the compiled path."""
    with use_compiled(False):
        r0 = np.asarray(f(*args, **kwargs))
    with use_compiled(True):
        r1 = np.asarray(f(*args, **kwargs))
    return r0, r1


def identical(r0, r1) -> bool:
    """Same shape, float32, same bits (NaN included: both paths give the positive quiet NaN)."""
    return (r0.shape == r1.shape and r0.dtype == r1.dtype == np.float32
            and np.array_equal(r0.view(np.uint32), r1.view(np.uint32)))


def test_the_switch():
    assert compiled.numba_installed()
    with use_compiled(True):
        assert compiled.enabled() and compiled.kernels() is not None
        with use_compiled(False):
            assert not compiled.enabled() and compiled.kernels() is None
        assert compiled.enabled()


BASE_TESTS = ["test_matmul_at_the_edges_of_float32", "test_matmul_inf_and_nan_follow_ieee",
              "test_batched_and_broadcast_matmul", "test_a_long_k_is_chunked_and_still_exact",
              "test_sum_axes_keepdims_and_special_values", "test_elementary_special_values", "test_pow"]


@pytest.mark.parametrize("on", [False, True], ids=["numpy", "compiled"])
@pytest.mark.parametrize("name", BASE_TESTS)
def test_the_reference_tests_pass_on_both_paths(name, on):
    with use_compiled(on):
        getattr(base, name)()


@pytest.mark.parametrize("on", [False, True], ids=["numpy", "compiled"])
def test_the_parametrised_reference_tests_pass_on_both_paths(on):
    with use_compiled(on):
        for seed in range(4):
            base.test_matmul_is_the_exact_sum_rounded_once(seed)
        for seed in range(3):
            base.test_sum_is_the_exact_sum_rounded_once(seed)
        for name in sorted(base.FUNCS):
            base.test_elementary_functions_are_correctly_rounded(name)


def _layouts(x):
    """x as C-ordered, Fortran-ordered, a transposed view and a strided view (the same values)."""
    wide = np.repeat(x, 2, axis=-1)
    return [x, np.asfortranarray(x), np.swapaxes(np.ascontiguousarray(np.swapaxes(x, -1, -2)), -1, -2),
            wide[..., ::2]]


@pytest.mark.parametrize("seed", range(6))
def test_matmul_cases_are_the_same_bits_on_both_paths(seed):
    for name, a, b, ga, gb in base._cases(seed):
        r0, r1 = both(numerics.matmul_f32, a, b, ga, gb)
        assert identical(r0, r1), (name, a.shape, b.shape)
        assert base.same(r1, base.ref_matmul(a, b)), name
        for la, lb in zip(_layouts(a), reversed(_layouts(b))):
            with use_compiled(True):
                assert identical(r0, numerics.matmul_f32(la, lb, ga, gb)), (name, la.strides, lb.strides)


@pytest.mark.parametrize("seed", range(3))
def test_matmul_with_every_sum_settled(seed, monkeypatch):
    """A bound too wide to decide anything: every entry is certified by quanta or summed exactly."""
    for mod in (numpy_matmul, compiled_matmul):
        monkeypatch.setattr(mod, "gamma", lambda n: 1e300)
    for name, a, b, ga, gb in base._cases(seed):
        r0, r1 = both(numerics.matmul_f32, a, b, ga, gb)
        assert identical(r0, r1) and base.same(r1, base.ref_matmul(a, b)), name


def _hard_rows(rng, n_rows: int, k: int) -> np.ndarray:
    """float32 rows whose exact sums are ties or near ties behind a cancellation of 2**60, with
    remainders 2**-90 below them: the compensated sum cannot decide them, Shewchuk's sum must."""
    rows = []
    for _ in range(n_rows):
        t = rng.integers(-50, 50, k).astype(np.float64) * np.exp2(rng.integers(-30, 0, k))
        t = np.concatenate([t[: k // 2], [2.0**60], t[k // 2:], [-(2.0**60)]])
        if rng.random() < 0.5:
            t = np.concatenate([t, rng.standard_normal(2) * 2.0**-90])
        rows.append(t.astype(np.float32))
    width = max(len(r) for r in rows)
    return np.stack([np.pad(r, (0, width - len(r))) for r in rows])


def _ref_sums(x) -> np.ndarray:
    return np.array([base.rne_f32(sum((Fraction(float(v)) for v in r), Fraction(0))) for r in x], np.float32)


def test_exact_sums_of_ties_behind_cancellations():
    rng = np.random.default_rng(11)
    for k in (1, 3, 8, 23, 40):
        x = _hard_rows(rng, 40, k)
        want = _ref_sums(x)
        r0, r1 = both(numerics.sum_f32, x, axis=1)
        assert identical(r0, r1) and base.same(r1, want), k
        r0, r1 = both(numerics.sum_f32, np.ascontiguousarray(x.T), axis=0)  # the strided kernel
        assert identical(r0, r1) and base.same(r1, want), k
        ones = np.ones((x.shape[1], 3), np.float32)
        r0, r1 = both(numerics.matmul_f32, x, ones)  # products exact: the same sums, from a product
        assert identical(r0, r1) and base.same(r1[:, 0], want) and base.same(r1[:, 2], want), k


def test_matmul_special_values_on_both_paths():
    inf, nan, tiny = np.float32(np.inf), np.float32(np.nan), np.float32(2.0**-149)
    half_up = np.float32(2.0**103)
    a = np.array([[inf, 1, 0, 0], [inf, -inf, 0, 0], [nan, 1, 0, 0], [inf, 0, 0, 0], [-0.0, -0.0, -0.0, -0.0],
                  [F32_MAX, half_up, -half_up, 0], [F32_MAX, half_up, 0, 0], [-F32_MAX, -half_up, 0, 0],
                  [F32_MAX, half_up, -tiny, 0], [tiny, tiny, tiny, -tiny], [1, -1, 2.0**-24, 0]], np.float32)
    b = np.array([[1, 0, 1], [1, 1, -0.0], [1, 1, 1], [1, 0, 1]], np.float32)
    for la in _layouts(a):
        for lb in _layouts(b):
            r0, r1 = both(numerics.matmul_f32, la, lb)
            assert identical(r0, r1)
    fin = np.isfinite(a).all(axis=1)
    assert not np.signbit(r1[np.isnan(r1)]).any()
    assert base.same(r1[fin], base.ref_matmul(a[fin], b))
    assert not np.signbit(r1[4]).any()  # exact zeros are +0
    assert r1[6, 0] == inf and r1[8, 0] == F32_MAX and r1[7, 0] == -inf  # at and below the overflow threshold


@pytest.mark.parametrize("grid", [None, F16], ids=["float32", "float16"])
def test_batched_broadcast_and_transposed_products(grid):
    rng = np.random.default_rng(7)

    def vals(shape):
        x = rng.standard_normal(shape)
        return base.low(x, np.float16) if grid else (x * np.exp2(rng.integers(-20, 20, shape))).astype(np.float32)

    pairs = [((2, 3, 4, 9), (3, 9, 5)), ((4, 9), (2, 9, 5)), ((1, 3, 4, 9), (2, 1, 9, 5)), ((2, 4, 9), (9, 5)),
             ((3, 1, 7), (3, 7, 1)), ((5, 64), (64, 3))]
    for sa, sb in pairs:
        a, b = vals(sa), vals(sb)
        r0, r1 = both(numerics.matmul_f32, a, b, grid, grid)
        assert identical(r0, r1), (sa, sb)
        at = np.swapaxes(np.ascontiguousarray(np.swapaxes(a, -1, -2)), -1, -2)  # each matrix Fortran-ordered
        bt = np.swapaxes(np.ascontiguousarray(np.swapaxes(b, -1, -2)), -1, -2)
        with use_compiled(True):
            assert identical(r0, numerics.matmul_f32(at, bt, grid, grid)), (sa, sb)
    a, b = vals((2, 3, 4, 9)), vals((3, 9, 5))
    got = numerics.matmul_f32(a, b, grid, grid)
    assert all(base.same(got[i, j], base.ref_matmul(a[i, j], b[j])) for i in range(2) for j in range(3))


@pytest.mark.parametrize("grid", [None, F16], ids=["float32", "float16"])
def test_a_tall_product_in_blocks_of_rows(grid):
    """M large enough for the compiled path's blocks of rows: float16 values, whose short sums land
    on halfway points (a sixth of them left open without the grid), and cancellations of 2**12."""
    rng = np.random.default_rng(4)
    m, k, n = 20011, 9, 5
    a, b = base.low(rng.standard_normal((m, k)), np.float16), base.low(rng.standard_normal((k, n)), np.float16)
    a[::7, 0], a[::7, 1], b[:2] = 2.0**12, -(2.0**12), 1
    r0, r1 = both(numerics.matmul_f32, a, b, grid, grid)
    assert identical(r0, r1)
    pick = np.r_[0:50, m - 50:m, 9000:9100]
    assert base.same(r1[pick], base.ref_matmul(a[pick], b))


def test_a_long_k_batched_and_on_a_grid():
    rng = np.random.default_rng(3)
    k = 4096 + 37
    a = rng.standard_normal((2, 3, k)).astype(np.float32)
    b = rng.standard_normal((k, 2)).astype(np.float32)
    a[:, 0, :2] = [2.0**30, -(2.0**30)]
    b[:2, 0] = 1
    r0, r1 = both(numerics.matmul_f32, a, b)
    assert identical(r0, r1) and base.same(r1[1], base.ref_matmul(a[1], b))
    with use_compiled(True):
        assert identical(r0, numerics.matmul_f32(a, np.asfortranarray(b)))
    a16, b16 = base.low(a / 2.0**16, np.float16), base.low(b, np.float16)  # 2**14 cancels: within float16
    r0, r1 = both(numerics.matmul_f32, a16, b16, F16, F16)
    assert identical(r0, r1) and base.same(r1[0], base.ref_matmul(a16[0], b16))
    abf = base.low(a * 8, ml_dtypes.bfloat16)
    r0, r1 = both(numerics.matmul_f32, abf, base.low(b, ml_dtypes.bfloat16), BF16, BF16)
    assert identical(r0, r1)


def test_sums_over_every_layout_are_the_same_bits():
    rng = np.random.default_rng(5)
    shapes = [(7,), (3, 5), (2, 3, 4), (5000,), (2**15 + 5,), (3, 2100), (2100, 3), (16, 9, 33)]
    for shape in shapes:
        x = (rng.standard_normal(shape) * np.exp2(rng.integers(-40, 40, shape))).astype(np.float32)
        x16 = base.low(rng.integers(-9, 9, shape) * 2.0**-20, np.float16)
        axes = [None] + list(range(-1, len(shape))) + [tuple(range(len(shape)))] + ([(0, 2), (1, 2)] if len(shape) == 3 else [])
        for axis in axes:
            for keepdims in (False, True):
                r0, r1 = both(numerics.sum_f32, x, axis=axis, keepdims=keepdims)
                assert identical(r0, r1), (shape, axis, keepdims)
                r0, r1 = both(numerics.sum_f32, x16, axis=axis, keepdims=keepdims, grid=F16)
                assert identical(r0, r1), (shape, axis, keepdims, "grid")
                r0, r1 = both(numerics.mean_f32, x, axis=axis, keepdims=keepdims)
                assert identical(r0, r1), (shape, axis, keepdims, "mean")
        with use_compiled(True):
            assert identical(numerics.sum_f32(x, axis=0), numerics.sum_f32(np.asfortranarray(x), axis=0))
    x = (rng.standard_normal((3, 5000)) * np.exp2(rng.integers(-40, 40, (3, 5000)))).astype(np.float32)
    assert base.same(numerics.sum_f32(x, axis=1), _ref_sums(x))


def test_sums_at_the_edges():
    half_up = np.float32(2.0**103)
    tiny = np.float32(2.0**-149)
    rows = [[F32_MAX, half_up, 0, 0], [F32_MAX, half_up, -tiny, 0], [-F32_MAX, -half_up, 0, 0], [np.inf, 1, 0, 0],
            [np.inf, -np.inf, 0, 0], [np.nan, 1, 0, 0], [3e38, 3e38, 0, 0], [-0.0, -0.0, -0.0, -0.0],
            [tiny, -tiny, tiny, 0], [1, 2.0**-24, 0, 0], [1, 2.0**-24, 2.0**-60, 0]]
    x = np.array(rows, np.float32)
    for arr, axis in ((x, 1), (np.ascontiguousarray(x.T), 0)):
        r0, r1 = both(numerics.sum_f32, arr, axis=axis)
        assert identical(r0, r1)
    assert base.same(r1, [np.inf, F32_MAX, -np.inf, np.inf, np.nan, np.nan, np.inf, 0, tiny, 1, 1 + 2.0**-23])
    assert not np.signbit(r1[7]) and not np.signbit(r1[np.isnan(r1)]).any()


@pytest.mark.parametrize("name", sorted(base.FUNCS) + ["pow"])
def test_elementary_values_left_to_decimal_are_the_same_bits(name, monkeypatch):
    """A margin so wide that one value in a hundred goes to decimal, on both paths."""
    monkeypatch.setattr(elementary, "REL_MARGIN", 2.0**-30)
    rng = np.random.default_rng(9)
    x = (rng.standard_normal(3000) * np.exp2(rng.integers(-20, 7, 3000))).astype(np.float32)
    x[:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.0**-149]
    if name in ("log", "log1p", "pow"):
        x = np.abs(x)
    f = (lambda v: numerics.pow_f32(v, 1.5)) if name == "pow" else base.FUNCS[name][0]
    with np.errstate(all="ignore"):
        r0, r1 = both(f, x)
    assert identical(r0, r1)
    ref = base.FUNCS["exp" if name == "pow" else name][1]
    if name != "pow":
        pick = np.flatnonzero(np.isfinite(x) & (x != 0))[::97]
        assert base.same(r1[pick], [base._mp_f32(ref, float(v)) for v in x[pick]])


def test_elementary_shapes_and_layouts():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((40, 30)).astype(np.float32)
    for v in (x, np.asfortranarray(x), x[::3, ::2], np.float32(0.5), np.zeros((0, 3), np.float32),
              x.astype(np.float64), rng.standard_normal(2**15 + 3).astype(np.float32)):
        for f in (numerics.exp_f32, numerics.tanh_f32, numerics.log1p_f32):
            with np.errstate(all="ignore"):
                r0, r1 = both(f, v)
            assert identical(r0, r1) and r1.shape == np.shape(v)


def _run(code: str, **env) -> str:
    e = {k: v for k, v in os.environ.items() if k not in ("FPSIM_NUMBA", "NUMBA_CACHE_DIR")}
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, check=True).stdout


def test_import_fpsim_does_not_import_numba_and_fpsim_numba_0_turns_it_off():
    out = _run("import sys, fpsim, fpsim.numerics; print('numba' in sys.modules)")
    assert out.split() == ["False"]
    code = ("import numpy as np; from fpsim import numerics; from fpsim.numerics import compiled; "
            "numerics.matmul_f32(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32)); "
            "import sys; print(compiled.enabled(), compiled.kernels() is None, 'numba' in sys.modules)")
    assert _run(code, FPSIM_NUMBA="0").split() == ["False", "True", "False"]


def test_no_writable_cache_compiles_without_one(monkeypatch):
    real = _exact.numba.njit

    def njit(**opts):  # as numba does where no cache locator is writable
        if opts.get("cache"):
            raise RuntimeError("cannot cache function 'f': no locator available for file 'f.py'")
        return real(**opts)

    monkeypatch.setattr(_exact.numba, "njit", njit)
    f = _exact.jit()(lambda v: v * 2.0)
    assert f(np.ones(3)).tolist() == [2.0, 2.0, 2.0]
    # numba's own refusal (recent numba: a locator list with none usable), in a fresh process
    code = ("import numpy as np; from fpsim.numerics.compiled import _elementary, _matmul, _sums, _exact; "
            "o = np.empty(2, np.float32); f = np.empty(2, np.bool_); "
            "print(_exact.decide_row(np.ones(2), np.zeros(2), o, f), o.tolist())")
    assert _run(code, NUMBA_CACHE_LOCATOR_CLASSES="UserProvidedCacheLocator").split() == ["0", "[1.0,", "1.0]"]


def _fsum_or_error(v):
    try:
        return math.fsum(v.tolist())
    except OverflowError as e:
        return repr(e)


def _fsum64_or_error(x, axis):
    try:
        return numerics.fsum64(x, axis)
    except OverflowError as e:
        return repr(e)


def test_fsum64_is_math_fsum_on_both_paths():
    """fsum64 over at least ROUNDING_MIN_SIZE values (the compiled partials) and below it (math.fsum
    itself) is CPython's math.fsum of the same floats, bit for bit: cancellation to a tiny remainder,
    300 binades, subnormals, -0, a halfway case fsum corrects, inf / NaN / +inf meeting -inf (not
    fsum's error), and fsum's OverflowError where its running sum overflows."""
    rng = np.random.default_rng(5)
    n = compiled.ROUNDING_MIN_SIZE + 7
    wide = 10.0 ** rng.uniform(-300, 300, n) * rng.choice([-1.0, 1.0], n)
    half = np.r_[1.0, 2.0**-53, 2.0**-106, np.zeros(n)]  # 1 + ulp/2 + a little: fsum's halfway correction
    cases = [rng.standard_normal(n), wide, np.r_[wide, -wide], np.r_[1.0, np.full(n, 1e-16), -1.0], half,
             5e-324 * np.arange(n), np.full(n, -0.0), np.r_[np.full(n, 1e308), np.full(n, -1e308)]]
    for c in cases:
        want = _fsum_or_error(c)
        for on in (False, True):
            with use_compiled(on):
                got = _fsum64_or_error(c, None)
            assert type(got) is type(want) and (got == want if isinstance(want, str) else
                                                np.float64(got).view(np.int64) == np.float64(want).view(np.int64)), (got, want)
    for special, want in ((np.inf, np.inf), (np.nan, None), (-np.inf, -np.inf)):
        v = np.r_[rng.standard_normal(n), special]
        got = numerics.fsum64(v)
        assert (np.isnan(got) if want is None else got == want)
    assert np.isnan(numerics.fsum64(np.r_[rng.standard_normal(n), np.inf, -np.inf]))
    rows = np.stack([wide, -wide[::-1], rng.standard_normal(n), np.r_[wide[:-1], np.inf]])
    for axis in (1, -1):
        got = numerics.fsum64(rows, axis)
        want = np.array([math.fsum(r.tolist()) if np.isfinite(r).all() else np.inf for r in rows])
        assert got.view(np.int64).tolist() == want.view(np.int64).tolist()
    cols = numerics.fsum64(rows.T.copy(), 0)
    assert cols.view(np.int64).tolist() == got.view(np.int64).tolist()
