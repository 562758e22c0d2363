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


def test_a_verdict_the_summary_and_the_prediction_table_fit(capsys, monkeypatch):
    from fpsim.labs import checks

    monkeypatch.setattr(checks, "_RECORD", checks._Record())  # this test's verdicts stay its own

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


def _cells(table_lines: list[str]) -> list[str]:
    """The cells of a text table's lines (columns two or more spaces apart), headers included."""
    import re

    return [c for line in table_lines if not set(line) <= {"-", " "} for c in re.split(r"\s{2,}", line.strip()) if c]


def test_the_recipe_table_narrow_for_the_labs_keeps_every_cell_and_word():
    """format_table(width=100), what the labs print: every line within 100 characters, each split
    part starting with the recipe, and the same cells and words as fpsim compare's wide table, which
    itself stays as it was (one table, wider than 100 here)."""
    from helpers import small_task

    from fpsim.experiments import format_table
    from fpsim.labs import runs

    res = runs.side_by_side(["fp32", "fp16-pure", "fp16-master", "fp16-dynamic"], small_task(), steps=3)
    wide, narrow = format_table(res), format_table(res, width=WIDTH)
    assert max(len(line) for line in _lines(wide)) > WIDTH  # the case that needs the narrow form
    assert max(len(line) for line in _lines(narrow)) <= WIDTH
    n = len(res) + 2
    wide_table, narrow_tables = _lines(wide)[:n], narrow.split("\n\n")
    parts = [p.splitlines()[:n] for p in narrow_tables if p.startswith("recipe")]
    assert len(parts) >= 2 and all(p[0].startswith("recipe ") for p in parts)
    for name in res:  # each row named in each part, with the cells of its wide row
        wide_row = next(line for line in wide_table if line.startswith(name + " "))
        got = [c for p in parts for line in p if line.startswith(name + " ") for c in _cells([line])[1:]]
        assert got == _cells([wide_row])[1:], name
    narrow_lines = _lines(narrow)
    last = max(i for i, line in enumerate(narrow_lines) if line.startswith("recipe ")) + n
    assert " ".join(narrow_lines[last:]).split() == " ".join(_lines(wide)[n:]).split()  # notes, legend: every word
    assert "where it went wrong:" in narrow and "diverged at step 0" in narrow
    with pytest.raises(ValueError, match="width"):
        format_table(res, width=10)


@pytest.mark.parametrize("x", [1.0, np.pi, 2.0**-24, 1.0251998901367188e-05, -65504.0, 5e-324, float("nan")])
def test_the_bit_rows_fit_and_keep_the_formula(x):
    """bits.show: a row whose formula would pass 100 characters puts it on the next lines; the
    pattern, hex and the decoded value are all still there, unbroken."""
    from fpsim.labs import bits

    formats = ("float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")
    text = bits.show(x, formats=formats)
    assert max(len(line) for line in _lines(text)) <= WIDTH
    for fmt in formats:
        fb = bits.fields(x, fmt)
        assert fb.bit_string in text and fb.hex in text
        assert " ".join(fb.formula().split()) in " ".join(str(fb).split())
        assert repr(fb.value) in str(fb) or fb.category not in ("normal", "subnormal")


def test_lab05s_survival_table_and_the_memory_table_fit():
    """capture_totals (lab 05's per-format flush table, four formats) and memory_table: within 100
    characters, and each format's flushed share still the one counted here from the gradients."""
    from helpers import small_task

    from fpsim import nn
    from fpsim.capture import capture_gradients
    from fpsim.labs.gradients import capture_totals
    from fpsim.labs.memory import memory_table

    task = small_task()
    x = task.data()
    formats = ["float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"]
    cap = capture_gradients(task.model(0), nn.mse_loss, x, x, formats=formats)
    text = capture_totals(cap, layers=True)
    assert max(len(line) for line in _lines(text)) <= WIDTH
    nz = np.concatenate([v.ravel() for k, v in cap.grads.items() if k[1] == "activation"])
    nz = nz[nz != 0].astype(np.float64)
    for fmt in formats:
        flushed = 100 * np.mean(fpsim.round_to(nz, fmt) == 0)
        row = next(line for part in text.split("\n\n") if fmt in part.splitlines()[0]
                   for line in part.splitlines() if line.startswith("activation gradients, all layers"))
        assert f"{flushed:.1f}%" in row or (flushed == 0 and " 0% /" in row) or (flushed == 100 and "100% /" in row), fmt
    table = memory_table(n_params=7e9)
    assert max(len(line) for line in _lines(table)) <= WIDTH and "7B params" in table and "112 GB" in table


def test_wrapped_breaks_sentences_between_words_and_leaves_tables():
    from fpsim.labs.printing import wrapped

    note = "the baseline fp32 died at step 3: the ratios stop there; " * 4 + str(2.0**-30)
    table = "recipe        final loss            vs fp32" + " " * 60 + "x"
    text = wrapped([note, "  " + note, table])
    lines = _lines(text)
    assert all(len(line) <= WIDTH for line in lines if line != table) and table in lines
    assert " ".join(text.split()) == " ".join(f"{note} {note} {table}".split())
    assert str(2.0**-30) in text and lines[1].startswith("  ") and lines[len(lines) // 2].startswith("  ")


def test_a_printed_table_is_split_by_its_rule_as_the_cells_would_be():
    """split_table_text (what wrapped() does to the monitor's and the fp8 scale tables in labs 08
    and 12) gives the parts split_table makes from the cells themselves, right alignment kept;
    the title and the text after the table pass through, and a table that fits is left alone."""
    from fpsim.experiments.report import split_table, split_table_text
    from fpsim.labs.printing import wrapped
    from fpsim.textable import text_table

    cols = ["tensor", "format", "scale", "saturated (last step)", "flushed to 0 (last step)", "saturated (all)",
            "flushed (all)"]
    rows = [["6.input", "float8_e4m3fn", "2^9", "0", "0", "0", "55 (0.00%)"],
            ["", "float8_e5m2", "2^33", "12", "0", "1 (0.00%)", "0"]]
    right = range(2, len(cols))
    text = "\n".join(["a title", *text_table(cols, rows, right=right), "", "what the columns mean"])
    assert max(len(line) for line in _lines(text)) > 80
    split = split_table_text(text, 80)
    assert _lines(split) == ["a title", *split_table(cols, rows, 80, right=right), "", "what the columns mean"]
    assert max(len(line) for line in _lines(split)) <= 80 and split_table_text(text, 200) == text
    assert wrapped(text, 80) == split
