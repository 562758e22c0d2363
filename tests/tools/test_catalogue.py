"""``fpsim reproduce --all / --table --jobs N``: the whole catalogue, serially or with the runs of
every finding on worker processes, gives the same numbers; each figure is drawn in the parent from
the record and the result's plain data; a stop keeps what finished."""

from __future__ import annotations

import argparse
import os
import signal

import pytest
from support.reference_runs import quick_run

from fpsim.experiments import findings
from fpsim.experiments.findings import runner, table
from fpsim.tools import catalogue, reproduce

# quick ones: a sampling finding (a measurement) and a training one (a sweep of two runs)
TWO = ("nvfp4-rounding", "fp4-sqrt3-rule")


@pytest.fixture
def two_findings(monkeypatch):
    two = [findings.FINDINGS[n] for n in TWO]
    monkeypatch.setattr(findings, "catalogue", lambda: two)
    monkeypatch.setattr(table, "catalogue", lambda: two)  # bound when table.py was first imported
    return TWO


def test_workers_give_the_serial_numbers_and_draw_each_figure(two_findings, tmp_path):
    serial = catalogue.run_every(True, (0,), jobs=1)
    lines = []
    parallel = catalogue.run_every(True, (0,), jobs=2, folder=tmp_path, progress=lines.append)
    for name in TWO:
        assert parallel[name].numbers == serial[name].numbers, name  # exact: the same bits
        assert parallel[name].series == serial[name].series, name
        assert (parallel[name].verdict, parallel[name].measured) == (serial[name].verdict, serial[name].measured)
        assert (tmp_path / f"{name}.png").stat().st_size > 1000
    assert "2 findings (2 runs, 1 measurements) on" in lines[0]
    assert any(line.startswith(f"{TWO[0]}: ") for line in lines)


def test_the_runs_of_a_sweep_are_the_pipelines_runs():
    """A sweep finding's runs are RunSpecs for the one trainer: the task and recipes its record
    names, every seed, the mode's steps; a run two sweeps share is planned for each but runs once."""
    f = findings.FINDINGS["fp16-loss-scaling"]
    planned = runner.plan(f, True, (0, 3))
    assert [(rec, spec.seed, spec.steps) for _, rec, spec in planned] == [
        (r, s, 20) for r in ("fp32", "fp16-master", "fp16-dynamic") for s in (0, 3)]
    assert runner.plan(f, False, (0,))[0][2].steps is None  # the task's own (150)
    assert all(type(spec.task).__name__ == "ReferenceTask" for _, _, spec in planned)
    unit = findings.FINDINGS["unit-scaling"]
    assert {name for name, _, _ in runner.plan(unit, True, (0,))} == {"plain", "unit"}  # the tiny GPT: full only
    assert {name for name, _, _ in runner.plan(unit, False, (0,))} == {"plain", "unit", "gpt", "gpt-unit"}


def test_a_stop_keeps_the_findings_that_finished(two_findings):
    def stop_after_the_first(result):
        raise KeyboardInterrupt

    with pytest.raises(catalogue.CatalogueStopped, match="stopped by SIGINT after 1 of 2 findings") as e:
        catalogue.run_every(True, (0,), on_done=stop_after_the_first)
    assert e.value.results[TWO[0]].verdict in findings.VERDICTS and e.value.results[TWO[1]] is None
    assert e.value.signum == signal.SIGINT


def test_sigterm_stops_the_catalogue_as_sigterm(two_findings):
    """SIGTERM between findings is SIGTERM (exit 143 for the CLI), not Ctrl-C's SIGINT (130)."""

    def terminated_after_the_first(result):
        os.kill(os.getpid(), signal.SIGTERM)  # run_every's handler turns it into an exception here

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(catalogue.CatalogueStopped, match="stopped by SIGTERM after 1 of 2 findings") as e:
        catalogue.run_every(True, (0,), on_done=terminated_after_the_first)
    assert e.value.signum == signal.SIGTERM and e.value.results[TWO[0]] is not None
    assert signal.getsignal(signal.SIGTERM) is before  # restored


def _args(**kw):
    base = {"name": None, "list": False, "quick": True, "seeds": [0], "json": False, "figure": "none",
            "table": None, "all": False, "jobs": 1}
    base.update(kw)
    return argparse.Namespace(**base)


def test_the_cli_runs_every_finding_and_writes_the_table(two_findings, tmp_path, capsys):
    assert reproduce.main(_args(all=True, figure=str(tmp_path / "figs"))) == 0
    out = capsys.readouterr().out
    assert all(f"{name} (quick), seeds 0" in out for name in TWO) and "verdict:" in out
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == sorted(f"{n}.png" for n in TWO)
    page = tmp_path / "findings.md"
    assert reproduce.main(_args(table=str(page), jobs=2)) == 0
    assert sum(line.startswith("| `") for line in page.read_text().splitlines()) == 2
    assert reproduce.main(_args(all=True, jobs=0)) == 2
    assert "--jobs must be at least 1, got 0" in capsys.readouterr().err
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert reproduce.main(_args(all=True, figure=str(afile))) == 2
    assert "is a file; with --all or --table it names a folder" in capsys.readouterr().err


def test_a_full_run_uses_the_findings_own_seeds():
    """The training-dynamics findings decide from several seeds unless told otherwise; a quick run
    uses seed 0; seeds given are used as given."""
    import dataclasses

    got = []

    def measure(quick, seeds, progress):
        got.append((quick, seeds))
        return {}

    f = dataclasses.replace(findings.FINDINGS["unit-scaling"], measure=measure, sweep=None, extract=None,
                            verdict=lambda n: ("partly", "r"), measured=lambda n, s: "m")
    f.reproduce(False), f.reproduce(True), f.reproduce(False, [4])
    assert got == [(False, (0, 1, 2)), (True, (0,)), (False, (4,))]
    sweep = findings.FINDINGS["unit-scaling"]
    assert {spec.seed for _, _, spec in runner.plan(sweep, False, sweep.seeds_for(False))} == {0, 1, 2}
    assert findings.FINDINGS["nvfp4-rounding"].seeds_for(False, (5, 6)) == (5,)  # a sampling finding: the first
    dynamics = ("small-scale-proxies", "outliers-and-kurtosis", "unit-scaling", "mx-layernorm-instability",
                "ptq-degrades-with-training")
    assert all(len(findings.FINDINGS[n].seeds) >= 3 for n in dynamics)


def test_the_old_draw_still_draws_with_a_warning(tmp_path):
    r = quick_run("nvfp4-rounding")  # reproduce(True): seed 0, made once in the session
    with pytest.warns(DeprecationWarning, match="save_figure"):
        assert catalogue.draw(r, tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 1000


def test_a_stop_inside_a_findings_sweep_keeps_the_findings_that_finished(two_findings, monkeypatch):
    """Ctrl-C during a sweep's runs (the executors say SweepStopped) stops the catalogue as Ctrl-C
    between findings does."""
    from fpsim.experiments import executors

    def stop_in_the_sweep(spec, *a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(executors, "run_spec", stop_in_the_sweep)
    with pytest.raises(catalogue.CatalogueStopped, match="stopped by SIGINT after 1 of 2 findings") as e:
        catalogue.run_every(True, (0,))
    assert e.value.results[TWO[0]] is not None and e.value.results[TWO[1]] is None
