"""``fp8-rollout-drift``: the fp8 rollout engine's weights against an independent blockwise
reference (exact rationals), its fp8 KV cache against the same rounding, the log-ratio statistics
and the entropy against float64 numpy, the verdict on fixed numbers, and the quick run pinned."""

import math
from fractions import Fraction as Q

import numpy as np
import pytest
from support.block_reference import ELEM, blocks_2d, fp8_block, rne
from support.reference_runs import quick_run

from fpsim.experiments.findings import fp8rollout as fr
from fpsim.experiments.findings import get_finding
from fpsim.experiments.findings.ptq import linear_weights
from fpsim.numerics.random import normal


def test_fp8_weights_are_blockwise_e4m3_with_power_of_two_tile_scales():
    # 130 x 70: two 128x128 tiles, the second two rows high - its own amax, its own scale
    w = normal(np.random.default_rng(3), (130, 70))
    w[128:] *= np.float32(1e-3)
    got = fr.fp8_weights(w)
    want = np.empty_like(w)
    for (i, _), vals in blocks_2d(w, 128, 128):
        rows = min(128, w.shape[0] - 128 * i)
        want[128 * i : 128 * i + rows, :] = np.array(fp8_block(vals, pow2=True).dequant, np.float32).reshape(rows, -1)
    assert got.dtype == np.float32 and np.array_equal(got, want)
    assert not np.array_equal(got, w)  # e4m3 keeps 3 mantissa bits


def _e4m3_ref(x: float, scale: Q) -> float:
    m, emin, vmax, _ = ELEM["float8_e4m3fn"]
    return math.copysign(float(rne(abs(Q(x) * scale), m, emin, vmax) / scale), x)


def test_the_fp8_kv_cache_rounds_each_write_with_its_own_power_of_two_scale():
    kv = normal(np.random.default_rng(5), (2, 4, 3, 16)) * np.float32(0.02)
    amax = Q(float(np.abs(kv).max()))
    scale = Q(2) ** math.floor(math.log2(448 / amax))  # 2^floor(log2(448 / amax)), from the definition
    assert scale * amax <= 448 < 2 * scale * amax
    want = np.array([_e4m3_ref(v, scale) for v in kv.ravel().tolist()], np.float32).reshape(kv.shape)
    assert np.array_equal(fr.fp8_kv(kv), want)


def test_the_rollout_engines_hold_the_trainers_weights_as_they_say():
    task = fr.FP8RolloutTask(steps=4, n_prompts=4)
    trainer = task.model(0).to("bfloat16")
    bf16, fp8 = (fr.rollout_engine(task, trainer, 0, e) for e in ("bf16", "fp8"))
    for (name, p), q in zip(trainer.named_parameters(), bf16.parameters()):
        assert q.fmt.name == "bfloat16" and np.array_equal(p.numpy(), q.numpy()), name
    for p, q in zip(linear_weights(trainer), linear_weights(fp8)):
        assert np.array_equal(q.numpy().astype(np.float32), fr.fp8_weights(p.numpy().astype(np.float32)))
    # the fp8 KV cache: what is cached is each write through fp8_kv
    kv = fr.rollout_engine(task, trainer, 0, "fp8_kv")
    caches = [[] for _ in kv.blocks]
    kv.decode(np.zeros((2, 5), np.int64), caches, fused=True)
    k = caches[0][0].numpy().astype(np.float32)
    assert np.array_equal(fr.fp8_kv(k), k)  # already on the e4m3 grid of its scale
    with pytest.raises(ValueError, match="unknown engine 'fp4'"):
        fr.rollout_engine(task, trainer, 0, "fp4")


def test_log_ratio_statistics_against_float64_numpy():
    rng = np.random.default_rng(11)
    lp_t = -np.abs(normal(rng, (40, 25)))
    lp_r = (lp_t + normal(rng, (40, 25)) * np.float32(0.4)).astype(np.float32)
    got = fr.log_ratio_stats(lp_r, lp_t)
    d = lp_r.astype(np.float64).ravel() - lp_t.astype(np.float64).ravel()
    r = np.exp(d)
    assert got["mean"] == pytest.approx(math.fsum(d) / d.size, rel=1e-15, abs=1e-18)
    assert got["se"] == pytest.approx(np.std(d, ddof=1) / math.sqrt(d.size), rel=1e-12)
    assert got["p99"] == np.sort(np.abs(d))[989]  # nearest rank: the 990th of 1000
    assert got["out_tis"] == np.mean((r < 0.5) | (r > 2.0)) > 0
    assert got["out_narrow"] == np.mean((r < 0.8) | (r > 1.25)) > got["out_tis"]


def test_trainer_entropy_against_float64_numpy():
    task = fr.FP8RolloutTask(steps=4, n_prompts=4)
    model = task.model(1)
    ids = task.sequences(6, np.random.default_rng(2))
    logits = model(ids[:, :-1]).numpy().astype(np.float64)[:, -task.n_digits:]
    lp = logits - logits.max(-1, keepdims=True)
    lp -= np.log(np.exp(lp).sum(-1, keepdims=True))
    want = float(np.mean(-(np.exp(lp) * lp).sum(-1)))
    assert fr.trainer_entropy(model, ids, task.n_digits) == pytest.approx(want, rel=1e-5)
    assert 0 < want <= math.log(task.vocab_size)


def numbers_with(entropy_last=0.4, ratio=5.0, growth=4.0, mean_last=3e-3, se_last=5e-4, out_tis=0.0):
    first = 0.04
    return {"steps": 150.0, "seeds": 3.0, "entropy_first": 2.26, "entropy_last": entropy_last,
            "fp8_over_bf16_p99": ratio, "p99_growth": growth, "fp8_kv_p99_first": first,
            "fp8_kv_p99_last": first * growth, "fp8_kv_mean_first": 3e-4, "fp8_kv_mean_last": mean_last,
            "fp8_kv_se_last": se_last, "fp8_kv_out_tis_last": out_tis, "fp8_kv_out_narrow_last": 0.01,
            "fp8_p99_last": 0.17, "bf16_p99_last": first * growth / ratio}


@pytest.mark.parametrize("numbers, expected", [
    (numbers_with(), "reproduced"),
    (numbers_with(out_tis=0.01), "reproduced"),
    (numbers_with(mean_last=8e-4), "partly"),  # grows, but the mean is within two standard errors
    (numbers_with(growth=1.2), "not at this scale"),  # stationary
    (numbers_with(ratio=1.5), "not at this scale"),  # fp8 adds nothing to the engine's own mismatch
    (numbers_with(entropy_last=2.0), "not at this scale"),  # the entropy hardly fell
])
def test_verdict_on_fixed_numbers(numbers, expected):
    verdict, reason = fr.verdict(numbers)
    assert verdict == expected, reason
    assert reason and "\n" not in reason
    assert fr.measured(numbers, {})  # the one line reads every number it names


def test_the_quick_run_pinned():
    """The same bits on every machine: the pipeline's seeded training, fpsim's sampling (correctly
    rounded exp, a float64 cumsum), the exact matmul sums, the e4m3 casts, exact means."""
    assert get_finding(fr.NAME) is fr.FINDING
    r = quick_run(fr.NAME)  # made once in the session, shared with test_findings
    n = r.numbers
    assert r.series["steps"] == [0, 8, 16, 24, 32, 40] and n["steps"] == 40.0
    assert n["entropy_last"] < 0.5 * n["entropy_first"]
    assert n["fp8_kv_p99_last"] > n["fp8_p99_last"] > n["bf16_p99_last"]
    pinned = {k: n[k] for k in PINNED}
    assert pinned == PINNED, pinned
    assert r.verdict == "partly", r.reason


PINNED = {"entropy_last": 1.024985998629747, "fp8_kv_mean_last": 0.0013056376665190328,
          "fp8_kv_p99_last": 0.07048153877258301, "fp8_p99_last": 0.06449127197265625,
          "bf16_p99_last": 0.014785587787628174, "fp8_kv_se_last": 0.0006792678496228627}
