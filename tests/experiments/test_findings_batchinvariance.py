"""``batch-invariance``: the split-K product against an independent reference (numpy float64 sums
that are exact for the inputs used, ml_dtypes' roundings), the mechanism - ``mm(a[:1], b)`` against
``mm(a, b)[:1]`` with a batch-dependent split, a fixed one and fpsim's exact matmul - greedy
decoding under each, the verdict rule on fixed numbers, and the quick run's numbers pinned."""

import math

import ml_dtypes
import numpy as np
import pytest
from support.reference_runs import quick_run

from fpsim import nn
from fpsim.experiments.findings import batchinvariance as bi
from fpsim.experiments.findings import get_finding
from fpsim.experiments.splitk import SplitKBackend, splitk_matmul, splits_for
from fpsim.numerics import matmul_f32


def _coarse(rng, shape):
    """float32 values k / 256 with |k| < 1024: products have at most 20 bits, so a float64 sum of
    up to 2^30 of them is exact and the reference needs no exact-sum machinery."""
    return (rng.integers(-1023, 1024, shape) / 256).astype(np.float32)


def _reference(a, b, splits, acc):
    """The split-K definition written out: chunk sums in float64 (exact here), one rounding to
    float32, ml_dtypes' rounding into ``acc``, float32 additions in chunk order."""
    dt = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}[acc]
    k = a.shape[-1]
    c = -(-k // splits)
    total = None
    for lo in range(0, k, c):
        part = (a[:, lo:lo + c].astype(np.float64) @ b[lo:lo + c].astype(np.float64)).astype(np.float32)
        part = part.astype(dt).astype(np.float32)
        total = part if total is None else (total + part).astype(dt).astype(np.float32)
    return total


@pytest.mark.parametrize("acc", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("splits", [1, 2, 3, 4, 7])
def test_splitk_matmul_against_the_definition_written_out(acc, splits):
    rng = np.random.default_rng(splits)
    a, b = _coarse(rng, (5, 52)), _coarse(rng, (52, 6))
    np.testing.assert_array_equal(splitk_matmul(a, b, splits, acc), _reference(a, b, splits, acc))


def test_one_chunk_is_fpsims_exact_matmul():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4, 64)).astype(np.float32), rng.standard_normal((64, 8)).astype(np.float32)
    np.testing.assert_array_equal(splitk_matmul(a, b, 1), matmul_f32(a, b))


def test_the_split_rules():
    assert [splits_for(r, 256, "batch") for r in (1, 2, 3, 8, 16, 64)] == [16, 8, 4, 2, 1, 1]
    assert splits_for(1, 64, "batch") == 4 and splits_for(1, 15, "batch") == 1  # at most K / 16
    assert {splits_for(r, 256, "fixed") for r in (1, 8, 64)} == {16} and splits_for(1, 40, "fixed") == 3
    with pytest.raises(ValueError, match="policy must be one of batch, fixed"):
        splits_for(1, 64, "auto")
    with pytest.raises(ValueError, match="policy must be one of"):
        SplitKBackend("float32", "auto")
    with pytest.raises(ValueError, match="splits 0"):
        splitk_matmul(np.ones((2, 4), np.float32), np.ones((4, 2), np.float32), 0)


def test_mm_of_one_row_against_the_first_row_of_the_batch():
    """The mechanism: with the split following the rows, the first row of a batch of 8 is not the
    product of that row alone; with a fixed split it is, and fpsim's exact matmul always is."""
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((8, 256)).astype(np.float32), rng.standard_normal((256, 64)).astype(np.float32)
    for acc in ("float32", "bfloat16"):
        batch, fixed = SplitKBackend(acc, "batch"), SplitKBackend(acc, "fixed")
        assert (batch.matmul(a[:1], b) != batch.matmul(a, b)[:1]).any(), acc
        np.testing.assert_array_equal(fixed.matmul(a[:1], b), fixed.matmul(a, b)[:1])
    np.testing.assert_array_equal(matmul_f32(a[:1], b), matmul_f32(a, b)[:1])


def test_a_model_on_the_split_backend_runs_every_gemm_split_k():
    """The tiny GPT's logits on the batch backend differ with the batch; on the fixed backend and
    on fpsim's own engine the batch changes no bit."""
    prompts = np.random.default_rng(0).integers(0, 128, (8, 8))
    for policy, same in (("batch", False), ("fixed", True)):
        model = bi.split_model("bfloat16", policy, 0)
        full = model(prompts).f32()
        alone = np.concatenate([model(prompts[i:i + 1]).f32() for i in range(8)])
        assert np.array_equal(full, alone) == same, policy
    model = nn.TinyGPT(**bi.MODEL, seed=0).to("bfloat16")
    np.testing.assert_array_equal(model(prompts).f32()[:1], model(prompts[:1]).f32())


def test_greedy_decoding_is_the_argmax_of_the_full_forward():
    """Each greedy token, fed back, is the argmax of one full forward of the sequence so far
    (float32, no split): the KV-cache loop decodes what it should."""
    model = nn.TinyGPT(**bi.MODEL, seed=1)
    prompts = np.random.default_rng(1).integers(0, 128, (2, 8))
    new = bi.greedy_decode(model, prompts, 5)
    ids = np.concatenate([prompts, new], axis=1)
    logits = model(ids[:, :-1]).f32()[:, 7:]
    np.testing.assert_array_equal(np.argmax(logits, axis=-1), new)


def test_fixed_split_and_the_exact_engine_decode_alike_at_every_batch():
    prompts = np.random.default_rng(2).integers(0, 128, (8, 8))
    assert bi.compare_batches(bi.split_model("float16", "fixed", 0), prompts, 6) == [0] * 8
    assert bi.compare_batches(nn.TinyGPT(**bi.MODEL, seed=0).to("float16"), prompts, 6) == [0] * 8


def _numbers(batch=(0.0, 0.4, 0.1), fixed=(0.0, 0.0, 0.0)):
    n = {"prompts": 16.0, "tokens": 24.0}
    for f, b, x in zip(bi.FORMATS, batch, fixed):
        for policy, share in (("batch", b), ("fixed", x)):
            n[f"{f}_{policy}_diverged"] = share
            for k in ("min", "median", "mean"):
                n[f"{f}_{policy}_first_{k}"] = 5.0 if share else math.nan
    return n


@pytest.mark.parametrize("numbers, expected", [
    (_numbers(batch=(0.1, 0.4, 0.1)), "reproduced"),
    (_numbers(), "partly"),
    (_numbers(batch=(0.0, 0.0, 0.0)), "not at this scale"),
    (_numbers(fixed=(0.0, 0.1, 0.0)), "not at this scale"),
])
def test_verdict_on_fixed_numbers(numbers, expected):
    verdict, reason = bi.verdict(numbers)
    assert verdict == expected, reason
    assert reason and "\n" not in reason
    assert bi.measured(numbers, {})


def _quick():
    """The quick run on seed 0, made once in the session and shared with test_findings."""
    assert get_finding(bi.NAME) is bi.FINDING
    return quick_run(bi.NAME)


@pytest.mark.slow
def test_the_quick_run_pinned():
    """The same bits on every machine: every step is fpsim's arithmetic and ml_dtypes' roundings."""
    r = _quick()
    n = r.numbers
    assert (n["prompts"], n["tokens"]) == (16.0, 24.0)
    assert [n[f"{f}_batch_diverged"] for f in bi.FORMATS] == [0.0, 0.375, 0.125]
    assert [n[f"{f}_fixed_diverged"] for f in bi.FORMATS] == [0.0, 0.0, 0.0]
    assert (n["bfloat16_batch_first_min"], n["float16_batch_first_min"]) == (4.0, 2.0)
    assert r.verdict == "partly" and "float32 accumulation none within 24 tokens" in r.reason
    assert sorted(r.series) == sorted(["formats", "tokens"] + [f"{f}_{p}" for f in bi.FORMATS
                                                               for p in ("batch", "fixed")])
