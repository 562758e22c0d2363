"""fpsim.checks.check_integer: the one integer-argument check behind every count, size, seed and
bound the package takes (steps, block, sr_bits, every, ns_steps, ...)."""

import numpy as np
import pytest

import fpsim
import fpsim.experiments
from fpsim.checks import check_integer


@pytest.mark.parametrize("value", [0, 7, np.int64(7), np.uint8(3), 2**70])
def test_python_and_numpy_integers_pass_as_int(value):
    got = check_integer(value, "n", 0)
    assert got == int(value) and type(got) is int


@pytest.mark.parametrize("value", [True, False, 2.0, 2.5, np.float32(2.0), np.bool_(True), "2", None, [2],
                                   np.array(2), 1 + 0j])
def test_what_is_not_an_integer_is_refused_naming_the_argument(value):
    with pytest.raises(ValueError, match=rf"^steps must be an integer >= 1, got {__import__('re').escape(repr(value))}$"):
        check_integer(value, "steps", 1)


@pytest.mark.parametrize("minimum, maximum, value, says", [
    (1, None, 0, "steps must be an integer >= 1, got 0"),
    (None, 8, 9, "steps must be an integer <= 8, got 9"),
    (1, 32, 33, r"steps must be an integer in \[1, 32\], got 33"),
    (1, 32, 0, r"steps must be an integer in \[1, 32\], got 0"),
    (None, None, 2.5, "steps must be an integer, got 2.5"),
])
def test_the_bounds_are_inclusive_and_said(minimum, maximum, value, says):
    with pytest.raises(ValueError, match="^" + says + "$"):
        check_integer(value, "steps", minimum, maximum)
    if minimum is not None:
        assert check_integer(minimum, "steps", minimum, maximum) == minimum
    if maximum is not None:
        assert check_integer(maximum, "steps", minimum, maximum) == maximum


def test_none_only_where_allowed():
    assert check_integer(None, "seed", 0, none=True) is None
    with pytest.raises(ValueError, match=r"^seed must be an integer >= 0 or None, got -1$"):
        check_integer(-1, "seed", 0, none=True)
    with pytest.raises(ValueError, match=r"^seed must be an integer >= 0, got None$"):
        check_integer(None, "seed", 0)


@pytest.mark.parametrize("call, says", [
    (lambda: fpsim.experiments.train("reference", steps=2.0), "steps must be an integer >= 1, got 2.0"),
    (lambda: fpsim.optim.Muon([fpsim.tensor(np.ones((2, 2)), requires_grad=True)], ns_steps=100),
     r"Muon: ns_steps must be an integer in \[0, 99\], got 100"),
    (lambda: fpsim.lowp.DelayedScaling(margin=1.0), "margin must be an integer >= 0, got 1.0"),
    (lambda: fpsim.cast([1.0], "fp16", "stochastic", sr_bits=33), r"sr_bits must be an integer in \[1, 32\] or None"),
])
def test_the_package_uses_it(call, says):
    """Four of the call sites, each once a hand-written check of its own (Muon's said "[0, 100)")."""
    with pytest.raises(ValueError, match="^" + says):
        call()
