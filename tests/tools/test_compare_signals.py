"""``fpsim compare`` (and the tool commands) stopped by SIGINT or SIGTERM outside the runs (the runs' own stop, with the
finished runs' table, is tests/experiments/test_compare_jobs.py's): one line saying what was
complete, the exit status 128 + the signal, no traceback, nothing half-written left behind."""

import os
import signal
import time

import pytest

from fpsim.tools import cli


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_the_figure_is_written_keeps_the_table_and_says_so(signum, tmp_path, monkeypatch, capsys):
    real = cli._compare_figure

    def stopped(*args, **kw):  # the signal arrives while the figure is being drawn and written
        os.kill(os.getpid(), signum)
        time.sleep(1.0)  # the handler raises here, in the main thread
        return real(*args, **kw)

    monkeypatch.setattr(cli, "_compare_figure", stopped)
    before = signal.getsignal(signal.SIGTERM)
    rc = cli.main(["compare", "--recipes", "fp32", "bf16-pure", "--steps", "2", "--quiet",
                   "--figure", str(tmp_path / "f.png")])
    out, err = capsys.readouterr()
    assert rc == 128 + signum
    assert "\nfp32 " in out and "\nbf16-pure " in out  # the table was printed before the figure
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (f"fpsim compare: stopped by {signal.Signals(signum).name} after all 2 "
                                            "runs, while the figure was written: the results above are complete, "
                                            "no figure")
    assert list(tmp_path.iterdir()) == []  # neither the figure nor its temporary
    assert signal.getsignal(signal.SIGTERM) is before  # the handlers are restored


def test_a_signal_before_any_run_is_one_line(monkeypatch, capsys):
    from fpsim import experiments

    def stopped(*args, **kw):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1.0)

    monkeypatch.setattr(experiments, "compare_seeds", stopped)
    rc = cli.main(["compare", "--recipes", "fp32", "--steps", "2", "--quiet"])
    out, err = capsys.readouterr()
    assert rc == 143 and out == "" and "Traceback" not in err
    assert err.strip().splitlines()[-1] == "fpsim compare: stopped by SIGTERM before any run finished"


@pytest.mark.parametrize("seeds", [None, ["0"]])
def test_a_signal_during_the_runs_with_json_prints_the_finished_runs_as_json(seeds, monkeypatch, capsys):
    """The runs' stop with --json: one object with the finished runs as a whole run prints them, and
    what did not finish (issue 42: it printed nothing, losing the finished numbers)."""
    import json

    from fpsim.experiments import executors

    real, calls = executors.run_spec, []

    def second_stopped(spec, *args, **kw):  # SIGINT arrives during the second run
        calls.append(spec)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1.0)
        return real(spec, *args, **kw)

    monkeypatch.setattr(executors, "run_spec", second_stopped)
    opts = ["--recipes", "fp32", "bf16-pure", "--steps", "3", "--quiet", "--figure", "none", "--json"]
    rc = cli.main(["compare", *opts, *(["--seeds", *seeds] if seeds else [])])
    out, err = capsys.readouterr()
    assert rc == 130 and "Traceback" not in err
    got = json.loads(out)
    runs = got["runs"]["0"] if seeds else got["runs"]
    assert got["stopped"] == "stopped by SIGINT after 1 of 2 runs" and got["not_finished"] == ["bf16-pure (seed 0)"]
    monkeypatch.setattr(executors, "run_spec", real)
    whole = json.loads(cli.main(["compare", *opts, "--recipes", "fp32"]) == 0 and capsys.readouterr().out)
    assert list(runs) == ["fp32"]
    assert runs["fp32"].pop("seconds") > 0 and whole["fp32"].pop("seconds") > 0
    assert runs["fp32"] == whole["fp32"]  # the numbers an unstopped run prints
    assert len(runs["fp32"]["losses"]) == 3


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_tool_command_that_does_not_report_a_stop_itself_is_one_line(signum, monkeypatch, capsys, tmp_path):
    """audit, bench, bits, gpu-check and labs run inside catalogue.stoppable: SIGTERM killed
    gpu-check --stand-in silently (exit 143, no word) and Ctrl-C was a KeyboardInterrupt traceback."""
    from fpsim.tools import audit

    def stopped(args):
        os.kill(os.getpid(), signum)
        time.sleep(1.0)  # the handler raises here, in the main thread
        return 0

    monkeypatch.setattr(audit, "main", stopped)
    before = signal.getsignal(signal.SIGTERM)
    rc = cli.main(["audit", str(tmp_path / "grads.npz")])
    assert rc == 128 + signum
    assert capsys.readouterr().err == f"fpsim audit: stopped by {signal.Signals(signum).name}\n"
    assert signal.getsignal(signal.SIGTERM) is before
