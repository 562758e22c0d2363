"""``fpsim bench --profile``: the shares are well formed (every category, non-negative, summing
to the step); the compiled kernels' time is seen where the compiled path runs, and only there.
No timing assertions: the values depend on the machine."""

from __future__ import annotations

import contextlib
import io
import json
import math
import sys

import pytest

from fpsim.tools import cli
from fpsim.tools.bench import profile as benchprofile


@pytest.fixture(scope="module")
def prof():
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert cli.main(["bench", "--profile", "--quick", "--json"]) == 0
    return json.loads(buf.getvalue())


COLUMNS = {"fp32": ("fp32", "numpy"), "fp16-dynamic": ("fp16-dynamic", "numpy"),
           "bf16-master": ("bf16-master", "numpy"), "fp16-dynamic [numpy-f32]": ("fp16-dynamic", "numpy-f32"),
           "bf16-master [numpy-f32]": ("bf16-master", "numpy-f32")}


def test_every_recipe_and_category(prof):
    assert list(prof["recipes"]) == list(COLUMNS)
    for col, p in prof["recipes"].items():
        assert (p["recipe"], p["backend"]) == COLUMNS[col] == benchprofile.column(col)
        assert set(p["shares"]) == set(benchprofile.TIME_CATEGORIES) == set(p["seconds"])
        assert all(v >= 0 for v in p["seconds"].values())
        assert math.isclose(sum(p["shares"].values()), 1.0, rel_tol=1e-9)
        assert math.isclose(sum(p["seconds"].values()), p["attributed"], rel_tol=1e-9)
        assert p["step_seconds"] > 0 and p["profiled_wall"] > 0


def test_categories_seen_where_they_must_be(prof):
    """Which categories are non-zero follows from the recipes, not from the clock."""
    r = prof["recipes"]
    for p in r.values():
        assert p["seconds"]["gemm"] > 0 and p["seconds"]["optimizer"] > 0 and p["seconds"]["python"] > 0
    for col in ("fp16-dynamic", "bf16-master", "fp16-dynamic [numpy-f32]", "bf16-master [numpy-f32]"):
        assert r[col]["seconds"]["rounding"] > 0, col
    assert r["fp16-dynamic"]["seconds"]["widening"] > 0 and r["bf16-master"]["seconds"]["widening"] > 0
    # numpy-f32 never widens; its bfloat16 rounding widens the rounded values back, counted as rounding
    assert r["fp16-dynamic [numpy-f32]"]["seconds"]["widening"] == 0
    assert r["bf16-master [numpy-f32]"]["seconds"]["widening"] == 0
    assert r["fp16-dynamic"]["seconds"]["scaler"] > 0 and r["fp16-dynamic [numpy-f32]"]["seconds"]["scaler"] > 0
    for col in ("fp32", "bf16-master", "bf16-master [numpy-f32]"):  # a disabled GradScaler: its calls hand the
        # loss and the step on untouched, microseconds against the step's GEMMs (milliseconds: a margin of
        # about 100x, which load on the machine does not close; against the real scaler's few hundred
        # microseconds, 4x was, under load)
        assert r[col]["seconds"]["scaler"] < r[col]["seconds"]["gemm"] / 10, col


def test_column_names():
    assert benchprofile.column("fp16-dynamic [numpy-f32]") == ("fp16-dynamic", "numpy-f32")
    assert benchprofile.column("bf16-master") == ("bf16-master", "numpy")
    assert benchprofile.profile_recipes(("bf16-master [numpy-f32]",), batch=4, steps=1, warmup=0)["recipes"][
        "bf16-master [numpy-f32]"]["backend"] == "numpy-f32"


def test_hook_removed_and_table_printed(prof):
    res = benchprofile.profile_recipes(("fp16-dynamic",), batch=4, steps=2, warmup=1)
    assert sys.getprofile() is None
    text = benchprofile.format_profile(res)
    for c in benchprofile.TIME_CATEGORIES:
        assert c in text
    assert "fp16-dynamic [numpy-f32] share" in benchprofile.format_profile(prof)
    assert "100.0%" in text


def test_tiny_gpt_profile(prof):
    """The tiny GPT's step per recipe, printed after the MLP's: the recipes that quantize their
    GEMM operands (fp8, block formats) spend time in ``quantize``; the others none."""
    g = prof["gpt"]
    assert g["model"].startswith("tiny GPT") and list(g["recipes"]) == list(benchprofile.GPT_COLUMNS)
    for r, p in g["recipes"].items():
        assert math.isclose(sum(p["shares"].values()), 1.0, rel_tol=1e-9)
        assert (p["seconds"]["quantize"] > 0) == (r in ("fp8-delayed", "mxfp8", "nvfp4")), r
        assert p["seconds"]["optimizer"] > 0 and p["seconds"]["python"] > 0
    text = benchprofile.format_profile(prof)
    assert "tiny GPT" in text and "mxfp8 share" in text and "quantize" in text


def test_compiled_share_seen_where_the_compiled_path_runs():
    """With numba the fp16 step's roundings and exact matmul run compiled kernels: their time is
    ``compiled`` (non-zero), the kernels are numba's own again after the profile, and the hook saw
    a kernel's call (a shim around it) charge the caller nothing; with the path off, 0."""
    pytest.importorskip("numba")
    from fpsim.numerics import compiled
    from fpsim.numerics.compiled import _round

    kernel = _round.f16_bits
    with compiled.use_compiled(True):
        on = benchprofile.profile_recipes(("fp16-dynamic",), batch=128, steps=2, warmup=1)["recipes"]["fp16-dynamic"]
    assert on["seconds"]["compiled"] > 0 and on["seconds"]["rounding"] > 0
    assert _round.f16_bits is kernel and hasattr(kernel, "py_func")
    with compiled.use_compiled(False):
        off = benchprofile.profile_recipes(("fp16-dynamic",), batch=128, steps=2, warmup=1)["recipes"]["fp16-dynamic"]
    assert off["seconds"]["compiled"] == 0 and off["seconds"]["rounding"] > 0
    assert "compiled" in benchprofile.format_profile({"model": "m", "recipes": {"fp16-dynamic": on}})


def test_a_kernel_call_is_charged_to_compiled_inside_a_leaf():
    """The hook on its own: a kernel shim called from inside a rounding (a leaf) is ``compiled``,
    the rest of the rounding stays ``rounding``."""
    import time

    seen = {}

    def kernel():
        time.sleep(0.02)  # one call the hook sees (a busy loop of clock reads would be the hook's own time)

    shim = benchprofile._shim(kernel)

    def rounding():
        shim()

    prof = benchprofile._Profiler()
    prof.codes[rounding.__code__] = "rounding"
    prof.run(rounding, 1)
    seen.update(prof.acc)
    assert seen["compiled"] >= 0.015 and seen["rounding"] < seen["compiled"]
