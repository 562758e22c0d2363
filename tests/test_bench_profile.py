"""``fpsim bench --profile``: the shares are well formed (every category, non-negative, summing
to the step).  No timing assertions: the values depend on the machine."""

from __future__ import annotations

import contextlib
import io
import json
import math
import sys

import pytest

from fpsim.backend import get_backend
from fpsim.tools import benchprofile, cli


@pytest.fixture(scope="module")
def prof():
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert cli.main(["bench", "--profile", "--quick", "--json"]) == 0
    return json.loads(buf.getvalue())


def test_every_recipe_and_category(prof):
    assert set(prof["recipes"]) == {"fp32", "fp16-dynamic", "bf16-master"}
    for p in prof["recipes"].values():
        assert set(p["shares"]) == set(benchprofile.CATEGORIES) == set(p["seconds"])
        assert all(v >= 0 for v in p["seconds"].values())
        assert math.isclose(sum(p["shares"].values()), 1.0, rel_tol=1e-9)
        assert math.isclose(sum(p["seconds"].values()), p["attributed"], rel_tol=1e-9)
        assert p["step_seconds"] > 0 and p["profiled_wall"] > 0


def test_categories_seen_where_they_must_be(prof):
    """Which categories are non-zero follows from the recipes, not from the clock."""
    r = prof["recipes"]
    for p in r.values():
        assert p["seconds"]["gemm"] > 0 and p["seconds"]["optimizer"] > 0 and p["seconds"]["python"] > 0
    assert r["fp16-dynamic"]["seconds"]["rounding"] > 0
    widening = r["fp16-dynamic"]["seconds"]["widening"]
    assert widening > 0 if get_backend().name == "numpy" else widening == 0  # numpy-f32 never widens
    assert r["fp16-dynamic"]["seconds"]["scaler"] > 0
    assert r["fp32"]["seconds"]["scaler"] == 0 and r["bf16-master"]["seconds"]["scaler"] == 0


def test_hook_removed_and_table_printed():
    res = benchprofile.profile_recipes(("fp16-dynamic",), batch=4, steps=2, warmup=1)
    assert sys.getprofile() is None
    text = benchprofile.format_profile(res)
    for c in benchprofile.CATEGORIES:
        assert c in text
    assert "100.0%" in text
