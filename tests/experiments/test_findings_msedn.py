"""``nvfp4-ms-eden``: the scale-randomized NVFP4 quantizer against an exact rational reference
(tests/support/block_reference.py's TE-order NVFP4 blocks, EDEN's correction in fractions), its
unbiasedness checked statistically with fixed seeds, the rotation, the verdict rule on fixed
numbers, and the quick run's numbers pinned to their bits."""

import math
from fractions import Fraction as Q

import numpy as np
import pytest
from support.block_reference import floor_log2, nvfp4_block, nvfp4_tensor_scale
from support.reference_runs import quick_run

from fpsim.experiments.findings import FINDINGS, msedn
from fpsim.formats import quantize
from fpsim.numerics.random import normal


def _blocks(n_blocks, seed=0, scale=1.0):
    return normal(np.random.default_rng(seed), (n_blocks, 16), scale)


def _e4m3_neighbours(t: Q) -> tuple[Q, Q]:
    """The e4m3 values either side of t > 0 (3 mantissa bits, normals from 2**-6): (t, t) on the grid."""
    ulp = Q(2) ** (max(floor_log2(t), -6) - 3)
    lo = (t / ulp).numerator // (t / ulp).denominator * ulp
    return (lo, lo) if lo == t else (lo, lo + ulp)


def _reference_targets(y: np.ndarray):
    """Per block, exactly: the RTN e4m3 scale s, EDEN's s * <y, y> / <y, g s e> and the elements e (TE's
    order, in rationals), with g = float32(1 / S_enc)."""
    s_enc = nvfp4_tensor_scale(max(abs(Q(float(v))) for v in y.ravel()))
    g = Q(float(np.float32(1) / np.float32(float(s_enc))))
    out = []
    for row in y:
        b = nvfp4_block([float(v) for v in row], s_enc)
        e = [Q(v) for v in b.elements]
        yy = sum(Q(float(v)) ** 2 for v in row)
        ye = sum(Q(float(v)) * p for v, p in zip(row, e))
        out.append((b.scale, b.scale * yy / (g * b.scale * ye) if ye else b.scale, e))
    return g, out


def test_the_corrected_scales_and_elements_match_an_exact_reference():
    y = np.concatenate([_blocks(24), _blocks(8, seed=1, scale=1e-3), np.zeros((1, 16), np.float32)])
    e, s, g, target = msedn.eden_scales(y)
    g_ref, ref = _reference_targets(y)
    assert Q(g) == g_ref
    for i, (s_ref, t_ref, e_ref) in enumerate(ref):
        assert Q(float(s[i])) == s_ref and [Q(float(v)) for v in e[i]] == e_ref
        assert abs(Q(float(target[i])) - t_ref) <= t_ref * Q(1, 2**50)  # float64 sums of 16 products
    assert target[-1] == 0 and s[-1] == 0  # an all-zero block keeps scale 0 (S = 1)


def test_each_drawn_scale_is_one_of_the_two_e4m3_neighbours_of_the_corrected_scale():
    y = _blocks(32, seed=2)
    e, _, g, target = msedn.eden_scales(y)
    rng = np.random.default_rng(3)
    seen_lo = seen_hi = 0
    for _ in range(20):
        q, sat = msedn.eden(y, rng)
        assert sat == 0 or sat == int((target > 448).sum())
        for i in range(y.shape[0]):
            k = int(np.flatnonzero(e[i])[0])
            drawn = Q(float(q[i, k])) / (Q(g) * Q(float(e[i, k])))
            lo, hi = _e4m3_neighbours(min(Q(float(target[i])), Q(448)))
            assert drawn in (lo, hi)
            seen_lo += drawn == lo != hi
            seen_hi += drawn == hi != lo
    assert seen_lo and seen_hi


def test_the_scale_rounding_is_unbiased_given_the_block():
    """Over 3000 draws (seed 4) the mean of every value is within 5 standard errors of g e s S, the
    standard error from the two-point spread of the scale's stochastic rounding; a corrected scale
    past 448 (here the block holding the tensor's amax, S = 1.063) saturates to 448 every time."""
    y = _blocks(16, seed=5)
    e, _, g, target = msedn.eden_scales(y)
    assert (target > 448).sum() == 1
    target = np.minimum(target, 448)
    rng = np.random.default_rng(4)
    draws = 3000
    total = np.zeros(y.shape)
    for _ in range(draws):
        total += msedn.eden(y, rng)[0]
    expect = e * target[:, None] * g
    nb = [_e4m3_neighbours(Q(float(t))) for t in target]
    sd = np.array([math.sqrt(float((hi - Q(float(t))) * (Q(float(t)) - lo))) for (lo, hi), t in zip(nb, target)])
    tol = 5 * np.abs(e) * g * sd[:, None] / math.sqrt(draws) + 1e-12
    assert (np.abs(total / draws - expect) <= tol).all()


def test_edens_correction_keeps_the_projection_on_the_block():
    """<y, S q> = <y, y> for every block: the EDEN property, exactly up to float64 rounding."""
    y = _blocks(64, seed=6)
    e, _, g, target = msedn.eden_scales(y)
    y64 = y.astype(np.float64)
    np.testing.assert_allclose(msedn.row_dot(y64, e * target[:, None] * g), msedn.row_dot(y64, y64), rtol=1e-13)


def test_bias_share_over_draws_separates_unbiased_from_deterministic_quantizers():
    """512 Gaussian blocks, 200 draws (seed 7): rounding to nearest is all bias (share 1); with the
    RHT, the scale-randomized quantizer and SR have a bias under 1% of their MSE (the verdict's
    threshold); without the RHT the EDEN correction alone stays biased (share > 50%)."""
    x = _blocks(512, seed=8)
    share = {(m, r): msedn.measure_arm(x, m, r, 200, 7)["bias_share"] for m in msedn.METHODS for r in (False, True)}
    assert share["rtn", False] == pytest.approx(1, abs=1e-9)
    assert abs(share["eden", True]) < msedn.UNBIASED_SHARE and abs(share["sr", True]) < msedn.UNBIASED_SHARE
    assert abs(share["sr", False]) < msedn.UNBIASED_SHARE
    assert share["eden", False] > 0.5


def test_the_rotation_is_orthogonal_and_the_decode_is_the_dequantized_value():
    m = msedn.rotation(np.random.default_rng(0)).astype(np.float64)
    assert (np.abs(m) == 0.25).all() and (m.T @ m == np.eye(16)).all()
    x = _blocks(16, seed=9)
    q = quantize(x, "nvfp4")
    np.testing.assert_allclose(msedn.decode(q), q.dequantize(), rtol=2**-23, atol=0)


def test_an_unknown_quantizer_is_named():
    with pytest.raises(ValueError, match="method: unknown quantizer 'nope'"):
        msedn.quantize_blocks(_blocks(1), "nope", np.random.default_rng(0))


def _numbers(gain=2.01, share=0.002, others=2.0):
    n = {f"{k}_gain_rht": others for k in msedn.KINDS}
    return {**n, "gaussian_gain_rht": gain, "gaussian_eden_rht_bias_share": share, "gaussian_rtn_rht_bias_share": 0.004}


@pytest.mark.parametrize("numbers, expected", [
    (_numbers(), "reproduced"), (_numbers(gain=1.92), "reproduced"), (_numbers(gain=1.5), "partly"),
    (_numbers(share=0.05), "partly"), (_numbers(gain=0.9, others=0.9), "not at this scale")])
def test_the_verdict_rule(numbers, expected):
    verdict, reason = msedn.verdict(numbers)
    assert verdict == expected and reason and "\n" not in reason


# the quick run's numbers, the same bits on every machine (fpsim's sums, draws and rotations)
QUICK = {"gaussian_gain_rht": 2.0140400994425973, "gaussian_eden_rht_bias_share": 0.0016090749622932746,
         "student_t3_eden_rht_mse": 0.01048321488008197, "reference_grads_sr_mse": 0.019390325181749043,
         "reference_grads_gain_rht": 1.454890518436675, "gaussian_eden_rht_saturated": 16.0}


def test_the_quick_numbers_are_pinned_and_reproduce_the_claim():
    assert FINDINGS[msedn.NAME].measure is msedn.measure_eden  # the quick run's numbers are measure_eden's
    r = quick_run(msedn.NAME)  # made once in the session, shared with test_findings
    numbers, series = r.numbers, r.series
    assert {k: numbers[k] for k in QUICK} == QUICK
    assert series["draws"] == 16 and msedn.verdict(numbers)[0] == "reproduced"
    assert "scale-randomized" in msedn.measured(numbers, series)
