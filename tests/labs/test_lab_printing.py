"""What the labs print for a person to read fits in 100 characters a line (JupyterLab wraps a
longer line mid-word and mid-number): the formats table of lab 01, the tracer's account in labs
09 and 14, a check's verdict, the summary of a lab's checks and the prediction table - each run
here on the cases that make them longest, and each still saying everything its one-line or
full-width form says."""

import numpy as np
import pytest

import fpsim
from fpsim.formats.listing import FORMAT_COLUMNS, format_rows, format_tables
from fpsim.labs import expect, selfcheck, summary
from fpsim.labs.predict import revisit
from fpsim.tensor import tensor

WIDTH = 100


def _lines(text: str) -> list[str]:
    return text.splitlines()


@pytest.mark.parametrize("include_all", [False, True])
def test_the_formats_table_fits_and_keeps_every_cell(include_all):
    """format_tables splits fpsim formats' table by columns: every line within 100 characters,
    every column header and every cell of format_rows still there, whole."""
    text = format_tables(include_all)
    assert max(len(line) for line in _lines(text)) <= WIDTH
    parts = text.split("\n\n")
    assert len(parts) >= 2 and all(p.splitlines()[0].startswith("format ") for p in parts)
    headers = " ".join(p.splitlines()[0] for p in parts)
    assert all(h in headers for h in FORMAT_COLUMNS)
    for row, *rest in zip(format_rows(include_all), *(p.splitlines()[2:] for p in parts)):
        joined = "  ".join(rest)
        assert all(cell in joined for cell in row), row


def test_the_tracer_report_fits_and_the_one_line_form_stays():
    x = tensor(np.array([0.5, 100.0, -200.0, 1.0]), "float16", requires_grad=True)
    with fpsim.trace_nonfinite() as t:
        ((x * 0.5 + 1.0) * 2000.0).exp().sum()
    nf = t.first_nonfinite()
    assert len(str(nf)) > 300 and "\n" not in str(nf)  # the form a table cell and --json read
    report = nf.report()
    assert max(len(line) for line in _lines(report)) <= WIDTH and len(_lines(report)) >= 5


def test_lab14s_runs_report_in_lines_that_fit():
    from fpsim.labs.nanhunt import hunt_run, raw_regression

    x, y = raw_regression()
    nf = hunt_run(x, y, loss_format="float16").tracer.first_nonfinite()
    assert nf.op == "mse_loss" and max(len(line) for line in _lines(nf.report())) <= WIDTH


def test_a_verdict_the_summary_and_the_prediction_table_fit(capsys):
    def exercise1(v):
        return v * 3.0

    why = "a reason long enough to need two lines: " + " ".join(f"{2.0**-k!r}" for k in range(10, 22))
    selfcheck("Try it 1", lambda: expect(exercise1, np.float32(0.1), want=np.float32(0.2), why=why), lab=13)
    selfcheck("Try it 2", lambda: None, lab=13)
    summary(13)
    revisit({"float64 -> float32 rounded to odd -> bfloat16 always equals float64 -> bfloat16, whatever x is": True,
             "short": None},
            {"float64 -> float32 rounded to odd -> bfloat16 always equals float64 -> bfloat16, whatever x is": True,
             "short": "7%"})
    out = capsys.readouterr()
    text = out.out + out.err
    assert "not right yet" in out.err and "lab 13: 1 of 3 checks passed" in text and "1 of 1 guesses right" in text
    assert max(len(line) for line in _lines(text)) <= WIDTH
    assert "9.5367431640625e-07" in text  # wrapped between numbers, never inside one
