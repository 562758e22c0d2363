"""``fpsim compare`` stopped by SIGINT or SIGTERM outside the runs (the runs' own stop, with the
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
