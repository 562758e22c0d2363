"""The fast cast paths behind the engine's hot loop, pinned bit for bit to independent casts.

numpy's own float32 <-> float16 casts are correct (and slow); gfloat rounds float64 exactly.
The fast paths take over above a size threshold, so the arrays here are large enough to reach
them, and hold every class of value: normal, subnormal, the flush and overflow edges, inf, NaN.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from fpsim import formats, ops
from fpsim.backend import BACKENDS
from fpsim.formats import cast, f16_to_f32, f32_to_f16, kernels
from fpsim.tensor import tensor

gfloat = pytest.importorskip("gfloat")
from gfloat.formats import format_info_bfloat16  # noqa: E402


def _f32_patterns(step=4099, offset=0):
    """Every step-th float32 bit pattern: ~10**6 values across every exponent, NaNs included."""
    return (np.arange(offset, 2**32, step, dtype=np.uint64)).astype(np.uint32).view(np.float32)


@pytest.mark.parametrize("offset", [0, 1234])
def test_f32_to_f16_matches_numpy_on_a_sweep_of_bit_patterns(offset):
    x = _f32_patterns(offset=offset)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    got = f32_to_f16(x)  # > 2**17 values: the chunked path
    assert got.dtype == np.float16 and got.shape == x.shape
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))  # NaN payloads and -0 included


def test_f32_to_f16_every_rounding_edge_in_every_layout():
    # the midpoints between neighbouring float16 values, and one float32 ulp either side
    h = np.arange(0x7C00, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float64)
    mid = ((h[:-1] + h[1:]) / 2).astype(np.float32)  # exact in float32
    edges = np.array([65504, 65519.99, 65520, 65536, 1e30, np.inf, np.nan, 2.0**-25, 2.0**-24, 2.0**-14,
                      2.0**-14 * (1 - 2**-20), 1e-45, 0.0], np.float32)
    x = np.concatenate([mid, np.nextafter(mid, np.float32(0)), np.nextafter(mid, np.float32(np.inf)), edges])
    x = np.concatenate([x, -x])
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    for arr, ref in [(x, want), (x[:1000], want[:1000]), (x.reshape(2, -1).T, want.reshape(2, -1).T)]:
        got = f32_to_f16(arr)
        assert got.shape == ref.shape
        assert np.array_equal(got.view(np.uint16), ref.view(np.uint16))
    assert f32_to_f16(np.float32(3e-8)).shape == ()  # 0-d in, 0-d out
    assert float(f32_to_f16(np.array(3e-8, np.float32))) == 2.0**-24


def _numpy_f16(x):
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(np.float16).view(np.uint16)


def test_f32_to_f16_every_sign_exponent_and_high_mantissa():
    """Every float32 upper half (sign, exponent, top 7 mantissa bits) with lower halves at and
    around float16's rounding bit (bit 12) and sticky bits, plus random ones."""
    hi = np.arange(2**16, dtype=np.uint32) << 16
    lows = np.array([0, 1, 0x0FFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x3000, 0xE000, 0xEFFF, 0xF000, 0xFFFF],
                    np.uint32)
    rnd = np.random.default_rng(18).integers(0, 2**16, 4, dtype=np.uint32)
    x = (hi[:, None] | np.concatenate([lows, rnd])[None, :]).reshape(-1).view(np.float32)
    got = f32_to_f16(x)
    assert np.array_equal(got.view(np.uint16), _numpy_f16(x))


def test_f32_to_f16_chunk_edges_layouts_and_a_late_nan():
    """Sizes around the kernel's chunk, non-contiguous input, and a NaN only in the last chunk."""
    chunk = kernels._F16_CHUNK
    rng = np.random.default_rng(5)
    for n in (kernels.F16_BITS_MIN_SIZE, chunk - 1, chunk, chunk + 1, 3 * chunk + 7):
        x = (rng.standard_normal(n) * 10.0 ** rng.uniform(-9, 5, n)).astype(np.float32)
        x[-1] = np.nan
        x[0] = -0.0
        got = f32_to_f16(x)
        assert np.array_equal(got.view(np.uint16), _numpy_f16(x))
    m = rng.standard_normal((300, 400)).astype(np.float32)
    for arr in (m.T, m[::2, ::3], m[:, 1:]):
        assert np.array_equal(f32_to_f16(arr).view(np.uint16), _numpy_f16(arr))


def test_f32_to_f16_from_several_threads_at_once():
    """The kernel's scratch buffers are per thread: concurrent casts do not mix."""
    import threading

    rng = np.random.default_rng(7)
    xs = [(rng.standard_normal(3 * kernels._F16_CHUNK) * 10.0**k).astype(np.float32) for k in (-6, -2, 0, 3)]
    want = [_numpy_f16(x) for x in xs]
    bad = []

    def work(i):
        for _ in range(5):
            if not np.array_equal(f32_to_f16(xs[i]).view(np.uint16), want[i]):
                bad.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


def test_f16_to_f32_every_pattern_on_both_paths():
    h = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
    want = h.astype(np.float32)
    for arr in (h, h[:100], np.tile(h, 2).reshape(256, 512), h.reshape(256, 256).T):
        got = f16_to_f32(arr)
        ref = arr.astype(np.float32)
        assert got.dtype == np.float32 and got.shape == ref.shape
        assert np.array_equal(got.view(np.uint32), ref.view(np.uint32))
    finite = h[np.isfinite(h)]  # no inf/NaN: the path without the table fix-up
    assert np.array_equal(f16_to_f32(finite).view(np.uint32), finite.astype(np.float32).view(np.uint32))
    assert np.array_equal(BACKENDS["numpy"].to_f32(h).view(np.uint32), want.view(np.uint32))


def test_f16_to_f32_finds_a_lone_inf_or_nan_of_either_sign():
    """The large-array path detects inf/NaN by two reductions over the 16-bit patterns: one
    special value of each kind, anywhere, is widened exactly."""
    base = np.random.default_rng(3).standard_normal(40000).astype(np.float16)
    for bits in (0x7C00, 0xFC00, 0x7C01, 0xFE00, 0x7FFF, 0xFFFF):
        for pos in (0, 20000, -1):
            h = base.copy()
            h.view(np.uint16)[pos] = bits
            got = f16_to_f32(h)
            assert np.array_equal(got.view(np.uint32), h.astype(np.float32).view(np.uint32))


def test_float64_to_bfloat16_rounds_once_at_every_midpoint_crossing():
    """float64 values that float32 rounds onto a bfloat16 midpoint (where ml_dtypes' two
    roundings go wrong) - and the midpoints themselves - against gfloat's exact rounding."""
    rng = np.random.default_rng(3)
    hi = rng.integers(0, 0x7F7F, 100_000, dtype=np.uint32) << 16  # every exponent, subnormals too
    mid = (hi | 0x8000).view(np.float32).astype(np.float64)
    x = np.concatenate([mid, mid * (1 + 2.0**-30), mid * (1 - 2.0**-30), np.nextafter(mid, np.inf)])
    x = np.concatenate([x, -x, [0.0, -0.0, np.inf, -np.inf, np.nan, 1e300, 3.4e38, 2.0**-134 * (1 + 2.0**-40)]])
    with np.errstate(over="ignore"):
        want = gfloat.round_ndarray(format_info_bfloat16, x)
        naive = x.astype(ml_dtypes.bfloat16).astype(np.float64)
    got = cast(x, "bfloat16").astype(np.float64)
    assert np.array_equal(got, want, equal_nan=True)
    if tuple(int(v) for v in ml_dtypes.__version__.split(".")[:2]) < (0, 7):
        # ml_dtypes before 0.7 casts float64 -> float32 -> bfloat16, rounding twice: the inputs do
        # hit those cases (0.7 rounds once, as fpsim does)
        assert (naive != want).sum() > 10_000


def test_to_odd_f32_sets_the_sticky_bit():
    x = np.array([1 + 2.0**-30, 1 - 2.0**-30, -(1 + 2.0**-30), 1.0, 2.0**-149 * 0.75, 1e300, np.inf, -0.0])
    y = formats.round._to_odd_f32(x)
    bits = y.view(np.uint32)
    assert list(bits[:4] & 1) == [1, 1, 1, 0]
    assert y[0] == np.float32(1 + 2.0**-23) and y[1] == np.float32(1 - 2.0**-24)
    assert y[4] == np.float32(2.0**-149) and y[5] == np.finfo(np.float32).max and y[6] == np.inf
    assert bits[7] == 0x80000000


def test_relu_selects_exactly_and_monitors_still_see_it():
    import fpsim

    v = np.array([-2.0, -0.0, 0.0, 1.5, np.inf, -np.inf, np.nan, 6e-8, -6e-8], np.float32)
    for fmt in ("float32", "float16", "bfloat16", "float8_e4m3fn"):
        x = tensor(v, fmt, requires_grad=True)
        with fpsim.monitor() as m:
            y = ops.relu(x)
        out = y.numpy().astype(np.float32)
        xv = x.numpy().astype(np.float32)  # inf is NaN in e4m3fn, 6e-8 flushes in fp8
        assert y.data.dtype == x.data.dtype
        assert np.signbit(out[1]) and not np.signbit(out[0]) and out[0] == 0  # -0 passes, -2 becomes +0
        want = np.where(xv < 0, np.float32(0), xv)
        assert np.array_equal(out.view(np.uint32), want.view(np.uint32))  # NaN and -0 too, bit for bit
        fwd = [c for k, c in m.counts.items() if k[0] == "forward" and k[2] == "relu"]
        assert fwd and fwd[0][0] == v.size and fwd[0][1] == 0  # counted, nothing inexact
        g = np.array([1, 2, 3, 4, 5, np.inf, np.nan, 7, 8], np.float32)
        y.backward(tensor(g, fmt))
        gx = x.grad.numpy().astype(np.float32)
        want = np.where(x.numpy().astype(np.float32) > 0, g, 0).astype(np.float32)
        assert np.array_equal(gx, cast(want, fmt).astype(np.float32), equal_nan=True)
