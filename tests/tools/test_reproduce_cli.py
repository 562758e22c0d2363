"""``fpsim reproduce`` as a user meets it: where its output goes (checked before any run), what it
refuses (in one line, exit 2), what ``--json`` and ``--jobs`` do for one finding and for the
catalogue, and what SIGINT / SIGTERM leave (the finished runs or findings reported, the partial
table written, exit 128 + the signal) - the last in real processes, signalled as a user would."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.reference_runs import quick_run

from fpsim.experiments import findings
from fpsim.experiments.findings import runner, table
from fpsim.tools import catalogue, reproduce
from fpsim.tools.cli import main as cli

# quick ones: a sampling finding (a measurement, about 1 s) and a training one (a sweep of two runs)
TWO = ("nvfp4-rounding", "fp4-sqrt3-rule")
SWEEP = "mx-layernorm-instability"  # the quickest finding with runs: 4 runs quick, 12 (3 seeds) full
MEASURE = "nvfp4-four-over-six"  # trains nothing


@pytest.fixture
def two_findings(monkeypatch):
    two = [findings.FINDINGS[n] for n in TWO]
    monkeypatch.setattr(findings, "catalogue", lambda: two)
    monkeypatch.setattr(table, "catalogue", lambda: two)  # bound when table.py was first imported
    return TWO


@pytest.fixture
def no_runs(monkeypatch):
    """Any run started is a failure: what is refused must be refused before the work."""

    def fail(*a, **kw):
        raise AssertionError("a run started although the arguments were refused")

    monkeypatch.setattr(catalogue, "run_every", fail)
    monkeypatch.setattr(runner, "reproduce", fail)


def _args(**kw):
    base = {"name": None, "list": False, "quick": True, "seeds": [0], "json": False, "figure": "none",
            "table": None, "all": False, "jobs": 1}
    base.update(kw)
    return argparse.Namespace(**base)


# ---- where the figure and the table go -------------------------------------------------------------

def test_figure_into_a_folder_draws_name_png_inside_it(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "figs").mkdir()
    assert reproduce.main(_args(name=MEASURE, figure="figs")) == 0
    assert (tmp_path / "figs" / f"{MEASURE}.png").stat().st_size > 1000
    assert not (tmp_path / "figs.png").exists()  # once written beside the folder
    assert f"figure: figs/{MEASURE}.png" in capsys.readouterr().err
    assert reproduce.main(_args(name=MEASURE, figure="new/")) == 0  # a folder to be made
    assert (tmp_path / "new" / f"{MEASURE}.png").is_file()
    assert reproduce.main(_args(name=MEASURE, figure="plain")) == 0  # no suffix: a PNG file
    assert (tmp_path / "plain.png").is_file()


def test_a_figure_that_cannot_be_written_is_refused_before_the_runs(tmp_path, capsys, no_runs):
    assert reproduce.main(_args(name=SWEEP, figure=str(tmp_path / "f.xyz"))) == 2
    assert "--figure" in capsys.readouterr().err
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert reproduce.main(_args(name=SWEEP, figure=str(afile / "f.png"))) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--figure {afile / 'f.png'}: {afile} is a file, not a folder" in err


def test_every_finding_figures_name_a_folder_with_all_and_with_table(two_findings, tmp_path, capsys, no_runs):
    for mode in ({"all": True}, {"table": str(tmp_path / "t.md")}):
        assert reproduce.main(_args(figure=str(tmp_path / "one.png"), **mode)) == 2
        assert "with --all or --table it names a folder" in capsys.readouterr().err
    assert not (tmp_path / "one.png").exists()


def test_table_with_figure_draws_every_figure_into_the_folder(two_findings, tmp_path, capsys):
    page, figs = tmp_path / "t.md", tmp_path / "figs"
    assert reproduce.main(_args(table=str(page), figure=str(figs))) == 0
    assert sorted(p.name for p in figs.iterdir()) == sorted(f"{n}.png" for n in TWO)
    assert sum(line.startswith("| `") for line in page.read_text().splitlines()) == 2


@pytest.mark.parametrize("where, says", [
    ("{tmp}", "is a folder; name the Markdown file to write"),
    ("{tmp}/", "is a folder"),
    ("{tmp}/missing/t.md", "the folder {tmp}/missing does not exist"),
    ("{tmp}/afile/t.md", "{tmp}/afile is a file, not a folder"),
    ("/proc/fpsim-findings.md", "cannot write into /proc"),
])
def test_a_table_that_cannot_be_written_is_refused_before_any_run(where, says, tmp_path, capsys, no_runs):
    (tmp_path / "afile").write_text("x")
    assert reproduce.main(_args(table=where.format(tmp=tmp_path))) == 2
    err = capsys.readouterr().err
    assert err.startswith("fpsim reproduce: error: --table ") and err.count("\n") == 1
    assert says.format(tmp=tmp_path) in err


# ---- what is refused, and what --json and --jobs do ------------------------------------------------

@pytest.mark.parametrize("mode", [{"all": True}, {"table": "t.md"}])
def test_a_name_with_all_or_table_is_refused(mode, capsys, no_runs):
    assert reproduce.main(_args(name=SWEEP, **mode)) == 2
    err = capsys.readouterr().err
    assert "give a finding's name or --" in err and "not both" in err and err.count("\n") == 1


def test_bad_seeds_name_the_option(capsys, no_runs):
    with pytest.raises(SystemExit) as e:
        cli(["reproduce", SWEEP, "--quick", "--seeds", "-1"])
    assert e.value.code == 2
    assert "argument --seeds: a seed is a whole number >= 0, got '-1'" in capsys.readouterr().err
    for seeds, says in (([-1], "--seeds: a seed is a whole number >= 0, got -1"), ([0, 0], "--seeds repeats a seed")):
        assert reproduce.main(_args(name=SWEEP, seeds=seeds)) == 2
        assert says in capsys.readouterr().err
    with pytest.raises(ValueError, match="seeds must be distinct integers >= 0"):  # the cause: the record's rule
        findings.FINDINGS[SWEEP].seeds_for(True, (-1,))


def test_json_with_all_and_table_is_one_object_with_every_result(two_findings, tmp_path, capsys):
    serial = {n: quick_run(n) for n in TWO}  # reproduce(True, (0,)), made once in the session
    for mode in ({"all": True}, {"table": str(tmp_path / "t.md")}):
        assert reproduce.main(_args(json=True, **mode)) == 0
        got = json.loads(capsys.readouterr().out)  # the whole of stdout: no text beside it
        assert got["stopped"] is None and got["quick"] is True and list(got["findings"]) == list(TWO)
        for name in TWO:
            assert got["findings"][name]["numbers"] == serial[name].numbers
            assert got["findings"][name]["verdict"] == serial[name].verdict
    assert (tmp_path / "t.md").is_file()


def test_one_findings_runs_on_jobs_workers_give_the_serial_numbers(capsys):
    assert reproduce.main(_args(name=SWEEP, json=True)) == 0
    serial = json.loads(capsys.readouterr().out)
    assert reproduce.main(_args(name=SWEEP, json=True, jobs=2)) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["numbers"] == serial["numbers"]  # the same bits
    assert "4 runs on 2 worker processes" in out.err and "done (4 of 4 runs)" in out.err
    assert reproduce.main(_args(name=MEASURE, jobs=2)) == 0  # a measurement: said, and run here
    assert f"{MEASURE} trains nothing: its measurement runs here (--jobs / --scheduler do not apply)" \
        in capsys.readouterr().err


def test_jobs_with_a_scheduler_is_refused(capsys, no_runs):
    for mode in ({"name": SWEEP}, {"all": True}):
        assert reproduce.main(_args(jobs=2, scheduler="tcp://127.0.0.1:1", **mode)) == 2
        assert "--jobs does not apply with --scheduler" in capsys.readouterr().err


def test_help_says_what_figure_json_and_jobs_mean(capsys):
    with pytest.raises(SystemExit):
        cli(["reproduce", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "a folder: NAME.png in it" in text and "with --all or --table: the folder" in text
    assert "one finding's runs" in text and "every finding's result in it" in text


# ---- SIGINT and SIGTERM, in real processes --------------------------------------------------------

def _started(args, cwd, script=None):
    cmd = [sys.executable, "-c", script, *args] if script else [sys.executable, "-m", "fpsim.tools.cli", *args]
    root = str(Path(__file__).resolve().parents[2])  # this checkout's fpsim, whatever is installed
    return subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": root})


def _stop_when(proc, stream, seen, signum):
    """Read ``stream`` line by line until ``seen(line)``; then send ``signum``; (rc, stdout, stderr)."""
    lines = []
    for line in iter(getattr(proc, stream).readline, ""):
        lines.append(line)
        if seen(line):
            break
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)  # also waits for every worker (they hold the pipes)
    if stream == "stdout":
        out = "".join(lines) + out
    else:
        err = "".join(lines) + err
    return proc.returncode, out, err


@pytest.mark.parametrize("signum, jobs", [(signal.SIGINT, "1"), (signal.SIGTERM, "1"), (signal.SIGINT, "2")])
def test_a_signal_during_one_finding_reports_its_finished_runs(signum, jobs, tmp_path):
    """Full runs (12 of 100 steps): the signal comes once the first run is back."""
    proc = _started(["reproduce", SWEEP, "--figure", "none", "--jobs", jobs], tmp_path)
    back = "seed 1: 100 steps" if jobs == "1" else "done (1 of 12 runs)"
    rc, out, err = _stop_when(proc, "stderr", lambda line: back in line, signum)
    name = signal.Signals(signum).name
    assert rc == 128 + signum, err
    assert "Traceback" not in err and "  verdict:  " not in out  # no verdict from part of the runs
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"fpsim reproduce: {SWEEP}: stopped by {name} after ") and last.endswith(" of 12 runs")
    finished = int(last.split(" after ")[1].split()[0])
    assert finished >= 1 and f"{SWEEP}: {finished} of 12 runs finished (no verdict" in out
    assert out.count(", final loss ") == finished


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_a_measurement_is_one_line(signum, tmp_path):
    """Right after the first progress line (imports, the measurement): no KeyboardInterrupt traceback."""
    proc = _started(["reproduce", MEASURE, "--figure", "none"], tmp_path)
    rc, out, err = _stop_when(proc, "stderr", lambda line: True, signum)
    assert rc == 128 + signum, err
    assert err.strip().splitlines()[-1] == \
        f"fpsim reproduce: {MEASURE}: stopped by {signal.Signals(signum).name} during its measurement"
    assert "Traceback" not in err and out == ""


def test_a_signal_inside_a_finaliser_is_raised_once_out_of_it():
    """Python drops an exception raised in a ``__del__`` (numba's and llvmlite's objects have them):
    the stop comes, with its signal, as soon as the finaliser is done."""
    import time

    class SignalsWhenCollected:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGTERM)
            sum(range(1000))  # the handler runs here, inside the finaliser

    with pytest.raises(catalogue.Signalled) as e:
        with catalogue.stop_on_signals():
            SignalsWhenCollected()
            time.sleep(5)  # interrupted within 50 ms
    assert e.value.signum == signal.SIGTERM


# the catalogue cut to TWO (as the fixture above does), then the command line the test gives
TWO_FINDINGS = textwrap.dedent(f"""
    import sys
    from fpsim.experiments import findings
    from fpsim.experiments.findings import table
    two = [findings.FINDINGS[n] for n in {TWO!r}]
    findings.catalogue = table.catalogue = lambda: two
    from fpsim.tools.cli import main
    sys.exit(main(sys.argv[1:]))
""")


def test_sigterm_during_all_exits_143_with_the_finished_findings_printed(tmp_path):
    proc = _started(["reproduce", "--all", "--quick", "--figure", "none"], tmp_path, TWO_FINDINGS)
    rc, out, err = _stop_when(proc, "stdout", lambda line: line.startswith("  verdict:"), signal.SIGTERM)
    assert rc == 143, err
    assert out.startswith(f"{TWO[0]} (quick), seeds 0:") and out.count("verdict:") == 1
    assert err.strip().splitlines()[-1] == \
        "fpsim reproduce: stopped by SIGTERM after 1 of 2 findings (their results are above)"


def test_sigint_during_table_writes_the_finished_findings_marked_partial(tmp_path):
    page = tmp_path / "findings.md"
    page.write_text("the old table\n")
    proc = _started(["reproduce", "--table", str(page), "--quick"], tmp_path, TWO_FINDINGS)
    first_done = tuple(f"fpsim reproduce: {TWO[0]}: {v} (" for v in findings.VERDICTS)
    rc, out, err = _stop_when(proc, "stderr", lambda line: line.startswith(first_done), signal.SIGINT)
    partial = tmp_path / "findings.partial.md"
    assert rc == 130, err
    assert err.strip().splitlines()[-1] == (f"fpsim reproduce: stopped by SIGINT after 1 of 2 findings; the findings "
                                            f"that finished are in {partial} ({page} unchanged)")
    assert page.read_text() == "the old table\n"
    text = partial.read_text()
    assert "**Partial**: stopped by SIGINT after 1 of 2 findings" in text
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert rows[0].startswith(f"| `{TWO[0]}` ") and any(f"**{v}**: " in rows[0] for v in findings.VERDICTS)
    assert rows[1].startswith(f"| `{TWO[1]}` ") and "| not run: stopped | - | - |" in rows[1]


# -- --list with --json and with NAME (issue 42: --json printed text, NAME was ignored) -------------

def test_list_json_is_one_object_with_every_finding_in_the_text_lists_order(capsys):
    assert cli(["reproduce", "--list"]) == 0
    text = [ln.split()[0] for ln in capsys.readouterr().out.splitlines()]
    assert cli(["reproduce", "--list", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["findings"]
    assert [f["name"] for f in got] == text and len(text) == len(findings.FINDINGS)
    one = next(f for f in got if f["name"] == "tensor-core-accumulation")
    assert one["source"] == "arXiv 2412.19437 (DeepSeek-V3); arXiv 2511.10909 (MMA-Sim)" and one["available"] is True
    assert (one["seconds_quick"], one["seconds_full"]) == (1.0, 3.0)  # "about 1 s quick, 3 s full" in the text


def test_list_with_a_name_lists_that_one_and_an_unknown_name_is_refused(capsys):
    assert cli(["reproduce", "--list", "tensor-core-accumulation"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith("tensor-core-accumulation    Hopper fp8 tensor cores truncate")
    assert cli(["reproduce", "--list", "nosuch"]) == 2
    assert capsys.readouterr().err.startswith("fpsim reproduce: error: unknown finding 'nosuch'; known: fp16-loss")
