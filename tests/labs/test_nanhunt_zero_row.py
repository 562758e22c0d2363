"""Lab 14's zero-row case (fpsim.labs.nanhunt.zero_row_hunt): without the amax floor the tracer
names the row-wise scale computation as the NaN's origin; with the default floor nothing is born."""

import math

from fpsim.labs.nanhunt import zero_row_hunt


def test_without_the_floor_the_scale_is_the_origin():
    loss, origin = zero_row_hunt(amax_floor=0.0)
    assert math.isnan(loss)
    assert origin is not None and origin.op == "fp8.rowwise.scale" and origin.where == "2.weight"
    assert origin.direction == "forward" and origin.step == 0 and origin.n_inf == 1
    assert "fp8.rowwise.scale" in str(origin)


def test_with_the_default_floor_the_loss_is_finite():
    loss, origin = zero_row_hunt(amax_floor=1e-12)
    assert math.isfinite(loss) and loss > 0 and origin is None
