"""fpsim.labs.sumorder (lab 18): each order of a float32 sum against a plain Python loop in that
order, numpy's pairwise model against np.sum itself, and the swamping probe against trees
written out by hand."""

import math

import numpy as np
import pytest

from fpsim.labs.sumorder import (
    blocked_sum,
    order_tree,
    pairwise_sum,
    probe_order,
    sequential_sum,
)
from fpsim.numerics import sum_f32


def _loop(values) -> np.float32:
    s = np.float32(-0.0)
    for v in values:
        s = np.float32(s + np.float32(v))
    return s


def _data(n, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)).astype(np.float32)


def test_sequential_sum_is_the_loop():
    for n in (1, 2, 7, 100, 3000):
        x = _data(n)
        assert sequential_sum(x) == _loop(x)
    assert sequential_sum(np.float32([1.0] + [2.0**-24] * 100)) == 1.0  # every tiny one swamped
    assert math.copysign(1, sequential_sum(np.float32([-0.0, -0.0]))) == -1


@pytest.mark.parametrize("n", [1, 7, 8, 9, 64, 127, 128, 129, 300, 1000, 8191, 8193, 20_000])
def test_pairwise_sum_is_np_sum(n):
    x = _data(n, seed=n)
    assert pairwise_sum(x).tobytes() == np.sum(x).tobytes()


def test_blocked_sum():
    x = _data(1000)
    want = _loop([_loop(x[i:i + 64]) for i in range(0, 1000, 64)])
    assert blocked_sum(x, 64) == want and blocked_sum(x, 1) == _loop(x)


def test_probe_reads_the_trees():
    assert order_tree(probe_order(sequential_sum, 4)) == "(((0 1) 2) 3)"
    assert order_tree(probe_order(lambda v: sequential_sum(v[::-1].copy()), 3)) == "(0 (1 2))"
    pair = lambda v: np.float32(np.float32(v[0] + v[1]) + np.float32(v[2] + v[3]))
    assert order_tree(probe_order(pair, 4)) == "((0 1) (2 3))"
    assert order_tree(probe_order(np.sum, 16)) == \
        "((((0 8) (1 9)) ((2 10) (3 11))) (((4 12) (5 13)) ((6 14) (7 15))))"
    sizes = probe_order(sum_f32, 5)
    assert np.array_equal(sizes, np.where(np.eye(5, dtype=bool), 1, 2)) and order_tree(sizes) == "(0 1 2 3 4)"


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="x must be a 1-d float32 array"):
        sequential_sum(np.ones(3))
    with pytest.raises(ValueError, match="block must be"):
        blocked_sum(np.ones(3, np.float32), 0)
    with pytest.raises(ValueError, match=r"n must be an integer in \[2, 63\], got"):
        probe_order(np.sum, 64)
