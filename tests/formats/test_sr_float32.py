"""Exact stochastic rounding from float32 input runs in float32 (``modekernels.round_magnitudes_f32``)
and gives the float64 algorithm's results bit for bit (``modes.round_magnitudes``, kept as the
reference: it still rounds every float64 input).

The all-pattern check: for the small formats every pair of neighbouring values of the format is
an interval, and each interval is probed with its ends, the float32 numbers next to them, 64
evenly spaced points and 64 random float32 numbers inside it, both signs, plus float32 subnormals,
values beyond max, infinities and NaN.  Each input is rounded with six uniform draws placed at the
comparison's edge: 0, the largest draw below 1, and the draws on the 2**-53 grid just below, at
and just above the input's fraction (the float64 path goes up where draw < fraction).  The draws
come from a generator whose ``random`` hands out a prepared array in order, so that both paths
see exactly the same draws, chunk after chunk."""

import ml_dtypes
import numpy as np
import pytest
from helpers import bits as _bits

from fpsim.formats import cast, decode, get_format, quantize
from fpsim.formats.modes import finish, round_magnitudes

ENUMERATED = ["float4_e2m1fn", "float8_e4m3fn", "float8_e5m2", "float6_e2m3fn", "float6_e3m2fn", "ocp_int8"]
ULP53 = 2.0**-53


class Draws(np.random.Generator):
    """A Generator whose ``random(size)`` returns the next ``size`` values of ``draws``."""

    def __init__(self, draws):
        super().__init__(np.random.PCG64(0))
        self.draws, self.used = np.asarray(draws, np.float64), 0

    def random(self, size=None, dtype=np.float64, out=None):
        n = int(np.prod(size))
        d = self.draws[self.used : self.used + n]
        assert d.size == n, "more draws asked for than prepared"
        self.used += n
        return d.reshape(size)


def _grid(f):
    """The format's finite values >= 0, sorted (every code point decoded)."""
    codes = np.arange(2**f.bits, dtype=np.uint8 if f.bits <= 8 else np.uint16)
    v = decode(codes, f).astype(np.float64)
    return np.unique(v[np.isfinite(v) & (v >= 0)])


def _inputs(f, rng, per_interval=64):
    g = _grid(f)
    lo, hi = g[:-1], g[1:]
    steps = lo[:, None] + (hi - lo)[:, None] * (np.arange(per_interval) / per_interval)
    rand = lo[:, None] + (hi - lo)[:, None] * rng.random((lo.size, per_interval))
    g32 = g.astype(np.float32)
    near = np.r_[np.nextafter(g32, np.float32(0)), np.nextafter(g32, np.float32(np.inf))]
    top = np.float32(g[-1])
    beyond = [top * 1.0001, top * 1.5, top * 2, top * 4, 3.4e38, np.inf]
    tiny = [1e-45, 1e-40, 1.2e-38, 1e-30, 1e-10]
    pos = np.r_[g, steps.ravel(), rand.ravel(), beyond, tiny].astype(np.float32)
    pos = np.r_[pos, near]
    x = np.r_[pos, -pos]
    if f.has_nan:
        x = np.r_[x, np.float32(np.nan)]
    return x


def _edge_draws(x32, f):
    """Six draws per input: 0, 1 - 2**-53 and the 2**-53 grid around the input's fraction."""
    a = np.abs(x32.astype(np.float64))
    ok = np.isfinite(a) & (a > 0)
    _, e2 = np.frexp(np.where(ok, a, 1.0))
    y = np.ldexp(np.where(ok, a, 1.0), f.mantissa_bits - np.maximum(e2 - 1, f.emin))
    frac = y - np.floor(y)
    at = np.floor(frac / ULP53) * ULP53
    draws = np.stack([np.zeros_like(frac), np.full_like(frac, 1 - ULP53), at - ULP53, at, at + ULP53,
                      at + 2 * ULP53])
    return np.clip(draws, 0, 1 - ULP53)


def _reference(x32, f, draws, saturate):
    """The float64 algorithm on the same values and draws, stored as ``cast`` stores it."""
    x64 = x32.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        vals = finish(round_magnitudes(x64, f, "stochastic", Draws(draws)), x64, f, "stochastic", saturate)
    return vals.astype(f.dtype)


@pytest.mark.parametrize("saturate", [False, True])
@pytest.mark.parametrize("name", ENUMERATED)
def test_every_interval_of_the_small_formats_at_the_edge_of_every_draw(name, saturate):
    f = get_format(name)
    x = _inputs(f, np.random.default_rng(7))
    draws = _edge_draws(x, f)
    xs = np.broadcast_to(x, draws.shape).copy()  # each input once per draw, the draws in the same order
    fast = cast(xs, f, "stochastic", saturate=saturate, rng=Draws(draws.ravel()))
    slow = _reference(xs.ravel(), f, draws.ravel(), saturate).reshape(xs.shape)
    assert np.array_equal(_bits(fast), _bits(slow))
    # the check can fail: the draws decide (at the fraction the value stays, just below it goes up)
    ups = np.abs(fast.astype(np.float64)) > np.abs(cast(xs, f, "toward_zero", saturate=True).astype(np.float64))
    assert ups.any() and not ups.all()


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_sixteen_bit_formats_on_sampled_intervals(name):
    """float16 and bfloat16 (65536 patterns: a sample of the intervals; bfloat16 takes the integer
    path, its fraction being the low 16 bits of the float32 pattern)."""
    f = get_format(name)
    rng = np.random.default_rng(11)
    g = _grid(f)
    idx = np.r_[np.arange(40), rng.choice(g.size - 1, 400, replace=False), g.size - 41 + np.arange(40)]
    lo, hi = g[idx], np.minimum(g[idx + 1], g[-1])
    x = (lo[:, None] + (hi - lo)[:, None] * rng.random((idx.size, 64))).astype(np.float32).ravel()
    x = np.r_[x, -x, np.float32(np.inf), np.float32(np.nan), np.float32(1e-45), np.float32(3e38)]
    draws = _edge_draws(x, f)
    xs = np.broadcast_to(x, draws.shape).copy()
    for saturate in (False, True):
        fast = cast(xs, f, "stochastic", saturate=saturate, rng=Draws(draws.ravel()))
        slow = _reference(xs.ravel(), f, draws.ravel(), saturate).reshape(xs.shape)
        assert np.array_equal(_bits(fast), _bits(slow))


@pytest.mark.parametrize("name", ENUMERATED + ["bfloat16", "float16"])
def test_a_real_generator_gives_the_float64_paths_results(name):
    """Seeded draws, more values than one chunk of the kernel (2**16): float32 input and the same
    values as float64 input (which still take the float64 algorithm) round alike."""
    f = get_format(name)
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(150_001) * np.exp(rng.uniform(-12, 6, 150_001))).astype(np.float32)
    for saturate in (False, True):
        fast = cast(x, f, "stochastic", saturate=saturate, seed=5)
        slow = cast(x.astype(np.float64), f, "stochastic", saturate=saturate, seed=5)
        assert np.array_equal(_bits(fast), _bits(slow))


def test_block_elements_round_as_the_float64_path_does():
    """mxfp4 with stochastically rounded elements: the elements equal the float64 algorithm's
    rounding of the scaled values (x times the block's power-of-two factor, exact in float32)."""
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((64, 96)) * 3).astype(np.float32)
    q = quantize(x, "mxfp4", rounding="stochastic", seed=9)
    factor = np.repeat(1 / q.stats.scale, 32, axis=-1).astype(np.float32)
    scaled = x * factor
    ref = cast(scaled.astype(np.float64), "float4_e2m1fn", "stochastic", saturate=True,
               rng=np.random.default_rng(9))
    assert q.elements.dtype == ml_dtypes.float4_e2m1fn
    assert np.array_equal(_bits(q.elements), _bits(ref))
