"""``fpsim.labs.clipping`` (lab 07's helpers): clipping before unscaling sees the scaled norm and
stalls the training; unscaling first does not."""

import math

import pytest

from fpsim.labs.clipping import train_with_clipping


def test_clip_first_sees_the_scaled_norm_and_stalls():
    right = train_with_clipping("unscale-first", steps=3, scale=1024.0)
    wrong = train_with_clipping("clip-first", steps=3, scale=1024.0)
    none = train_with_clipping("no-clip", steps=3)
    # same data and weights: the first step's norms differ by exactly the (power-of-two) scale
    assert wrong.norms[0] == pytest.approx(1024.0 * right.norms[0], rel=1e-5)
    assert right.losses[0] == wrong.losses[0] == none.losses[0]
    assert all(math.isnan(n) for n in none.norms)
    # the wrong order moves the weights about S*|g|/max_norm times less: the loss hardly changes
    assert abs(wrong.losses[-1] - wrong.losses[0]) < 0.01 * abs(right.losses[-1] - right.losses[0])
    assert right.skipped == wrong.skipped == 0
    with pytest.raises(ValueError, match="order"):
        train_with_clipping("clip-last")
