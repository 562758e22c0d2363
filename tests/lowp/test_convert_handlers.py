"""``lowp.convert(model, config, skip)`` finds its layer handler by the config's type
(``LAYER_HANDLERS``, torchao's ``quantize_`` handler table): the fp8 and block configs reach their
swaps, a subclass reaches its base's handler, a new config is one registration, and a config with no
handler is refused with the known ones named."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from fpsim import lowp, nn, tensor
from fpsim.lowp.handlers import LAYER_HANDLERS, handler_for


def test_each_config_type_reaches_its_swap():
    from fpsim.lowp.block import swap_block_linears
    from fpsim.lowp.linear import swap_fp8_linears

    assert handler_for(lowp.DelayedScaling()) is swap_fp8_linears
    assert handler_for(lowp.CurrentScaling()) is swap_fp8_linears
    assert handler_for(lowp.BlockScaling("nvfp4")) is swap_block_linears
    m = nn.MLP([4, 3, 3, 2], seed=0)
    assert isinstance(lowp.convert(m, lowp.CurrentScaling(), skip=("last",)), lowp.ScalingGroup)
    assert lowp.convert(m, lowp.BlockScaling("mxfp8")) == ["4"]
    assert [type(m._modules[k]) for k in ("0", "2", "4")] == [lowp.Fp8Linear, lowp.Fp8Linear, lowp.BlockLinear]
    assert isinstance(lowp.convert(nn.MLP([4, 2], seed=0)), lowp.ScalingGroup)  # None: DelayedScaling()


def test_a_subclass_of_a_config_gets_its_bases_handler():
    @dataclass(frozen=True)
    class MyBlockScaling(lowp.BlockScaling):
        pass

    m = nn.MLP([4, 3, 2], seed=0)
    assert lowp.convert(m, MyBlockScaling("mxfp4")) == ["0", "2"]


def test_a_new_layer_config_is_one_registration():
    class Halve:
        """A toy layer config: every Linear's weight halved (stands for a new kind of layer)."""

    @LAYER_HANDLERS.register(None, Halve)
    def halve_linears(model, config, skip=()):
        names = [n for n, mod in model.named_modules() if isinstance(mod, nn.Linear) and n not in skip]
        for n in names:
            w = dict(model.named_modules())[n].weight
            w.data = (w.data * np.float32(0.5)).astype(w.data.dtype)
        return names

    m = nn.MLP([2, 2], seed=0)
    before = m._modules["0"].weight.f32().copy()
    assert lowp.convert(m, Halve()) == ["0"]
    assert np.array_equal(m._modules["0"].weight.f32(), before / 2)  # exact: halving a float32
    assert "Halve" in LAYER_HANDLERS.names()


def test_a_config_without_a_handler_names_the_known_ones():
    m = nn.MLP([4, 3, 2], seed=0)
    for bad in ("fp8", 3, tensor([1.0])):
        with pytest.raises(TypeError, match=r"config must be a layer config with a registered handler "
                                            r"\(.*DelayedScaling, CurrentScaling.*\), got " + type(bad).__name__):
            lowp.convert(m, bad)
    assert type(m._modules["0"]) is nn.Linear  # nothing swapped
