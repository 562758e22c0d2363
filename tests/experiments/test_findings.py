"""``fpsim reproduce``: the catalogue is the registry (every module of the package registers its
record); every finding's quick run gives its numbers, a verdict and plain data; each verdict rule,
on fixed inputs, for every registered finding; the measurements where an exact reference exists
(the saturated MX blocks against a direct count, Four Over Six against exact rationals, the
KV-cache rollout against the full forward); the CLI and the table."""

import contextlib
import dataclasses
import importlib
import json
import math
import pkgutil
from fractions import Fraction as Q

import numpy as np
import pytest
from helpers import small_task
from support.block_reference import ELEM, F32_MAX, f32, rne
from support.reference_runs import quick_run

import fpsim
from fpsim import nn
from fpsim.experiments import findings
from fpsim.experiments.findings import (
    FINDINGS,
    VERDICTS,
    FindingResult,
    base,
    batchinvariance,
    catalogue,
    fouroversix,
    fp8attention,
    fp8rollout,
    fp8scale,
    get_finding,
    kahan,
    lossscale,
    mismatch,
    mxlayernorm,
    mxscale,
    nvfp4round,
    optstate,
    outliers,
    overflow,
    promotion,
    proxies,
    ptq,
    sqrt3,
    table,
    unitscaling,
    zerorow,
)
from fpsim.experiments.gradnoise import GradientNoiseMonitor
from fpsim.lowp import BlockScaling
from fpsim.tools import reproduce

RUNNABLE = [n for n in FINDINGS.names() if FINDINGS[n].available()]


def _quick(name: str):
    """The finding's quick run on seed 0, as ``fpsim reproduce NAME --quick`` makes it: made once in
    the session (support.reference_runs) and read by every test of a quick run (the tests never change it)."""
    return quick_run(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", RUNNABLE)
def test_each_quick_run_gives_its_numbers_and_a_verdict(name):
    r = _quick(name)
    assert r.name == name and r.quick and r.seeds == (0,)
    assert r.verdict in VERDICTS and r.reason and r.measured
    assert r.numbers and all(isinstance(v, float) for v in r.numbers.values())
    assert get_finding(name).verdict(r.numbers) == (r.verdict, r.reason)
    assert r.seconds < 60  # "in seconds": the quick runs are what the tests and a first look use
    # plain data only: it crosses processes and JSON, and the figure is drawn from it
    assert base.plain(r.series) == r.series
    json.dumps({"series": r.series, **r.to_json()})
    assert not any(callable(v) for v in vars(r).values())


@pytest.mark.slow
@pytest.mark.parametrize("name", RUNNABLE)
def test_each_figure_is_drawn_from_the_record_and_the_results_plain_data(name, tmp_path):
    """What the parent process of a --jobs run does: the figure from the record and a result that
    went through JSON (no closure, no arrays) - the same image as from the result itself."""
    from fpsim.tools.catalogue import save_figure

    r = _quick(name)
    again = dataclasses.replace(r, series=json.loads(json.dumps(r.series)))
    assert save_figure(FINDINGS[name], r, tmp_path / "a.png") and save_figure(FINDINGS[name], again, tmp_path / "b.png")
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()
    assert (tmp_path / "a.png").stat().st_size > 1000


def test_the_block_format_findings_reproduce_their_sources_in_quick_runs():
    """What the sources report is what fpsim measures: these three are deterministic and fast."""
    assert _quick(mxscale.NAME).verdict == "reproduced"
    assert _quick(fouroversix.NAME).verdict == "reproduced"
    assert _quick(nvfp4round.NAME).verdict == "reproduced"


_MODULES = sorted(m.name for m in pkgutil.iter_modules(findings.__path__) if m.name not in findings._MACHINERY)


@pytest.mark.parametrize("module", _MODULES)
def test_every_module_of_the_package_registers_its_finding(module):
    """The catalogue is discovered: each finding module's record is in the registry, under its name."""
    mod = importlib.import_module(f"fpsim.experiments.findings.{module}")
    assert FINDINGS[mod.NAME] is mod.FINDING


def test_the_catalogue_is_every_registered_finding_in_a_stable_order():
    names = [f.name for f in catalogue()]
    assert sorted(names) == sorted(FINDINGS.names()) and len(names) == len(_MODULES)
    assert names[:4] == ["fp16-loss-scaling", "attention-forward-overflow", "bf16-kahan-stochastic", "fp8-scaling"]
    assert names[-1] == "ptq-degrades-with-training"
    assert [f.order for f in catalogue()] == sorted(f.order for f in catalogue())


def test_a_finding_record_refuses_what_it_cannot_run():
    f = FINDINGS["nvfp4-rounding"]
    with pytest.raises(ValueError, match="give a sweep .with extract. or a measure function"):
        dataclasses.replace(f, measure=None)
    with pytest.raises(ValueError, match="extract.results. -> numbers goes with a sweep"):
        dataclasses.replace(f, extract=lambda results: {})
    with pytest.raises(ValueError, match="seed_use must be one of"):
        dataclasses.replace(f, seed_use="some")
    with pytest.raises(TypeError, match="a finding is a Finding record"):
        FINDINGS.register(object(), "x")
    with pytest.raises(ValueError, match="modes must name 'quick' and/or 'full'"):
        findings.Sweep(fpsim.experiments.ReferenceTask, ("fp32",), modes=("fast",))
    with pytest.raises(TypeError, match="plain data"):
        FindingResult("x", {}, "", "partly", "", True, (0,), series={"f": print})


def test_unit_scaling_quick_run():
    r = _quick(unitscaling.NAME)
    assert r.verdict == "partly" and r.numbers["steps"] == 10
    assert r.numbers["plain_grad_output_flushed"] > 0.3 > r.numbers["unit_grad_output_flushed"]
    assert all(math.isfinite(r.numbers[f"{k}_mean"]) for k in unitscaling.RATIOS)
    assert set(r.series["curves"]) == {"fp8-delayed", "scale-1 start", "fixed scale 1", "unit-scaled, fixed scale 1"}


def test_mx_layernorm_quick_run():
    r = _quick(mxlayernorm.NAME)
    assert r.verdict in ("not at this scale", "partly", "reproduced") and r.numbers["steps"] == 15
    assert all(math.isfinite(r.numbers[f"{a}_final_loss"]) for a in mxlayernorm.ARMS)
    assert set(r.series["curves"]) == set(mxlayernorm.ARMS)


@pytest.mark.slow
def test_ptq_quick_run():
    r = _quick(ptq.NAME)
    assert r.verdict == "partly" and r.series["steps"] == [0, 5, 10, 15, 20]
    # the summary from the per-seed curves: early rise = increase at the middle less that at step 5
    assert r.numbers["mxfp4_early_rise"] == pytest.approx(r.series["mxfp4"][0][2] - r.series["mxfp4"][0][1])
    assert r.numbers["fp32_loss_at_20"] < r.numbers["fp32_loss_at_0"]
    assert all(math.isfinite(v) for v in r.numbers.values())


# ---- the verdict rules, on fixed inputs -----------------------------------------------------------

def _mx(floor, up=0.0):
    n = {f"{k}_{r}_saturated": up for k in ("gaussian", "student_t3", "reference_grads", "tinygpt_grads")
         for r in mxscale.RULES}
    n["gaussian_floor_saturated"] = floor
    return n


VERDICT_CASES = [
    (mxscale, _mx(0.169), "reproduced"), (mxscale, _mx(0.189), "reproduced"), (mxscale, _mx(0.20), "partly"),
    (mxscale, _mx(0.169, up=0.01), "not at this scale"), (mxscale, _mx(0.0), "not at this scale"),
    (fouroversix, {"gaussian_mse_change": -0.16, "gaussian_share_four": 0.46}, "reproduced"),
    (fouroversix, {"gaussian_mse_change": -0.05, "gaussian_share_four": 0.46}, "partly"),
    (fouroversix, {"gaussian_mse_change": 0.01, "gaussian_share_four": 0.0}, "not at this scale"),
    (nvfp4round, {"mse_ratio": 2.1, "transpose_mismatch_16x16": 0.0, "sr_bias_mean": 1e-4, "rtn_bias": 0.07},
     "reproduced"),
    (nvfp4round, {"mse_ratio": 3.0, "transpose_mismatch_16x16": 0.0, "sr_bias_mean": 1e-4, "rtn_bias": 0.07},
     "partly"),
    (nvfp4round, {"mse_ratio": 2.1, "transpose_mismatch_16x16": 0.01, "sr_bias_mean": 0.0, "rtn_bias": 0.07},
     "not at this scale"),
    (mismatch, {"bf16_over_fp16": 8.0}, "reproduced"), (mismatch, {"bf16_over_fp16": 5.0}, "partly"),
    (mismatch, {"bf16_over_fp16": 1.5}, "not at this scale"),
    (sqrt3, {"cross_step": 18.0, "ratio_start": 9.0, "gap_at_cross": 1.3, "gap_at_end": 1.7, "steps": 40.0},
     "reproduced"),
    (sqrt3, {"cross_step": 18.0, "ratio_start": 9.0, "gap_at_cross": 1.3, "gap_at_end": 1.35, "steps": 40.0},
     "partly"),
    (sqrt3, {"cross_step": math.nan, "ratio_start": 9.0, "gap_at_cross": math.nan, "gap_at_end": 1.0,
             "steps": 40.0}, "not at this scale"),
    (lossscale, {"unscaled_flushed": 0.5, "scaled_flushed": 0.0, "unscaled_ratio": 1.065, "scaled_ratio": 1.0,
                 "steps": 150.0}, "reproduced"),
    (lossscale, {"unscaled_flushed": 0.3, "scaled_flushed": 0.0, "unscaled_ratio": 0.99, "scaled_ratio": 1.0,
                 "steps": 25.0}, "partly"),
    (lossscale, {"unscaled_flushed": 0.0, "scaled_flushed": 0.0, "unscaled_ratio": 1.0, "scaled_ratio": 1.0,
                 "steps": 25.0}, "not at this scale"),
    (kahan, {"bf16-pure_ratio": 1.045, "bf16-kahan_ratio": 1.011, "bf16-stochastic_ratio": 1.010, "steps": 150.0},
     "reproduced"),
    (kahan, {"bf16-pure_ratio": 1.045, "bf16-kahan_ratio": 1.03, "bf16-stochastic_ratio": 1.010, "steps": 150.0},
     "partly"),
    (kahan, {"bf16-pure_ratio": 1.001, "bf16-kahan_ratio": 1.0, "bf16-stochastic_ratio": 1.0, "steps": 25.0},
     "not at this scale"),
    (fp8scale, {"fp8-delayed_ratio": 1.01, "fp8-current_ratio": 1.015, "fp8-scale1-start_ratio": 1.1,
                "steps": 150.0}, "reproduced"),
    (fp8scale, {"fp8-delayed_ratio": 1.099, "fp8-current_ratio": 1.09, "fp8-scale1-start_ratio": 1.13,
                "steps": 150.0}, "partly"),
    (fp8scale, {"fp8-delayed_ratio": 1.01, "fp8-current_ratio": 1.01, "fp8-scale1-start_ratio": 1.8,
                "steps": 15.0}, "partly"),
    (fp8scale, {"fp8-delayed_ratio": 1.5, "fp8-current_ratio": 1.4, "fp8-scale1-start_ratio": 2.0,
                "steps": 150.0}, "not at this scale"),
    (overflow, {"fp16_died": 1.0, "fp16_died_at": 29.0, "amp_died": 0.0, "amp_accuracy": 0.9, "steps": 100.0},
     "reproduced"),
    (overflow, {"fp16_died": 0.5, "fp16_died_at": 29.0, "amp_died": 0.0, "amp_accuracy": 0.9, "steps": 100.0},
     "partly"),
    (overflow, {"fp16_died": 0.0, "fp16_died_at": math.nan, "amp_died": 0.0, "amp_accuracy": 0.9, "steps": 10.0},
     "not at this scale"),
    (promotion, {"k4096_none_mean": -0.07, "k4096_128_mean": -0.0006}, "reproduced"),
    (promotion, {"k4096_none_mean": -0.002, "k4096_128_mean": -0.0001}, "partly"),
    (promotion, {"k4096_none_mean": -0.07, "k4096_128_mean": -0.07}, "not at this scale"),
    # one case each here; each of these has its whole table in its own test file
    (proxies, {"logit_growth": 500.0, "qk_lowers_logit_every_seed": 1.0, "qk_wider_every_seed": 0.0, "seeds": 3.0},
     "partly"),
    (outliers, {"largest_plant": 1e4, "plant10000_ratio": 50.0, "plant10000_ratio_min": 50.0,
                "plant10000_kurt_min": 500.0, "plant0_kurt_max": 0.5, "rho_rel_mse_min": 0.7, "rho_small_min": 0.8},
     "not at this scale"),
    (unitscaling, {"steps": 10.0, "delayed_mean": 1.1, "delayed_max": 1.15, "scale1_start_mean": 1.13,
                   "unit_fixed1_mean": 1.0, "unit_fixed1_max": 1.0}, "partly"),
    (mxlayernorm, {"seeds": 8.0, "steps": 100.0, "width": 32.0, "ln-quantized_seeds_spiking": 0.0,
                   "ln-high-precision_seeds_spiking": 0.0, "bump_seeds_spiking": 0.0, "fp32_seeds_spiking": 0.0},
     "not at this scale"),
    (ptq, {"steps": 20.0, "seeds": 1.0}, "partly"),
    (optstate, {**{f"{r.name}_ratio": 1.0 for r in optstate.RECIPES}, "adam-int8-linear_ratio": 1.4}, "reproduced"),
    (batchinvariance, {"tokens": 24.0, **{f"{f}_{p}_diverged": 0.0 for f in batchinvariance.FORMATS
                                          for p in ("batch", "fixed")}}, "not at this scale"),
    (fp8attention, {f"d{d}_{k}": 0.0 for d in fp8attention.DELTAS for k in ("fwd_s1_flushed", "scale_gain",
                                                                             "reverse_gain")}, "not at this scale"),
    (fp8rollout, {"steps": 40.0, "entropy_first": 2.26, "entropy_last": 2.1, "fp8_over_bf16_p99": 5.0,
                  "p99_growth": 1.0}, "not at this scale"),
    (zerorow, {"guarded_died": 0.0, "unguarded_died": 1.0, "unguarded_died_at": 0.0, "unguarded_origin_is_scale": 1.0,
               "guarded_ratio": 1.0}, "reproduced"),
    (findings.msedn, {**{f"{k}_gain_rht": 2.0 for k in findings.msedn.KINDS}, "gaussian_eden_rht_bias_share": 0.002,
                      "gaussian_rtn_rht_bias_share": 0.004}, "reproduced"),
    (findings.nvfp4osc, {"osc_share": 0.07, "mid_osc": 0.7, "gap_closed": -0.07}, "partly"),
]


@pytest.mark.parametrize("finding, numbers, expected", VERDICT_CASES)
def test_verdict_rules_on_fixed_numbers(finding, numbers, expected):
    verdict, reason = finding.verdict(numbers)
    assert verdict == expected, reason
    assert reason and "\n" not in reason
    assert FINDINGS[finding.NAME].verdict is finding.verdict  # the registered record's rule


@pytest.mark.parametrize("name", FINDINGS.names())
def test_every_registered_finding_has_its_verdict_tested_on_fixed_numbers(name):
    assert name in {m.NAME for m, _, _ in VERDICT_CASES}


def test_a_result_refuses_an_unknown_verdict_and_a_finding_bad_seeds():
    with pytest.raises(ValueError, match="verdict must be one of"):
        FindingResult("x", {}, "", "maybe", "", True, (0,))
    f = get_finding("nvfp4-rounding")
    for bad in ((), (0, 0), (1.5,), (True,)):
        with pytest.raises(ValueError, match="seeds must be distinct integers"):
            f.reproduce(True, bad)
    with pytest.raises(ValueError, match="unknown finding 'nope'; known: fp16-loss-scaling"):
        get_finding("nope")


def test_a_finding_whose_module_is_missing_says_so():
    f = FINDINGS["tensor-core-accumulation"]
    if f.available():
        pytest.skip("fpsim.tensorcore is here")
    with pytest.raises(RuntimeError, match="needs fpsim.tensorcore"):
        f.reproduce(True)


# ---- exact references -----------------------------------------------------------------------------

def test_saturated_mx_blocks_match_a_direct_count():
    """floor: a block saturates when amax / 2^(floor(log2 amax) - 8) > 448, i.e. its significand > 1.75;
    counted with np.frexp in float64, independently of fpsim.quantize."""
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.standard_normal(2**14), rng.standard_t(3, 2**14)]).astype(np.float32)
    amax = np.abs(x.astype(np.float64)).reshape(-1, 32).max(axis=1)
    mant, _ = np.frexp(amax)  # amax = mant * 2^e, mant in [0.5, 1)
    expected = float((2 * mant * 256 > 448).mean())
    assert mxscale.measure(x, "floor")["saturated"] == expected
    assert mxscale.measure(x, "ceil")["saturated"] == 0.0 == mxscale.measure(x, "rceil")["saturated"]


def _four_over_six_block(vals, s_enc):
    """One NVFP4 block under 4/6, in exact rationals with every step rounded to float32 as TE's
    reference order does: (chosen top, dequantized values)."""
    m, emin, _, _ = ELEM["float8_e4m3fn"]
    fm, femin, fmax, _ = ELEM["float4_e2m1fn"]
    amax = max(abs(Q(v)) for v in vals)
    best = None
    for top in (6, 4):
        mult = f32(s_enc * f32(Q(1, top)))
        s = rne(min(f32(amax * mult), Q(448)), m, emin)
        dec = f32(s * f32(1 / s_enc))
        enc = F32_MAX if dec == 0 else min(f32(1 / dec), F32_MAX)
        elems = [rne(min(abs(f32(Q(v) * enc)), fmax), fm, femin) for v in vals]
        deq = [math.copysign(float(f32(p * dec)), v) for v, p in zip(vals, elems)]
        err = sum((Q(d) - Q(v)) ** 2 for d, v in zip(deq, vals))
        if best is None or err < best[0]:
            best = (err, top, deq)
    return best[1], best[2]


def test_four_over_six_matches_exact_rationals():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((48, 16)).astype(np.float32)
    x[0] = 0
    x[1, 3] = 40.0  # an outlier block
    x[2] = np.float32(1e-30)
    s_enc = f32(Q(256 * 6) / max(abs(Q(float(v))) for v in x.ravel()))
    q = fpsim.quantize(x, "nvfp4", scale_rounding="4/6")
    got = q.dequantize()
    tops = np.abs(q.elements.astype(np.float32)).max(axis=1)
    for i, row in enumerate(x):
        top, deq = _four_over_six_block([float(v) for v in row], s_enc)
        np.testing.assert_array_equal(got[i], np.asarray(deq, np.float32), err_msg=f"block {i}")
        if top == 4 and row.any():
            assert tops[i] == 4, i
    assert float(q.tensor_scale) == float(f32(1 / f32(Q(256 * 6) / Q(40))))


def test_four_over_six_as_a_block_scaling_option_and_bad_input():
    x = np.random.default_rng(0).standard_normal((32, 32)).astype(np.float32)
    r = BlockScaling("nvfp4", four_over_six=True)
    np.testing.assert_array_equal(r.quantize_operand(x, -1), fpsim.quantize(x, "nvfp4", scale_rounding="four_over_six").dequantize())
    with pytest.raises(ValueError, match="four_over_six applies to nvfp4 only"):
        BlockScaling("mxfp8", four_over_six=True)
    with pytest.raises(TypeError, match="four_over_six must be True or False"):
        BlockScaling("nvfp4", four_over_six="yes")
    with pytest.raises(ValueError, match="unknown scale_rounding 'ceil' for nvfp4"):
        fpsim.quantize(x, "nvfp4", scale_rounding="ceil")


@pytest.mark.parametrize("fmt", ["float32", "bfloat16", "float16"])
def test_kv_cache_decoding_is_the_full_forward_with_the_same_kernel(fmt):
    """Eager attention on both sides: the KV-cache rollout and one full forward give the same
    log-probabilities up to float32's reordering (bfloat16's and float16's rounding hides most of it)."""
    model = nn.TinyGPT(11, 16, d_model=32, n_layers=2, n_heads=4, seed=0).to(fmt)
    prompt = np.random.default_rng(0).integers(0, 11, (3, 5))
    ids, lp = model.generate(prompt, 11, seed=2)
    assert ids.shape == (3, 16) and lp.shape == (3, 11) and lp.dtype == np.float32
    np.testing.assert_array_equal(ids[:, :5], prompt)
    np.testing.assert_allclose(lp, mismatch.trainer_logprobs(model, ids, 11), rtol=0, atol=1e-3 if fmt != "float32"
                               else 1e-5)
    again, lp2 = model.generate(prompt, 11, seed=2)
    np.testing.assert_array_equal(again, ids)
    np.testing.assert_array_equal(lp2, lp)


def test_the_fused_decode_kernel_rounds_once():
    """fused=True: float32 attention inside, one rounding of its output - in float32 the same
    log-probabilities as the trainer up to reordering, in bfloat16 a real difference."""
    prompt = np.random.default_rng(1).integers(0, 11, (4, 5))
    for fmt, lo, hi in (("float32", 0.0, 1e-5), ("bfloat16", 1e-4, 0.5)):
        model = nn.TinyGPT(11, 16, d_model=32, n_layers=2, n_heads=4, seed=0).to(fmt)
        ids, lp = model.generate(prompt, 11, seed=2, fused=True)
        diff = np.abs(lp - mismatch.trainer_logprobs(model, ids, 11)).max()
        assert lo <= diff <= hi, (fmt, diff)


def test_decode_keeps_the_cache_and_refuses_what_does_not_fit():
    model = nn.TinyGPT(11, 8, d_model=16, n_layers=1, n_heads=2, seed=0)
    caches = [[]]
    model.decode(np.zeros((2, 5), np.int64), caches)
    assert caches[0][0].shape == (2, 2, 5, 8) and caches[0][1].shape == (2, 2, 5, 8)
    with pytest.raises(ValueError, match="5 cached \\+ 4 new positions exceed the context 8"):
        model.decode(np.zeros((2, 4), np.int64), caches)
    with pytest.raises(ValueError, match="caches must hold one list per block"):
        model.decode(np.zeros((2, 1), np.int64), [[], []])
    with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
        model.generate(np.zeros((1, 2), np.int64), 2, temperature=0)
    with pytest.raises(ValueError, match=r"^TinyGPT\.generate: new_tokens must be an integer >= 1, got 0$"):
        model.generate(np.zeros((1, 2), np.int64), 0)


def test_the_gradient_noise_monitor_against_numpy():
    """A float32 'quantized' run has no noise (ratio inf); a gradient perturbed by a known amount
    gives ||g|| / ||delta||, computed here directly in float64."""
    task = small_task(64)
    x = task.data()
    model = task.model(0)
    xt, tgt = fpsim.tensor(x, "float32"), fpsim.tensor(x, "float32")

    def loss(m):
        return fpsim.ops.mse_loss(m(xt), tgt)

    loss(model).backward()
    mon = GradientNoiseMonitor(task.model(1))
    assert mon(model, loss) == math.inf
    g = [np.asarray(p.grad.f32(), np.float64).copy() for p in model.parameters()]
    p0 = model.parameters()[0]
    delta = np.zeros(p0.shape)
    delta.flat[0] = 1e-3
    p0.grad = fpsim.tensor(g[0] + delta, "float32")
    expected = math.sqrt(sum(float((a**2).sum()) for a in g)) / 1e-3
    assert mon(model, loss) == pytest.approx(expected, rel=1e-6)
    assert mon.first_below(expected * 2) == 1 and mon.first_below(1.0) is None


# ---- the CLI and the table ----------------------------------------------------------------------

@contextlib.contextmanager
def swapped(name: str, **changes):
    """The finding ``name`` registered with ``changes`` for the duration (the record restored after)."""
    f = FINDINGS[name]
    FINDINGS.register(dataclasses.replace(f, **changes), replace=True)
    try:
        yield FINDINGS[name]
    finally:
        FINDINGS.register(f, replace=True)


def _args(**kw):
    base = {"name": None, "list": False, "quick": True, "seeds": [0], "json": False, "figure": "none", "table": None,
            "all": False, "jobs": 1}
    base.update(kw)
    import argparse

    return argparse.Namespace(**base)


def test_cli_lists_runs_and_writes_json_and_a_figure(capsys, tmp_path):
    assert reproduce.main(_args(list=True)) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in FINDINGS)
    fig = tmp_path / "f.png"
    assert reproduce.main(_args(name="nvfp4-rounding", json=True, figure=str(fig))) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["name"] == "nvfp4-rounding" and got["verdict"] in VERDICTS and got["numbers"]["mse_ratio"] > 1
    assert fig.stat().st_size > 1000
    with swapped("nvfp4-rounding", measure=lambda q, s, p: {"x": math.nan}, verdict=lambda n: ("partly", "r"),
                 measured=lambda n, s: "m"):
        assert reproduce.main(_args(name="nvfp4-rounding", json=True)) == 0
    got = json.loads(capsys.readouterr().out)  # strict JSON: NaN written as null, and said where
    assert got["numbers"]["x"] is None and got["non_finite"] == {"numbers.x": "nan"}
    assert reproduce.main(_args()) == 2
    assert "name a finding" in capsys.readouterr().err


def test_fpsim_reproduce_through_the_cli(capsys):
    from fpsim.tools.cli import main

    assert main(["reproduce", "--list"]) == 0
    assert "fp16-vs-bf16-mismatch" in capsys.readouterr().out
    assert main(["reproduce", "no-such-finding"]) == 2
    assert "unknown finding 'no-such-finding'" in capsys.readouterr().err


def test_cli_parser_and_the_table():
    import argparse

    p = argparse.ArgumentParser()
    reproduce.add_parser(p.add_subparsers())
    args = p.parse_args(["reproduce", "mxfp8-scale-rounding", "--quick", "--seeds", "1", "2", "--json"])
    assert args.name == "mxfp8-scale-rounding" and args.quick and args.seeds == [1, 2] and args.func is reproduce.main
    r = FindingResult("nvfp4-rounding", {"a": 1.0}, "SR 2.1x | RTN", "reproduced", "because", True, (0,), 1.0)
    md = table.markdown({"nvfp4-rounding": r}, quick=True)
    assert "--quick" in md.splitlines()[2]
    rows = [line for line in md.splitlines() if line.startswith("| `")]
    assert len(rows) == len(FINDINGS)
    assert "SR 2.1x \\| RTN" in md and "**reproduced**: because" in md
    assert "not run: needs `fpsim.tensorcore`" in md or FINDINGS["tensor-core-accumulation"].available()
