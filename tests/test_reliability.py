"""Issue 14: the defects found by trying fpsim as a new user would - each reproduced here
first, then pinned.  (The randomised search that keeps them out is tests/test_fuzz.py.)"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fpsim.tools import cli


def strict_json(text: str):
    """Parse as a strict parser would: NaN, Infinity and -Infinity are not JSON (RFC 8259)."""

    def refuse(token):
        raise ValueError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)


def run(capsys, *argv):
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


# -- 1. compare --json: strict JSON, null for a diverged run's numbers ---------------------------

def test_compare_json_is_strict_json_with_null_for_a_diverged_run(capsys):
    rc, out, err = run(capsys, "compare", "--recipes", "fp32", "fp16-pure", "--steps", "3", "--figure", "none",
                       "--json", "--quiet")
    assert rc == 0, err
    d = strict_json(out)
    bad, good = d["fp16-pure"], d["fp32"]
    assert bad["final_loss"] is None and bad["r2"] is None  # Adam's exp_avg_sq underflows: NaN at step 0
    assert bad["null_values"] == {"final_loss": "nan", "r2": "nan"}
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


# -- 2. audit with nothing to judge ---------------------------------------------------------------

@pytest.mark.parametrize("arrays", [
    {"a": np.full(5, np.nan, np.float32), "b": np.array([np.inf, -np.inf], np.float16)},
    {"empty": np.zeros(0, np.float32)},
    {"zeros": np.zeros(3, np.float32)},
    {"ints": np.arange(4), "flags": np.ones(2, bool)},  # every tensor skipped
], ids=["nonfinite", "empty", "zeros", "skipped"])
def test_audit_with_no_finite_nonzero_value_says_so_and_fails(tmp_path, capsys, arrays):
    path = tmp_path / "g.npz"
    np.savez(path, **arrays)
    rc, out, err = run(capsys, "audit", path)
    assert rc == 2
    assert "2^-30" not in out and "2^40" not in out  # the old, empty verdict "2^-30 .. 2^40"
    assert "nothing to judge" in out
    assert err.count("\n") == 1 and "nothing to judge" in err
    assert not (tmp_path / "g_audit.png").exists()
    rc, out, err = run(capsys, "audit", path, "--json")
    d = strict_json(out)
    assert rc == 2 and d["nothing_to_judge"].startswith(str(path))
    assert all(f["scale_exponents"] is None for f in d["overall"]["formats"].values())


# -- 3. audit --out that cannot be written: the report first, then one error ------------------

def test_audit_prints_the_report_before_a_figure_that_cannot_be_written(tmp_path, capsys):
    path = tmp_path / "g.npz"
    np.savez(path, g=np.float32([1e-8, 1.0]))
    rc, out, err = run(capsys, "audit", path, "--formats", "fp16", "--out", tmp_path / "missing" / "x.png")
    assert rc == 2
    assert "2^2 .. 2^15" in out  # 1e-8 x 2^2 is float16's first survivor; 1.0 x 2^16 overflows
    assert "figure:" not in out
    assert err.count("\n") == 1 and "missing/x.png could not be written" in err
