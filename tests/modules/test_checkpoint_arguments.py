"""``fpsim.checkpoint.save`` / ``load`` given the wrong kind of object: a recipe (``FixedScaling(...)``)
where the ScalingGroup ``lowp.convert`` returned belongs, a string for the model, a model for the
optimizer - each refused in one line naming the argument, before anything is written or changed; and
the group itself still round-trips (the reference: its own state_dict, compared entry by entry)."""

import numpy as np
import pytest

import fpsim
from fpsim import checkpoint, nn
from fpsim.amp import GradScaler
from fpsim.lowp import BlockScaling, DelayedScaling, FixedScaling, convert
from fpsim.optim import SGD


def _model():
    return nn.Sequential(nn.Linear(4, 3, seed=0), nn.ReLU(), nn.Linear(3, 2, seed=1))


@pytest.mark.parametrize("recipe", [FixedScaling(), DelayedScaling(), BlockScaling("mxfp8")])
def test_a_recipe_as_fp8_is_refused_naming_what_goes_there(tmp_path, recipe):
    path = tmp_path / "ck.npz"
    with pytest.raises(TypeError, match=r"^checkpoint.save: fp8 must be the ScalingGroup fpsim.lowp.convert\(model, "
                                        rf"recipe\) returned .*got {type(recipe).__name__}"):
        checkpoint.save(path, _model(), fp8=recipe)
    assert not path.exists() and not list(tmp_path.iterdir())
    checkpoint.save(path, _model())
    with pytest.raises(TypeError, match=r"^checkpoint.load: fp8 must be the ScalingGroup"):
        checkpoint.load(path, _model(), fp8=recipe)


@pytest.mark.parametrize("what, kwargs, message", [
    ("model", {"model": "model"}, r"^checkpoint.save: model must be an fpsim Module .*got str$"),
    ("optimizer", {"optimizer": "adam"}, r"^checkpoint.save: optimizer must be an fpsim optimizer .*got str$"),
    ("scaler", {"scaler": 2.0**16}, r"^checkpoint.save: scaler must be a GradScaler .*got float$"),
])
def test_the_wrong_kind_of_object_is_refused_in_one_line(tmp_path, what, kwargs, message):
    args = {"model": _model(), **kwargs}
    with pytest.raises(TypeError, match=message):
        checkpoint.save(tmp_path / "ck.npz", **args)
    assert not list(tmp_path.iterdir())


def test_the_group_convert_returned_round_trips(tmp_path):
    model = _model()
    group = convert(model, FixedScaling(scale=4.0))
    opt, scaler = SGD(model.parameters(), lr=0.1), GradScaler()
    x = fpsim.tensor(np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4))
    scaler.scale(model(x).sum()).backward()
    scaler.step(opt)
    scaler.update()
    group.update()
    path = checkpoint.save(tmp_path / "ck.npz", model, opt, scaler, fp8=group)
    model2 = _model()
    group2 = convert(model2, FixedScaling(scale=4.0))
    checkpoint.load(path, model2, fp8=group2)
    want, got = group.state_dict(), group2.state_dict()
    assert want.keys() == got.keys()
    for k in want:
        assert np.array_equal(np.asarray(want[k]), np.asarray(got[k])), k
