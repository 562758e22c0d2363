"""The labs' support code: the self-check helpers (expect, forbid, selfcheck), the bit explorer
(against numpy / ml_dtypes), the memory table, the recipe panels and tables, the classifier and
PyTorch-bridge runs, the lab timer, numpy's BLAS thread count (set_numpy_blas_threads)."""

import math
import sys

import ml_dtypes
import numpy as np
import pytest
from helpers import small_task

import fpsim
from fpsim.examples import smallest_surviving_update
from fpsim.labs import (
    CheckFailed,
    Unanswered,
    expect,
    fail,
    forbid,
    numpy_blas_threads,
    selfcheck,
    set_numpy_blas_threads,
    slider,
    widgets_available,
)
from fpsim.labs.checks import last_verdict, summary, verdicts
from fpsim.labs.explorer import EXPLORER_FORMATS, BitExplorer, explore

# ---------------------------------------------------------------------------- self-checks


def test_expect_passes_and_returns_the_result():
    assert expect(lambda x: x * 2, 3, want=6) == 6
    assert expect(lambda: 0.1 + 0.2, want=0.3, rel=1e-12) == 0.1 + 0.2
    expect(lambda: np.float32([1, 2]), want=np.float32([1, 2]))
    expect(lambda: (1.0, 2), want=(1.0, 2))
    expect(lambda: None, want=None)
    expect(lambda: "zero", want="zero")


@pytest.mark.parametrize("got, want, text", [
    (0.5, 0.25, "expected 0.25, got 0.5"),
    ("normal", "subnormal", "expected 'subnormal', got 'normal'"),
    (2.0, None, "expected None, got 2.0"),
    (np.float64([1, 2]), np.float32([1, 2]), "float32"),
    (np.float32([1, 3, 3]), np.float32([1, 2, 3]), "1 of 3 values differ; at index 1 expected float32(2.0), got float32(3.0)"),
    ([1.0] * 7 + [2.0], [1.0] * 8, "first difference at index 7: expected 1.0, got 2.0"),
    (True, 1, "expected 1, got True"),
])
def test_expect_fails_in_one_line_with_what_was_expected(got, want, text):
    def exercise9(x):
        return got

    with pytest.raises(CheckFailed) as e:
        expect(exercise9, 1.5, want=want, why="the reason")
    msg = str(e.value)
    assert msg.startswith("exercise9(1.5): expected") and text in msg and msg.endswith(" - the reason")
    assert "\n" not in msg


def test_expect_names_an_exception_and_lets_unanswered_through():
    def exercise1():
        return {}["missing"]

    with pytest.raises(CheckFailed, match=r"exercise1\(\): expected 3, but it raised KeyError: 'missing'"):
        expect(exercise1, want=3)

    def unanswered():
        raise Unanswered

    with pytest.raises(Unanswered):
        expect(unanswered, want=3)


def test_forbid_trips_on_the_learners_call_but_not_the_librarys():
    def exercise1(w):
        return float(fpsim.ulp(w, "float16")) / 2  # the learner's own call

    def legit(w):
        return float(smallest_surviving_update(w, "float16"))  # ulp is called inside fpsim

    with pytest.raises(CheckFailed, match=r"it called fpsim\.formats\.round\.ulp, which this exercise asks you to write yourself"):
        expect(exercise1, 1.0, want=2.0**-11, forbid=[fpsim.ulp])
    assert expect(legit, 1.0, want=2.0**-11, forbid=[fpsim.ulp]) == 2.0**-11
    with forbid(fpsim.ulp):
        tripped = fpsim.ulp
    assert fpsim.ulp is fpsim.formats.ulp and tripped is not fpsim.ulp  # restored afterwards
    assert fpsim.ulp(1.0, "float16") == 2.0**-10


def test_forbid_covers_a_method_given_as_class_and_name():
    class Thing:
        def answer(self):
            return 42

    with forbid((Thing, "answer")), pytest.raises(CheckFailed, match="Thing.answer"):
        Thing().answer()
    assert Thing().answer() == 42


def test_selfcheck_reports_passes_unanswered_and_failures(capsys):
    assert selfcheck("Try it 1", lambda: None) is True
    assert "Try it 1: passed" in capsys.readouterr().out
    assert last_verdict()[2:4] == ("passed", "")

    def unanswered():
        raise Unanswered

    assert selfcheck("Try it 2", unanswered) is False
    assert "not attempted yet" in capsys.readouterr().out
    assert last_verdict().status == "not attempted"
    assert selfcheck("Try it 3", lambda: fail("expected 1, got 2")) is False  # reported, not raised
    assert capsys.readouterr().err == "Try it 3: not right yet - expected 1, got 2\n"
    assert last_verdict()[1:4] == ("Try it 3", "not right yet", "expected 1, got 2")

    def bare():
        raise AssertionError  # a check written without a message

    selfcheck("Try it 4", bare)
    assert last_verdict().message == "a check failed without saying why"

    def stumbles():
        return {}["x"]  # the check itself raised, outside expect

    selfcheck("Try it 5", stumbles)
    assert last_verdict().message == "the check raised KeyError: 'x'"


def test_a_wrong_answer_prints_one_short_message_and_the_lab_goes_on(capsys):
    """The verdict of a wrong answer: no traceback, lines of at most 100 characters broken
    between words (no number split), the full one-line reason recorded."""
    def exercise1(x):
        return x * 2

    why = "the spacing above 1.0 is 2^-10, and this sentence is long enough to need a second line of its own"
    assert selfcheck("Try it 1", lambda: expect(exercise1, 1.0009765625, want=1.0009765625, why=why), lab=3) is False
    err = capsys.readouterr().err
    assert "Traceback" not in err and all(len(line) <= 100 for line in err.splitlines())
    assert len(err.splitlines()) == 2 and " ".join(err.split()) == " ".join(
        f"Try it 1: not right yet - {last_verdict().message}".split())
    assert last_verdict().message == f"exercise1(1.0009765625): expected 1.0009765625, got 2.001953125 - {why}"


def test_summary_lists_every_exercise_of_the_lab_with_its_latest_verdict(capsys):
    """summary(lab) has a row per exercise of the lab (its reference solutions), the latest
    verdict of each (a check run again replaces it), "not run" for a check that never ran."""
    def unanswered():
        raise Unanswered

    selfcheck("Try it 1", lambda: fail("expected 2.0, got 1.0"), lab=99)  # a lab with no solutions: not counted
    selfcheck("Try it 1", lambda: fail("expected 2.0, got 1.0"), lab=7)
    selfcheck("Try it 1", lambda: None, lab=7)  # fixed and rerun
    selfcheck("Try it 2", unanswered, lab=7)
    assert [v.status for v in verdicts(7).values()] == ["passed", "not attempted"]
    capsys.readouterr()
    assert summary(7) is None
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "lab 07: 1 of 2 checks passed"
    assert [line.split("  ")[-1].strip() for line in lines[3:]] == ["passed", "not attempted"]
    selfcheck("Try it 2", lambda: fail("expected 0.5, got 0.25 - " + "the reason " * 20), lab=7)
    summary(13)
    summary(7)
    text = capsys.readouterr().out
    assert "lab 13: 0 of 3 checks passed" in text and text.count("not run") >= 3
    assert "Try it 2  not right yet: expected 0.5, got 0.25 - the reason" in text
    assert all(len(line) <= 100 for line in text.splitlines())
    with pytest.raises(ValueError, match=r"lab \(a lab's number\) must be an integer >= 1"):
        summary("12")


def test_slider_falls_back_to_one_call(monkeypatch, capsys):
    monkeypatch.setenv("FPSIM_LABS_NO_WIDGETS", "1")
    assert not widgets_available()
    assert slider(lambda v: print("ran", v), default=3, values=range(5)) is None
    assert capsys.readouterr().out == "ran 3\n"


def _threadpoolctl_blas_threads():
    """numpy's BLAS thread count as threadpoolctl reports it (the reference), None without a BLAS."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    counts = [i["num_threads"] for i in threadpoolctl.threadpool_info() if i.get("user_api") == "blas"]
    return counts[0] if counts else None


def test_set_numpy_blas_threads_sets_what_numpy_blas_threads_reads():
    before = _threadpoolctl_blas_threads()
    if before is None:
        pytest.skip("no BLAS library threadpoolctl can read")
    pinned = fpsim.blas_threads()
    try:
        for n in (2, 1):
            set_numpy_blas_threads(n)
            assert _threadpoolctl_blas_threads() == n and numpy_blas_threads() == n
        assert fpsim.blas_threads() == pinned  # fpsim's own pinned count is another setting, untouched
    finally:
        set_numpy_blas_threads(before)
    for bad in (0, -1, 1.0, True, "2"):
        with pytest.raises(ValueError, match=f"n must be an integer >= 1, got {bad!r}"):
            set_numpy_blas_threads(bad)


@pytest.mark.parametrize("old, new", [("blas_threads", "set_numpy_blas_threads"),
                                      ("blas_thread_count", "numpy_blas_threads")])
def test_old_blas_thread_names_warn_and_are_the_new_functions(old, new):
    import fpsim.labs

    with pytest.warns(DeprecationWarning, match=rf"fpsim\.labs\.{old} is deprecated \(removed 2027-06-01\): "
                                               rf"use fpsim\.labs\.{new}"):
        assert getattr(fpsim.labs, old) is getattr(fpsim.labs, new)
    assert old not in fpsim.labs.__all__ and new in fpsim.labs.__all__
    with pytest.raises(AttributeError, match="has no attribute 'blas_thread'"):
        fpsim.labs.blas_thread  # noqa: B018


# ---------------------------------------------------------------------------- bit explorer


def _dtype(fmt):
    return fpsim.get_format(fmt).dtype


@pytest.mark.parametrize("fmt", EXPLORER_FORMATS)
def test_explorer_number_to_bits_matches_the_cast(fmt):
    for x in (0.1, -3.5, 1e-3, 2.0**-20, 65504.0, 1e5, 0.0, -0.0):
        e = BitExplorer(fmt, x)
        with np.errstate(over="ignore"):
            stored = np.float32(x).astype(_dtype(fmt))
        if math.isfinite(float(stored)):
            assert e.value == float(stored) or (math.isnan(e.value) and math.isnan(float(stored)))
            assert e.bits == int(np.asarray(stored).view({8: np.uint8, 16: np.uint16, 32: np.uint32}[e.format.bits]))


@pytest.mark.parametrize("fmt", ["float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_explorer_toggling_every_bit_matches_numpy(fmt):
    """From 1.0 and from a subnormal, flip each bit: the value is numpy's / ml_dtypes' decoding of
    the flipped pattern, the category and the neighbours agree with ml_dtypes (np.nextafter)."""
    f = fpsim.get_format(fmt)
    uint = {8: np.uint8, 16: np.uint16}[f.bits]
    for start in (1.0, f.smallest_subnormal * 3):
        for i in range(f.bits):
            e = BitExplorer(fmt, start).toggle(i)
            pattern = int(np.array(start, np.float32).astype(f.dtype).view(uint)) ^ (1 << (f.bits - 1 - i))
            v = np.array(pattern, uint).view(f.dtype)
            ref = float(v)
            assert e.bits == pattern
            assert e.value == ref or (math.isnan(ref) and math.isnan(e.value))
            if math.isnan(ref):
                assert e.category == "nan" and e.neighbours == (None, None)
                continue
            if math.isinf(ref):
                assert e.category == "inf"
                continue
            want_cat = "zero" if ref == 0 else "subnormal" if abs(ref) < f.tiny else "normal"
            assert e.category == want_cat
            below, above = e.neighbours
            up = float(np.nextafter(v, np.array(np.inf, np.float32).astype(f.dtype) if f.has_inf else v.dtype.type(f.max)))
            down = float(np.nextafter(v, np.array(-np.inf, np.float32).astype(f.dtype) if f.has_inf else v.dtype.type(-f.max)))
            if ref == f.max:
                assert above is None
            else:
                assert above == up, (fmt, i, ref)
            if ref == -f.max:
                assert below is None
            else:
                assert below == down, (fmt, i, ref)
            assert e.ulp == float(fpsim.ulp(ref, fmt))


def test_explorer_float32_and_the_ends():
    e = BitExplorer("float32", 1.0)
    assert e.neighbours == (float(np.nextafter(np.float32(1), np.float32(0))), float(np.nextafter(np.float32(1), np.float32(2))))
    top = BitExplorer("float16", 65504.0)
    assert top.neighbours == (65472.0, None) and top.ulp == 32.0
    assert BitExplorer("float8_e4m3fn", 448.0).neighbours[1] is None  # 0x7F is NaN, not a number
    z = BitExplorer("float16", 0.0)
    assert z.neighbours == (-(2.0**-24), 2.0**-24) and z.category == "zero"
    assert BitExplorer("float16", 1.0).toggle(15).value == 1 + 2.0**-10


def test_explorer_format_switch_number_entry_and_text():
    e = BitExplorer("float32", 0.1)
    assert e.hex == "0x3DCCCCCD"
    e.set_format("bfloat16")
    assert (e.hex, e.value) == ("0x3DCD", float(ml_dtypes.bfloat16(0.1)))
    e.set_value(70000.0).set_format("float16")
    assert e.category == "inf"
    assert e.set_bits(0x0001).value == 2.0**-24 and e.category == "subnormal"
    text = e.describe()
    for part in ("0 00000 0000000001", "0x0001", "subnormal, 1 significant bits", "neighbours", "ulp"):
        assert part in text
    with pytest.raises(ValueError, match="bit index"):
        e.toggle(16)
    with pytest.raises(ValueError, match="pattern"):
        e.set_bits(1 << 16)


def test_explore_falls_back_to_the_printed_description(monkeypatch, capsys):
    monkeypatch.setenv("FPSIM_LABS_NO_WIDGETS", "1")
    assert explore(0.1, "bfloat16") is None
    out = capsys.readouterr().out
    assert BitExplorer("bfloat16", 0.1).describe() in out and "toggle(i)" in out


def test_explore_builds_its_widget(monkeypatch):
    """The widget path, without a kernel: one button per bit, coloured by field, and clicking one flips it."""
    pytest.importorskip("ipywidgets")
    from fpsim.labs import explorer

    shown = []
    monkeypatch.setattr("IPython.display.display", lambda w: shown.append(w))
    model = BitExplorer("float8_e5m2", 1.0)
    explorer._widget(model)
    (box,) = shown
    controls, row, out = box.children
    assert len(row.children) == 8 and "1.0" in out.value
    row.children[7].click()  # click the last mantissa bit
    assert model.value == 1.25 and "1.25" in box.children[2].value
    # each bit's colour is a trait the browser receives (a ToggleButton's style has none)
    bits = shown[0].children[1].children
    assert [b.description for b in bits] == list("00111101")
    assert all("button_color" in b.style.keys for b in bits)
    assert [b.style.button_color for b in bits] == [explorer._FIELD_COLORS[f] for f in ["sign"] + ["exponent"] * 5
                                                    + ["mantissa"] * 2]


# ---------------------------------------------------------------------------- memory


def test_memory_per_parameter_is_measured_from_the_storage_dtypes():
    from fpsim.labs.memory import measure_bytes, memory_table

    fp32 = measure_bytes("fp32")
    assert (fp32["weights"], fp32["gradients"], fp32["Adam moments"], fp32["total"]) == (4, 4, 8, 16)
    master = measure_bytes("fp16-master")
    assert (master["weights"], master["master weights"], master["master gradients"], master["total"]) == (2, 4, 4, 20)
    assert measure_bytes("bf16-pure")["total"] == 8
    assert measure_bytes("bf16-kahan")["Kahan buffer"] == 2
    assert measure_bytes("fp16-amp")["total"] == 16
    table = memory_table(("fp32", "bf16-pure"), n_params=1e9)
    assert "16 GB" in table and "8 GB" in table


# ---------------------------------------------------------------------------- recipe runs


def test_runs_train_measures_every_step_and_the_labs_draw_with_the_compare_figure():
    from fpsim.experiments import format_table
    from fpsim.labs import runs
    from fpsim.tools.compareplot import compare_figure

    res = runs.side_by_side(["fp32", "fp16-pure", "fp16-master", "fp16-dynamic"], small_task(), steps=4)
    assert all(len(res[k].act_grad_flushed) == 4 for k in ("fp32", "fp16-master", "fp16-dynamic"))  # every step
    text = format_table(res)
    assert "diverged at step 0" in text and "65536" in text
    cf = compare_figure(res, panels=["ratio", "flushed", "stalled", "scale"], title="t")
    assert cf.panels == ("ratio", "flushed", "stalled", "scale") and len(cf.figure.axes) == 4
    assert [(d.recipe, d.step) for d in cf.deaths] == [("fp16-pure", 0)]
    assert set(cf.final_ratios) == {"fp16-master", "fp16-dynamic"}
    with pytest.raises(ValueError, match="choose from"):
        compare_figure(res, panels=["losses"])


def test_classifier_runs_through_the_pipeline():
    from fpsim.experiments import format_table
    from fpsim.labs.classifier import train_classifier

    a = train_classifier("fp32", steps=3, n=128)
    b = train_classifier("fp16-dynamic", steps=3, n=128)
    assert len(a.losses) == len(b.act_grad_flushed) == 3 and list(a.act_grad_flushed.values()) == [0.0, 0.0, 0.0]
    assert b.scales[0] == 2.0**16
    text = format_table({"fp32": a, "fp16-dynamic": b})
    assert "fp16-dynamic" in text and "R^2" not in text  # the classifier has no R^2
    with pytest.raises(ValueError, match="float16 / bfloat16"):
        train_classifier("fp8-delayed", steps=1)


def test_gradient_totals():
    from fpsim import nn
    from fpsim.capture import capture_gradients
    from fpsim.labs.gradients import audit_totals, capture_totals, monitor_totals

    task = small_task()
    x = task.data()
    cap = capture_gradients(task.model(0), nn.mse_loss, x, x, formats=["float16"])
    text = capture_totals(cap, layers=True)
    assert "activation gradients, all layers" in text and "layer 6's output" in text
    nz = np.concatenate([v.ravel() for k, v in cap.grads.items() if k[1] == "activation"])
    nz = nz[nz != 0]
    flushed = 100 * np.mean(nz.astype(np.float16) == 0)
    assert f"{flushed:.1f}%" in text.splitlines()[2]
    from fpsim.tools.audit import audit_arrays

    report = audit_arrays({"/".join(k): v for k, v in cap.grads.items()}, formats=("float16",))
    assert "2^" in audit_totals(report)
    m16 = task.model(0).to("float16")
    with fpsim.monitor() as m:
        nn.mse_loss(m16(fpsim.tensor(x, "float16")).to("float32"), fpsim.tensor(x, "float32")).backward()
    assert "backward: gradients between layers" in monitor_totals(m)


def test_histogram_legend_below_and_scale_named():
    from fpsim.labs.figures import histogram
    from fpsim.labs.fp8 import scaled_histogram

    g = np.random.default_rng(0).lognormal(-15, 1.0, 2000).astype(np.float32)
    fig = histogram(g, formats=("float16",), scale=1024.0)
    assert fig.axes[0].get_legend() is None and fig.legends
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "x 2^10 (loss scale)" in labels
    assert "scaled x 2^10" in fig.axes[0].texts[0].get_text()
    fig8 = scaled_histogram(g, "e4m3")
    assert any("(per-tensor fp8 scale)" in t.get_text() for t in fig8.legends[0].get_texts())


# ---------------------------------------------------------------------------- PyTorch bridge


def test_torch_available_without_torch(monkeypatch):
    from fpsim.labs import torch_bridge

    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    assert torch_bridge.torch_available() is False


def test_fpsim_and_pytorch_amp_runs_agree_step_by_step():
    pytest.importorskip("torch")
    from fpsim.labs.torch_bridge import compare_with_torch

    b = compare_with_torch("float16", steps=12, task=small_task(), init_scale=2.0**24, growth_interval=3)
    assert b.same_scales and b.same_skips and any(b.ours.skipped)
    assert b.rel_diff[0] < 1e-6 and b.rel_diff.max() < 1e-3
    assert "steps, autocast float16" in b.summary() and "both" in b.table()


def test_fpsim_import_does_not_import_torch():
    import subprocess

    code = "import sys, fpsim, fpsim.labs, fpsim.labs.torch_bridge; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------------------- lab timer


def test_time_labs_on_a_small_notebook(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    from fpsim.tools.bench.labtime import lab_paths, time_lab, time_labs, timing_table

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# t"), nbformat.v4.new_code_cell("x = 1"),
                nbformat.v4.new_code_cell("import time\ntime.sleep(0.3)")]
    path = tmp_path / "99_tiny.ipynb"
    nbformat.write(nb, path)
    assert lab_paths(tmp_path) == [path]
    t, cells = time_lab(path)  # one kernel start; time_labs runs this for every path
    assert t.name == "99_tiny.ipynb" and t.seconds >= t.slowest_cell >= 0.3
    assert [c.index for c in cells] == [1, 2] and cells[1].first_line == "import time"
    assert time_labs([]) == []
    assert "99_tiny.ipynb" in timing_table([t])
    assert len(lab_paths()) >= 8  # the repository's own labs


def test_not_attempted_names_the_reveal_call_of_its_lab_and_exercise(capsys):
    def unanswered():
        raise Unanswered

    selfcheck("Try it 2", unanswered, lab=16)
    assert capsys.readouterr().out.rstrip().endswith("reveal the solution with reveal(16, 2)")


def test_reveal_prints_the_solution_once_and_returns_nothing(capsys):
    import inspect

    from fpsim.labs.solutions import lab12, reveal, solution_source

    assert reveal(12, 2) is None  # a cell ending in reveal(...) shows no second, escaped copy
    assert capsys.readouterr().out == inspect.getsource(lab12.exercise2) + "\n"
    assert solution_source(12, 2) == inspect.getsource(lab12.exercise2)
