"""The engine's rounding mode (fpsim.rounding_mode): every result, gradient and update an op rounds
follows it; the values are gfloat's rounding of the exact float32 result; default nearest and
unchanged outside; nested blocks and exceptions restore it."""

import numpy as np
import pytest
from support.gfloat_reference import GMODE, info, round_ref

import fpsim
from fpsim import state


def _f16(x):
    return np.asarray(x, dtype=np.float16)


@pytest.mark.parametrize("mode", ["toward_zero", "toward_positive", "toward_negative", "nearest_away"])
@pytest.mark.parametrize("backend", ["numpy", "numpy-f32"])
def test_forward_and_backward_round_in_the_mode(mode, backend):
    rng = np.random.default_rng(0)
    a0, b0 = _f16(rng.standard_normal((8, 16))), _f16(rng.standard_normal((16, 4)))
    a = fpsim.tensor(a0, "fp16", requires_grad=True, backend=backend)
    b = fpsim.tensor(b0, "fp16", requires_grad=True, backend=backend)
    with fpsim.rounding_mode(mode):
        y = a @ b
        y.sum().backward()
    exact = a0.astype(np.float32) @ b0.astype(np.float32)  # float32 products and sums, as the engine
    want = round_ref(info("float16"), exact.astype(np.float64), GMODE[mode], False)
    assert np.array_equal(np.asarray(y.numpy(), np.float64), want)
    ga = np.ones((8, 4), np.float32) @ b0.astype(np.float32).T  # d(sum)/da = 1 @ b^T, rounded once
    assert np.array_equal(np.asarray(a.grad.numpy(), np.float64),
                          round_ref(info("float16"), ga.astype(np.float64), GMODE[mode], False))
    plain = fpsim.tensor(a0, "fp16", backend=backend) @ fpsim.tensor(b0, "fp16", backend=backend)
    assert np.array_equal(plain.numpy(), exact.astype(np.float16))  # outside: nearest again


def test_few_bit_stochastic_engine_is_seeded_and_between_the_neighbours():
    x0 = _f16(np.linspace(1, 2, 257))
    def run(seed):
        x = fpsim.tensor(x0, "fp16")
        with fpsim.rounding_mode("stochastic", sr_bits=3, sr_variant="fastest", seed=seed):
            return (x * fpsim.tensor(_f16(np.full(257, 1.0009765625)), "fp16")).numpy()
    a, b = run(1), run(1)
    assert np.array_equal(a.view(np.uint16), b.view(np.uint16)) and not np.array_equal(a, run(2))
    exact = x0.astype(np.float64) * 1.0009765625
    lo = round_ref(info("float16"), exact, GMODE["toward_zero"], False)
    hi = round_ref(info("float16"), exact, GMODE["toward_positive"], False)
    assert np.all((a == lo) | (a == hi)) and (a == hi).any() and (a == lo).any()


def test_default_is_nearest_nesting_and_exceptions_restore_it():
    assert state.engine_rounding() is None
    with fpsim.rounding_mode("toward_zero"):
        with fpsim.rounding_mode("to_odd"):
            assert state.engine_rounding().mode == "to_odd"
        assert state.engine_rounding().mode == "toward_zero"
        with pytest.raises(RuntimeError), fpsim.rounding_mode("nearest_away"):
            raise RuntimeError
        assert state.engine_rounding().mode == "toward_zero"
    assert state.engine_rounding() is None


def test_monitor_still_sees_every_rounding():
    x = fpsim.tensor(_f16([1.0, 2.0, 3.0]), "fp16")
    with fpsim.monitor() as m, fpsim.rounding_mode("toward_zero"):
        (x * x).sum()
    assert m.counts  # events arrived with the mode on


@pytest.mark.parametrize("kw, err, msg", [
    ({"mode": "down"}, ValueError, "unknown rounding mode 'down'"),
    ({"mode": "nearest", "sr_bits": 3}, ValueError, "sr_bits applies to rounding='stochastic' only"),
    ({"mode": "stochastic", "sr_bits": 99}, ValueError, r"sr_bits must be an integer in \[1, 32\] or None, got"),
    ({"mode": "stochastic", "seed": -1}, ValueError, "seed must be an integer >= 0"),
    ({"mode": "stochastic", "rng": 3}, TypeError, "rng must be a numpy Generator"),
])
def test_bad_arguments_are_refused_before_anything_runs(kw, err, msg):
    with pytest.raises(err, match=msg):
        fpsim.rounding_mode(**kw)
    assert state.engine_rounding() is None


@pytest.mark.parametrize("backend", ["numpy", "numpy-f32", "cupy-stand-in"])
@pytest.mark.parametrize("fmt", ["float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_the_backends_round_honours_the_mode(backend, fmt):
    """Every rounding site, round_result or a direct backend.round (the low-precision accumulators),
    and the saturating fp8 conversions - the CuPy backend's code paths run on numpy here."""
    be = fpsim.backends.CupyBackend(xp=np) if backend == "cupy-stand-in" else fpsim.backends.get_backend(backend)
    x = np.random.default_rng(3).standard_normal(1000).astype(np.float32) * 30
    with fpsim.rounding_mode("toward_negative"):
        got = be.to_f32(be.round(x, fpsim.get_format(fmt)))
        sat = be.to_f32(be.round_saturating(x * 100, fpsim.get_format(fmt)))
    assert np.array_equal(got.astype(np.float64), round_ref(info(fmt), x.astype(np.float64),
                                                            GMODE["toward_negative"], False))
    assert np.array_equal(sat.astype(np.float64), round_ref(info(fmt), (x * 100).astype(np.float64),
                                                            GMODE["toward_negative"], True))
