"""Lab 16's support (fpsim.labs.spike): the run is the small-scale-proxies finding's tiny GPT, its
first steps agree with the same network trained in PyTorch, the outlier monitor reads the modules
the lab names.  The notebook itself, its self-checks, wrong answers and its run without PyTorch
are in tests/labs/test_labs.py."""

import numpy as np
import pytest

from fpsim.experiments.findings.proxies import SETTINGS
from fpsim.labs.spike import spike_run, spike_task, torch_first_steps, watch_outliers


def test_the_lab_trains_the_findings_model_with_the_probe_and_tracer_on():
    task = spike_task(qk_norm=True)
    assert all(getattr(task, k) == v for k, v in SETTINGS.items()) and task.qk_norm and task.record_logits
    r = spike_run(steps=3)
    assert len(r.losses) == len(r.metrics["attn_logits"]) == 3 and not r.traced
    assert spike_run(steps=2, trace=True).traced


def test_the_first_steps_agree_with_pytorch():
    """Same weights, batches, schedule and Adam in float32: the losses agree to a few float32 ulps
    of accumulated difference, the largest logits to 1e-3, over the first 5 steps at LR 0.2.

    Step 0 (the same weights, the same batch) agrees to 2 float32 ulps, not bit for bit: fpsim's
    sums are exact and rounded once (docs/guarantees.md), PyTorch's run in its kernel's order, so
    the one float32 loss may differ in its last bit (it does, by one ulp, here)."""
    pytest.importorskip("torch")
    ours = spike_run(steps=5)
    ref = torch_first_steps(0.2, steps=5, schedule=5)
    np.testing.assert_allclose(ours.losses[:5], ref["losses"], rtol=1e-5)
    np.testing.assert_allclose(ours.metrics["attn_logits"][:5], ref["attn_logits"], rtol=1e-3)
    ours0, torch0 = np.float32(ours.losses[0]), np.float32(ref["losses"][0])
    assert abs(ours0 - torch0) <= 2 * np.spacing(max(abs(ours0), abs(torch0))), (ours0, torch0)


def test_watch_outliers_reads_the_three_modules_every_step():
    om = watch_outliers(0.2, steps=3)
    assert [(r.pass_, r.module) for r in om.rows[:3]] == [(0, "blocks.0.attn"), (0, "blocks.0.mlp.1"), (0, "blocks.0")]
    assert len(om.rows) == 9 and len(om.logits()["blocks.0.attn"]) == 3
