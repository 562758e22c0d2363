"""``nn.unit.unit_scale_`` twice and on bad input: a second call leaves a unit-scaled model as it is
(no UnitLinear nested in a UnitLinear, every layer still divided by sqrt(fan_in) once, the same
outputs and parameters, ``repr`` works); a model that is no Module, a bare Linear (which cannot be
swapped in place) and a bad seed are refused in one line naming the argument."""

import numpy as np
import pytest

import fpsim
from fpsim import nn
from fpsim.nn.unit import UnitLinear, unit_scale_


def _mlp():
    return nn.Sequential(nn.Linear(4, 3, seed=0), nn.GELU(), nn.Linear(3, 2, seed=1))


def test_unit_scale_twice_is_the_same_as_once():
    once = unit_scale_(_mlp(), seed=5)
    twice = unit_scale_(unit_scale_(_mlp(), seed=5), seed=5)
    kinds = [type(m).__name__ for _, m in twice.named_modules()]
    assert kinds == [type(m).__name__ for _, m in once.named_modules()]
    assert kinds == ["Sequential", "UnitLinear", "Linear", "UnitActivation", "UnitLinear", "Linear"]
    assert repr(twice) == repr(once) == ("Sequential(0=UnitLinear(4, 3, fmt=float32), 1=UnitActivation('gelu'), "
                                         "2=UnitLinear(3, 2, fmt=float32))")
    x = fpsim.tensor(np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4))
    assert np.array_equal(twice(x).numpy(), once(x).numpy())
    # y = (x @ W.T) / sqrt(4) for the first layer, written here from its N(0, 1) weights: divided once
    w = twice[0].linear.weight.numpy().astype(np.float64)
    np.testing.assert_allclose(twice[0](x).numpy(), (x.numpy() @ w.T) / 2, rtol=1e-6)
    params = [p for p in twice.parameters()]
    assert len(params) == len(list(once.parameters())) == 4


def test_unit_scale_of_a_model_that_is_no_module():
    for bad in ("x", 3, None, [nn.Linear(2, 2)]):
        with pytest.raises(TypeError, match=r"^unit_scale_: model must be an fpsim Module .*got "):
            unit_scale_(bad)


def test_unit_scale_of_a_bare_linear_says_how():
    with pytest.raises(ValueError, match=r"^unit_scale_: .*Linear.*in place.*UnitLinear"):
        unit_scale_(nn.Linear(4, 3))
    assert isinstance(unit_scale_(UnitLinear(4, 3)), UnitLinear)  # already unit-scaled: given back


@pytest.mark.parametrize("seed", ["a", -1, 1.5, True])
def test_unit_scale_bad_seed(seed):
    with pytest.raises(ValueError, match=r"^seed must be an integer >= 0"):
        unit_scale_(_mlp(), seed=seed)
