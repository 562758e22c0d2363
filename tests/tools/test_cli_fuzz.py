"""Property tests of the ``fpsim`` command: random command lines built from the parser's own
options and a pool of good and bad values never crash (exit 0 or 2, no traceback, one error line,
no .tmp left behind), and every command that writes JSON writes strict JSON."""

from __future__ import annotations

import contextlib
import io
import json
import os
import warnings

import numpy as np
import pytest

from fpsim.tools import cli

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

FUZZ = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _options(parser):
    """Every option string of a (sub)parser, with how many values it takes."""
    out = []
    for a in parser._actions:
        if a.option_strings and "-h" not in a.option_strings:
            out.append((a.option_strings[-1], a.nargs, a.choices))
    return out


VALUES = ["1", "0", "-1", "-1e-8", "1e-8", "3", "nan", "inf", "-inf", "1e400", "fp16", "e4m3", "fp17", "bf16,fp16",
          "fp32", "x", "", "2", "1024", "numpy", "cupy", "none", "--", "-", "0x10", "1_000", " 5", "5e-324", "1e300",
          "3.4e38", "-1e-45", "65504"]


def run_main(argv, cwd):
    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            if argv and argv[0] in ("formats", "example"):
                warnings.simplefilter("error", RuntimeWarning)  # no numpy warning may leak into their output
            try:
                rc = cli.main(argv)
            except SystemExit as e:  # argparse: usage errors (2) and --help (0)
                rc = e.code
    finally:
        os.chdir(old)
    return rc, out.getvalue(), err.getvalue()


def _argv(data, command, parser, extra_values=()):
    opts = _options(parser) + [("--bogus", None, None)]
    argv = [command]
    for _ in range(data.draw(st.integers(0, 4), label="n options")):
        opt, nargs, choices = data.draw(st.sampled_from(opts), label="option")
        argv.append(opt)
        if nargs == 0:
            continue
        pool = list(choices or []) + VALUES + list(extra_values)
        n = 1 if nargs is None else data.draw(st.integers(1 if nargs == "+" else 0, 3), label="n values")
        argv += [str(data.draw(st.sampled_from(pool), label="value")) for _ in range(n)]
    return argv


def _check_run(rc, out, err, cwd):
    assert rc in (0, 2), (rc, err)
    assert "Traceback" not in err and "Traceback" not in out
    if rc == 2:
        lines = [ln for ln in err.strip().splitlines() if ln]
        assert lines and (lines[-1].startswith("fpsim") or lines[0].startswith("usage:")), err
    leftovers = [p for p in os.listdir(cwd) if p.endswith(".tmp")]
    assert not leftovers, leftovers


SUBPARSERS = {name: p for name, p in cli.build_parser(None)._subparsers._group_actions[0].choices.items()}


@settings(FUZZ, max_examples=150)
@given(data=st.data())
def test_cli_formats_and_example_never_crash(tmp_path, data):
    command = data.draw(st.sampled_from(["formats", "example"]), label="command")
    argv = _argv(data, command, SUBPARSERS[command])
    rc, out, err = run_main(argv, tmp_path)
    _check_run(rc, out, err, tmp_path)


@pytest.fixture(scope="module")
def audit_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("audit")
    np.savez(tmp / "g.npz", g=np.float32([1e-8, 1e-3, 1.0, 3e5]), i=np.arange(3))
    np.savez(tmp / "nan.npz", g=np.float32([np.nan, np.inf]))
    (tmp / "junk.npz").write_bytes(b"PK\x03\x04 nonsense")
    (tmp / "dir.npz").mkdir()
    return tmp


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_cli_audit_never_crashes_and_json_is_strict(audit_dir, data):
    files = ["g.npz", "nan.npz", "junk.npz", "dir.npz", "missing.npz", "g.txt"]
    argv = _argv(data, "audit", SUBPARSERS["audit"], extra_values=["g.png", "sub/x.png", "x.svg", "x.unknown"])
    argv.insert(1, data.draw(st.sampled_from(files), label="file"))
    if "--out" not in argv:
        argv.append("--no-figure")  # drawing is slow: only where --out asks for it
    rc, out, err = run_main(argv, audit_dir)
    _check_run(rc, out, err, audit_dir)
    if "--json" in argv and out.strip():
        json.loads(out, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))


@pytest.mark.slow
@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_cli_compare_never_crashes(tmp_path, data):
    argv = _argv(data, "compare", SUBPARSERS["compare"], extra_values=["fp16-pure", "bf16-pure"])
    # keep each run short: at most 2 steps, at most 2 recipes, no figure
    argv = [a for a in argv if a not in ("--steps", "--seeds", "--recipes", "--figure")]
    argv += ["--steps", data.draw(st.sampled_from(["1", "2", "0", "-1", "x"])), "--figure", "none", "--quiet",
             "--recipes", *data.draw(st.lists(st.sampled_from(["fp32", "fp16-pure", "nope"]), min_size=1,
                                              max_size=2, unique=True))]
    rc, out, err = run_main(argv, tmp_path)
    _check_run(rc, out, err, tmp_path)
    if rc == 0 and "--json" in argv:
        json.loads(out, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))


def _strict(text):
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))


def test_every_command_that_writes_json_writes_strict_json(tmp_path, audit_dir):
    rc, out, err = run_main(["audit", "g.npz", "--json", "--no-figure"], audit_dir)
    assert rc == 0, err
    assert _strict(out)["overall"]["n"] == 4
    rc, out, err = run_main(["audit", "nan.npz", "--json"], audit_dir)
    assert rc == 2 and _strict(out)["nothing_to_judge"]
    with np.errstate(all="ignore"):
        rc, out, err = run_main(["compare", "--recipes", "fp32", "fp16-pure", "--steps", "2", "--seeds", "0", "1",
                                 "--figure", "none", "--json", "--quiet"], tmp_path)
    assert rc == 0, err
    d = _strict(out)
    assert d["0"]["fp16-pure"]["final_loss"] is None and d["1"]["fp16-pure"]["null_values"]["final_loss"] == "nan"
    rc, out, err = run_main(["bench", "--quick", "--sections", "rounding", "--repeats", "1", "--json", "--quiet"],
                            tmp_path)
    assert rc == 0, err
    assert _strict(out)["rows"] if "rows" in _strict(out) else _strict(out)
    rc, out, err = run_main(["reproduce", "nvfp4-four-over-six", "--quick", "--json", "--figure", "none"], tmp_path)
    assert rc == 0, err
    assert _strict(out)["verdict"] in ("reproduced", "partly", "not at this scale")
    rc, out, err = run_main(["bits", "--items", "arithmetic", "--json"], tmp_path)
    assert rc == 0, err
    assert set(_strict(out)["fingerprints"]) == {"arithmetic"}
    # the commands with a --json option: audit, compare, bench, reproduce, bits (above), gpu-check (below)
    assert {n for n, p in SUBPARSERS.items() if any(a.dest == "json" for a in p._actions)} == \
        {"audit", "compare", "bench", "reproduce", "gpu-check", "bits"}


def test_gpu_check_json_file_is_strict(tmp_path):
    """gpu-check --json PATH: without a GPU it says so; the JSON it writes (if any) is strict and whole."""
    path = tmp_path / "gpu.json"
    rc, out, err = run_main(["gpu-check", "--quick", "--no-task", "--json", str(path)], tmp_path)
    assert rc in (0, 2) and "Traceback" not in err
    if path.exists():
        _strict(path.read_text())
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
