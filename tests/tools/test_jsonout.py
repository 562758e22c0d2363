"""The JSON fpsim writes is strict JSON (RFC 8259: no NaN, no Infinity): ``fpsim.tools.jsonout``
replaces every non-finite number by null and says where, as ``fpsim compare --json`` shows for a
run that diverged."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import run_cli, strict_json

pytestmark = pytest.mark.both_backends  # every test here runs on numpy and numpy-f32 (conftest.py)


def test_compare_json_is_strict_json_with_null_for_a_diverged_run(capsys):
    rc, out, err = run_cli(capsys, "compare", "--recipes", "fp32", "fp16-pure", "--steps", "3", "--figure", "none",
                       "--json", "--quiet")
    assert rc == 0, err
    d = strict_json(out)
    bad, good = d["fp16-pure"], d["fp32"]
    assert bad["final_loss"] is None and bad["r2"] is None  # Adam's exp_avg_sq underflows: NaN at step 0
    assert bad["metrics"]["r2"] is None  # the task's metrics, as --json prints them after the common fields
    assert bad["null_values"] == {"final_loss": "nan", "r2": "nan", "metrics.r2": "nan"}
    assert bad["failure"].startswith("step 0:")
    assert isinstance(good["final_loss"], float) and "null_values" not in good


def test_jsonout_replaces_every_non_finite_value_and_says_where():
    from fpsim.tools.jsonout import dumps, finite

    notes = {}
    obj = finite({"a": float("nan"), "b": [1.0, float("inf"), np.float32("-inf")], "c": {"d": np.float64(2.5)},
                  "e": np.int64(3), "f": np.array([np.nan, 1.0])}, notes)
    assert obj == {"a": None, "b": [1.0, None, None], "c": {"d": 2.5}, "e": 3, "f": [None, 1.0]}
    assert notes == {"a": "nan", "b": "2 of 3 values non-finite (-inf, inf)", "f": "1 of 2 values non-finite (nan)"}
    assert strict_json(dumps(obj)) == obj
    with pytest.raises(ValueError):
        dumps({"x": math.nan})  # allow_nan=False: it cannot come back
