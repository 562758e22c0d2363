"""The findings ``small-scale-proxies`` and ``outliers-and-kurtosis`` (their quick runs are tested in
experiments/test_findings.py, with every finding's): each verdict rule on fixed inputs; the LR sensitivity,
the edge of stability and the rank correlation against hand computations; the BOS task and the
planted activation."""

import numpy as np
import pytest

from fpsim.experiments.findings import outliers, proxies, runner
from fpsim.experiments.tinygpt import BOS, SEP, TinyGPTTask


@pytest.mark.parametrize("given, used", [(None, (0, 1, 2)), ((4,), (4,)), ((1, 2, 3, 4), (1, 2, 3, 4))])
def test_a_full_run_uses_the_seeds_given_or_the_findings_three(given, used):
    planned = runner.plan(proxies.FINDING, False, proxies.FINDING.seeds_for(False, given))
    assert tuple(sorted({spec.seed for _, _, spec in planned})) == used
    # every config of the full grid at every learning rate, each run once per seed
    assert len(planned) == len(proxies.CONFIGS) * len(proxies.LRS) * len(used)
    assert {spec.lr for _, _, spec in planned} == set(proxies.LRS) and {spec.steps for _, _, spec in planned} == {60}


def test_a_quick_run_plans_the_quick_grid():
    planned = runner.plan(proxies.FINDING, True, (0,))
    assert sorted((rec, spec.task.qk_norm, spec.lr) for _, rec, spec in planned) == sorted(
        (rec, arm == "qk-norm", lr) for rec, arm in proxies.QUICK_CONFIGS for lr in proxies.QUICK_LRS)


# ---- the measures, against hand computations ------------------------------------------------

def test_lr_sensitivity_and_edge_on_fixed_losses():
    """Wortsman et al.'s sensitivity: mean of min(loss, initial) minus the best; a dead run (NaN)
    counts as the initial loss.  Edge: the largest LR within 1.25x the reference's best."""
    loss = np.array([[1.0, 0.5, 0.6, 3.0], [1.0, 0.4, np.nan, 0.45]])
    init = np.array([2.0, 2.0])
    # seed 0: capped (1.0, 0.5, 0.6, 2.0), mean 1.025, best 0.5; seed 1: (1.0, 0.4, 2.0, 0.45), mean 0.9625, best 0.4
    np.testing.assert_allclose(proxies.sensitivity(loss, init), [0.525, 0.5625])
    lrs = (0.01, 0.03, 0.1, 0.3)
    np.testing.assert_array_equal(proxies.edge(loss, np.array([0.5, 0.4]), lrs), [0.1, 0.3])  # 0.6 <= 0.625; 0.45 <= 0.5
    np.testing.assert_array_equal(proxies.edge(loss, np.array([0.1, 0.1]), lrs), [0.0, 0.0])


def test_rank_correlation_against_the_no_ties_formula_and_with_ties():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=50), rng.normal(size=50)
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    want = 1 - 6 * np.sum((ra - rb) ** 2) / (50 * (50**2 - 1))  # Spearman without ties
    assert outliers.rank_correlation(a, b) == pytest.approx(want, rel=1e-12)
    assert outliers.rank_correlation(a, np.exp(a)) == pytest.approx(1.0)
    assert outliers.rank_correlation(a, -a) == pytest.approx(-1.0)
    # ties take their mean rank: x ranks (0.5, 0.5, 2, 3), y ranks (0, 1, 2, 3) -> Pearson of those
    x, y = [1.0, 1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0]
    assert outliers.rank_correlation(x, y) == pytest.approx(np.corrcoef([0.5, 0.5, 2, 3], [0, 1, 2, 3])[0, 1])
    assert np.isnan(outliers.rank_correlation([1.0, 1.0], [1.0, 2.0]))


def test_the_bos_task_and_the_planted_activation():
    plain, bos = TinyGPTTask(n_digits=4, batch=3), TinyGPTTask(n_digits=4, batch=3, bos=True)
    assert (bos.vocab_size, bos.context) == (BOS + 1, plain.context + 1)
    s, sb = plain.batch_at(0), bos.batch_at(0)
    np.testing.assert_array_equal(sb[:, 1:], s)
    assert (sb[:, 0] == BOS).all() and (sb[:, 5] == SEP).all()
    m = bos.model(0)
    logits, target = bos.logits_and_targets(m, sb)
    np.testing.assert_array_equal(target, s[:, 5:].ravel())  # the sorted digits, as without BOS
    assert logits.shape == (3 * 4, BOS + 1)
    outliers.plant(m, 1000.0)
    w = m.tok_emb.weight.numpy()
    assert w[BOS, 0] == 1000.0 and w[BOS, 1] == bos.model(0).tok_emb.weight.numpy()[BOS, 1]
    with pytest.raises(TypeError, match="bos"):
        TinyGPTTask(bos=1)


# ---- the verdict rules, on fixed inputs -----------------------------------------------------

def _proxy_numbers(growth, lowers, wider, seeds=3.0):
    return {"logit_growth": growth, "qk_lowers_logit_every_seed": lowers, "qk_wider_every_seed": wider,
            "seeds": seeds}


@pytest.mark.parametrize("numbers, expected", [
    (_proxy_numbers(500.0, 1.0, 1.0), "reproduced"),
    (_proxy_numbers(500.0, 1.0, 0.0), "partly"),
    (_proxy_numbers(500.0, 0.0, 1.0), "partly"),
    (_proxy_numbers(500.0, 0.0, 0.0), "not at this scale"),
    (_proxy_numbers(2.0, 1.0, 1.0), "not at this scale"),  # no logit growth: nothing to cure
])
def test_proxies_verdict(numbers, expected):
    assert proxies.verdict(numbers)[0] == expected


def _outlier_numbers(ratio, kurt, kurt0, rho_mse, rho_small):
    return {"largest_plant": 1e4, "plant10000_ratio": ratio, "plant10000_ratio_min": ratio,
            "plant10000_kurt_min": kurt, "plant0_kurt_max": kurt0, "rho_rel_mse_min": rho_mse,
            "rho_small_min": rho_small}


@pytest.mark.parametrize("numbers, expected", [
    (_outlier_numbers(1e4, 500.0, 0.5, 0.7, 0.8), "reproduced"),
    (_outlier_numbers(1e4, 500.0, 0.5, -0.3, 0.8), "partly"),
    (_outlier_numbers(1e4, 500.0, 0.5, 0.2, 0.3), "not at this scale"),
    (_outlier_numbers(50.0, 500.0, 0.5, 0.7, 0.8), "not at this scale"),  # no massive activation
    (_outlier_numbers(1e4, 5.0, 0.5, 0.7, 0.8), "not at this scale"),  # kurtosis did not rise
])
def test_outliers_verdict(numbers, expected):
    assert outliers.verdict(numbers)[0] == expected
