"""``fp8-attention-p-cast``: the online-softmax attention against float64 numpy attention, its
e4m3 cast of P against ml_dtypes (which P values a forward pass flushes, computed independently
from the running maximum), the two fixes, the verdict rule on fixed numbers, the quick run pinned."""

import math

import ml_dtypes
import numpy as np
import pytest
from support.reference_runs import quick_run

from fpsim.experiments.findings import fp8attention as fa
from fpsim.experiments.findings import get_finding
from fpsim.experiments.onlinesoftmax import online_attention, reference_attention


def _attention64(q, k, v):
    s = q.astype(np.float64) @ k.astype(np.float64).T / math.sqrt(q.shape[1])
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ v.astype(np.float64)


@pytest.mark.parametrize("order", ["forward", "reverse"])
@pytest.mark.parametrize("block", [64, 100, 512])
def test_online_softmax_without_a_cast_is_attention(order, block):
    q, k, v = fa.sink_inputs(6, 0)
    ref = _attention64(q, k, v)
    out = online_attention(q, k, v, block=block, order=order, p_format=None)
    np.testing.assert_allclose(out["out"], ref, rtol=0, atol=2e-6)
    assert not out["flushed"].any()
    np.testing.assert_allclose(reference_attention(q, k, v), ref, rtol=0, atol=2e-6)


def test_forward_order_flushes_what_the_running_max_pushes_below_e4m3():
    """With the sink in the first block, every later block's P is exp(s - m) with m the first
    block's row max: flushed exactly where ml_dtypes rounds that (in float64, then float32) to 0."""
    q, k, v = fa.sink_inputs(6, 1)
    s = (q.astype(np.float64) @ k.astype(np.float64).T) / 8
    m = s[:, :64].max(axis=1, keepdims=True)  # the first block holds the sinks: the max from there on
    p = np.exp(s[:, 64:] - m).astype(np.float32)
    expected = p.astype(ml_dtypes.float8_e4m3fn).astype(np.float32) == 0
    got = online_attention(q, k, v, order="forward")["flushed"][:, 64:]
    mismatch = (got != expected).mean()
    assert mismatch < 1e-3, mismatch  # a P within a float32 ulp of 2^-10 may fall either side
    assert 0.3 < got.mean() < 0.8


def test_the_fixes_flush_less_and_err_less():
    q, k, v = fa.sink_inputs(6, 2)
    ref = reference_attention(q, k, v)
    r = {(o, s): online_attention(q, k, v, order=o, p_scale=s) for o in ("forward", "reverse") for s in (1.0, 256.0)}
    mse = {key: float(np.mean((x["out"].astype(np.float64) - ref) ** 2)) for key, x in r.items()}
    assert r["forward", 256.0]["flushed"][:, fa.N_SINK:].mean() == 0
    assert mse["forward", 1.0] > 3 * max(mse["forward", 256.0], mse["reverse", 1.0])
    assert mse["reverse", 256.0] <= mse["forward", 256.0] * 1.5  # both fixes reach the same floor


def test_bad_arguments_are_named():
    q, k, v = fa.sink_inputs(2, 0, tq=4, tk=8, d=8)
    for kw, msg in (({"order": "sideways"}, "order must be one of forward, reverse"),
                    ({"block": 0}, "block must be an integer >= 1, got 0"),
                    ({"p_scale": 0.0}, "p_scale must be a finite number > 0")):
        with pytest.raises(ValueError, match=msg):
            online_attention(q, k, v, **kw)
    with pytest.raises(ValueError, match="do not fit"):
        online_attention(q, k[:, :4], v)


def test_the_sources_formula():
    assert fa.predicted_flush(6, 1.0) == 0.539  # Phi(6 + 1.029 - 6.931) = Phi(0.098)
    assert fa.predicted_flush(6, 256.0) == 0.0


def numbers_with(flushed=0.5, scale_gain=4.0, reverse_gain=4.0):
    n = {}
    for d in fa.DELTAS:
        n[f"d{d}_fwd_s1_flushed"] = flushed if d in (4, 6) else (0.0 if d < 4 else 1.0)
        n[f"d{d}_predicted_flushed"] = 0.5
        n[f"d{d}_scale_gain"], n[f"d{d}_reverse_gain"] = scale_gain, reverse_gain
    return n


@pytest.mark.parametrize("numbers, expected", [
    (numbers_with(), "reproduced"),
    (numbers_with(reverse_gain=1.5), "partly"),
    (numbers_with(scale_gain=0.9), "not at this scale"),
    (numbers_with(flushed=0.99), "not at this scale"),
])
def test_verdict_on_fixed_numbers(numbers, expected):
    verdict, reason = fa.verdict(numbers)
    assert verdict == expected, reason
    assert reason and "\n" not in reason


def test_the_quick_run_pinned():
    """The same bits on every machine: fpsim's normal draws, exact sums and products, correctly
    rounded exp, the e4m3 cast, exact means."""
    assert get_finding(fa.NAME) is fa.FINDING
    r = quick_run(fa.NAME)  # made once in the session, shared with test_findings
    n = r.numbers
    assert r.verdict == "reproduced"
    assert fa.moderate(n) == [4, 6]
    assert n["d6_fwd_s1_flushed"] == pytest.approx(0.559, abs=5e-4)
    assert n["d6_predicted_flushed"] == 0.539
    assert n["d6_scale_gain"] == pytest.approx(76.9, abs=0.05) and n["d6_reverse_gain"] == pytest.approx(7.7, abs=0.05)
    assert n["d4_scale_gain"] == pytest.approx(3.9, abs=0.05) and n["d4_reverse_gain"] == pytest.approx(3.7, abs=0.05)
    pinned = {k: n[k] for k in ("d6_fwd_s1_mse", "d6_fwd_s1_flushed", "d8_rev_s256_flushed")}
    assert pinned == PINNED, pinned
    assert fa.measured(n, r.series).startswith("Delta 4: forward S=1 flushes 8.2% of non-sink P")


PINNED = {"d6_fwd_s1_mse": 2.0981211790885225e-05, "d6_fwd_s1_flushed": 0.5586552657480315,
          "d8_rev_s256_flushed": 0.0007381889763779527}
