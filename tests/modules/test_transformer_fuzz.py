"""Property test of ``nn.TinyGPT``'s knobs: random settings, good and bad - it builds, runs forward
and backward, or the constructor raises ONE ``ValueError`` / ``TypeError`` naming the bad knob."""

from __future__ import annotations

import numpy as np
import pytest
from support.fuzzing import one_line

from fpsim import nn

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
ALLOWED = (ValueError, TypeError)


GPT_FIELDS = {
    "d_model": st.sampled_from([8, 16, 0, 7, 2.5]),
    "n_heads": st.sampled_from([1, 2, 4, 3, -1]),
    "n_layers": st.sampled_from([1, 2, 0]),
    "fmt": st.sampled_from(["float32", "fp16", "bf16", "mxfp8", "nvfp4", "fp4", "fp17", None]),
    "seed": st.sampled_from([0, 5, -1, 1.5, "3", None]),
    "qk_scale": st.sampled_from([None, 0.25, 1.0, "a", float("nan"), float("inf")]),
    "ln_acc": st.sampled_from([None, "input", "float16", "bogus", "fp4"]),
    "attn_stable": st.sampled_from([True, False, "no"]),
    "mask_value": st.sampled_from([None, -65504.0, float("-inf"), "x", float("nan")]),
    "tied": st.sampled_from([False, True, "no"]),
    "emb_std": st.sampled_from([1.0, 0.02, -1.0, float("nan")]),
}


@FUZZ
@given(data=st.data())
def test_tinygpt_builds_and_runs_or_names_the_bad_knob(data):
    chosen = data.draw(st.lists(st.sampled_from(sorted(GPT_FIELDS)), max_size=3, unique=True))
    kwargs = {f: data.draw(GPT_FIELDS[f], label=f) for f in chosen}
    kwargs.setdefault("d_model", 8)
    kwargs.setdefault("n_heads", 2)
    try:
        model = nn.TinyGPT(11, 6, **kwargs)
    except ALLOWED as e:
        assert one_line(e, *kwargs, "vocab_size", "context"), (kwargs, str(e))
        return
    ids = np.random.default_rng(0).integers(0, 11, (2, 5))
    logits = model(ids)
    assert logits.shape == (2, 5, 11)
    nn.cross_entropy(logits.reshape(10, 11), ids.reshape(-1)).backward()  # the first backward: no surprise
