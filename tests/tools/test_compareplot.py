"""The comparison figure (``fpsim compare``, ``fpsim figures``' loss_curves.png): its data read
back from what compare_figure returns and from the Axes it drew.

Most tests use hand-made RunResults (exact, instant); one trains the real task for a few steps so
that the step a run died at comes from the training loop itself; the CLI tests write the figure
for every kind of recipe set the command accepts.
"""

import dataclasses
import json

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402

from fpsim.experiments import RECIPES, TASKS, ReferenceTask, RunResult, compare, compare_seeds  # noqa: E402
from fpsim.tools import cli  # noqa: E402
from fpsim.tools.compareplot import Death, compare_figure  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _run(name, losses, *, died_at=None, scales=None, skipped=None, flushed=None, stalled=None, scaler=None):
    n = len(losses)
    return RunResult(name, losses=list(losses), scales=list(scales or [1.0] * n), skipped=list(skipped or [False] * n),
                     act_grad_flushed=dict(enumerate(flushed or [0.0] * n)), stalled=dict(enumerate(stalled or [0.0] * n)),
                     scaler=scaler, died_at=died_at, failure=f"step {died_at}: dead" if died_at is not None else "")


def _runs():
    base = [1.0, 0.5, 0.25, 0.2, 0.1]
    return {
        "fp32": _run("fp32", base),
        "fp16-pure": _run("fp16-pure", [1.0, 0.6, 0.4], died_at=2, flushed=[0.1, 0.2, 0.3]),
        "fp16-master": _run("fp16-master", [1.0, 0.55, 0.3, 0.25, 0.13], flushed=[0.1, 0.2, 0.3, 0.4, 0.5]),
        "fp16-dynamic": _run("fp16-dynamic", [1.0, 0.5, 0.25, 0.2, 0.1], scaler="dynamic",
                             scales=[2.0**16, 2.0**17, 2.0**16, 2.0**16, 2.0**17], skipped=[False, True, False, False, False]),
        "bf16-pure": _run("bf16-pure", [1.0, 0.5, 0.26, 0.21, 0.11], stalled=[0.0, 0.1, 0.3, 0.5, 0.6]),
    }


def _xmarks(ax):
    return [ln for ln in ax.lines if ln.get_marker() == "X"]


def test_a_dead_run_is_marked_at_the_step_it_died():
    cf = compare_figure(_runs())
    assert cf.deaths == [Death("fp16-pure", None, 2, 0.4)]
    (x,) = _xmarks(cf.axes["loss"])
    assert list(x.get_xdata()) == [2] and list(x.get_ydata()) == [0.4]
    assert x.get_label() == "fp16-pure died at step 2"
    assert "fp16-pure died at step 2" in [t.get_text() for t in cf.axes["loss"].get_legend().get_texts()]
    # its loss line ends at that step
    (line,) = [ln for ln in cf.axes["loss"].lines if ln.get_label() == "fp16-pure"]
    assert list(line.get_xdata()) == [0, 1, 2]


def test_ratios_are_the_tables_and_the_legend_says_them():
    runs = _runs()
    cf = compare_figure(runs)
    assert cf.baseline == "fp32" and cf.panels == ("loss", "ratio", "flushed", "scale", "stalled")
    assert cf.final_ratios == {n: {None: runs[n].losses[-1] / 0.1} for n in ("fp16-master", "fp16-dynamic", "bf16-pure")}
    labels = [t.get_text() for t in cf.axes["ratio"].get_legend().get_texts()]
    assert labels == ["fp16-pure: died at step 2", "fp16-master: 1.300x at the end", "fp16-dynamic: 1.000x at the end",
                      "bf16-pure: 1.100x at the end"]
    (master,) = [ln for ln in cf.axes["ratio"].lines if ln.get_label().startswith("fp16-master")]
    np.testing.assert_allclose(master.get_ydata(), np.array([1.0, 0.55, 0.3, 0.25, 0.13]) / [1.0, 0.5, 0.25, 0.2, 0.1])


def test_the_panels_that_explain_the_ratios():
    cf = compare_figure(_runs())
    flushed = {ln.get_label(): list(ln.get_ydata()) for ln in cf.axes["flushed"].lines}
    assert flushed == {"fp16-pure": [10.0, 20.0, 30.0], "fp16-master": [10.0, 20.0, 30.0, 40.0, 50.0]}
    assert "0% at every step: fp32, fp16-dynamic, bf16-pure" in cf.notes
    scale = cf.axes["scale"]
    assert scale.get_yscale() == "log"
    (skip,) = _xmarks(scale)
    assert list(skip.get_xdata()) == [1] and list(skip.get_ydata()) == [2.0**17]
    assert "steps skipped: fp16-dynamic 1" in cf.notes
    stalled = {ln.get_label(): list(ln.get_ydata()) for ln in cf.axes["stalled"].lines}
    assert stalled == {"bf16-pure": [0.0, 10.0, 30.0, 50.0, 60.0]}


def test_seeds_mean_and_band():
    a, b = _runs(), _runs()
    b["fp16-master"] = _run("fp16-master", [1.0, 0.5, 0.25, 0.2, 0.12])
    b["fp16-pure"] = _run("fp16-pure", [1.0], died_at=0)
    cf = compare_figure({0: a, 7: b})
    assert cf.final_ratios["fp16-master"] == pytest.approx({0: 1.3, 7: 1.2})
    (master,) = [ln for ln in cf.axes["ratio"].lines if ln.get_label().startswith("fp16-master")]
    assert master.get_label() == "fp16-master: 1.250x at the end (1.200 - 1.300, 2 seeds)"
    assert master.get_ydata()[-1] == pytest.approx(1.25)
    assert any(isinstance(c, PolyCollection) for c in cf.axes["ratio"].collections)  # the min-max band
    assert {(d.seed, d.step) for d in cf.deaths} == {(0, 2), (7, 0)}
    xs = sorted(float(x) for ln in _xmarks(cf.axes["loss"]) for x in ln.get_xdata())
    assert xs == [0.0, 2.0]


def test_without_fp32_the_first_recipe_is_the_baseline_and_says_so():
    runs = _runs()
    del runs["fp32"]
    cf = compare_figure(runs)
    assert cf.baseline == "fp16-pure"
    assert "no fp32 in this set: the first recipe, fp16-pure" in cf.axes["ratio"].get_title()
    assert any("baseline fp16-pure died at step 2" in n for n in cf.notes) and not cf.final_ratios
    assert compare_figure(runs, baseline="bf16-pure").final_ratios["fp16-master"] == {None: 0.13 / 0.11}
    with pytest.raises(ValueError, match="baseline"):
        compare_figure(runs, baseline="fp32")
    with pytest.raises(ValueError, match="at least one run"):
        compare_figure({})


def test_one_recipe_and_all_dead():
    cf = compare_figure({"fp32": _run("fp32", [1.0, 0.5])})
    assert cf.baseline is None and "one recipe: nothing to divide" in cf.notes and cf.panels == ("loss", "ratio")
    cf = compare_figure({"fp32": _run("fp32", [1.0, 0.5]), "fp16-pure": _run("fp16-pure", [1.0], died_at=0)})
    assert "every run but fp32 died (X above): no ratio to show" in cf.notes
    assert [list(x.get_xdata()) for x in _xmarks(cf.axes["loss"])] == [[0]]


def test_a_real_run_is_marked_where_the_loop_says_it_died(tmp_path):
    runs = compare(["fp32", "fp16-pure", "fp16-dynamic"], ReferenceTask(n=512), steps=3, progress=False)
    dead = runs["fp16-pure"]
    assert dead.died_at == 0 and dead.failure.startswith("step 0:")
    cf = compare_figure(runs, path=tmp_path / "f.png")
    assert (tmp_path / "f.png").read_bytes()[:8] == PNG
    assert [(d.recipe, d.step, d.loss) for d in cf.deaths] == [("fp16-pure", 0, dead.losses[0])]
    (x,) = _xmarks(cf.axes["loss"])
    assert list(x.get_xdata()) == [0]
    assert cf.final_ratios["fp16-dynamic"][None] == runs["fp16-dynamic"].final_loss / runs["fp32"].final_loss


RECIPE_SETS = {
    "default": [],
    "every recipe": ["--recipes", *RECIPES],
    "every low-precision run dies": ["--recipes", "fp32", "fp16-pure"],
    "no fp32": ["--recipes", "bf16-pure", "fp16-dynamic"],
    "one recipe": ["--recipes", "fp16-pure"],
}


@dataclasses.dataclass(frozen=True)
class _SmallReference(ReferenceTask):
    n: int = 512


@pytest.fixture
def small_task():
    """`fpsim compare` on ReferenceTask(n=512): the same code paths, a fraction of the time (the
    registry's "reference", which the CLI's --task reads, replaced for the test)."""
    full = TASKS.get("reference")
    TASKS.register(_SmallReference, "reference", replace=True)
    try:
        yield
    finally:
        TASKS.register(full, "reference", replace=True)


@pytest.mark.filterwarnings("error::UserWarning")  # matplotlib's "constrained_layout not applied" among them
@pytest.mark.parametrize("which", list(RECIPE_SETS))
def test_cli_writes_the_figure_for_every_recipe_set(which, tmp_path, capsys, small_task):
    path = tmp_path / "out" / "cmp.png"
    rc = cli.main(["compare", *RECIPE_SETS[which], "--steps", "2", "--quiet", "--figure", str(path)])
    assert rc == 0
    err = capsys.readouterr().err
    assert "512 x 64 = 2^15 outputs" in err  # the small task ran (the fixture reaches the CLI's --task)
    assert path.read_bytes()[:8] == PNG and path.stat().st_size > 20_000
    assert err.rstrip().endswith(f": {path}")
    if which in ("default", "every recipe", "every low-precision run dies", "one recipe"):
        assert "X: fp16-pure died at step 0" in err


def test_cli_seeds_figure_and_one_step_numbering(tmp_path, capsys, small_task):
    path = tmp_path / "s.png"
    rc = cli.main(["compare", "--recipes", "fp32", "fp16-pure", "bf16-pure", "--steps", "2", "--seeds", "0", "1",
                   "--quiet", "--figure", str(path)])
    assert rc == 0 and path.read_bytes()[:8] == PNG
    captured = capsys.readouterr()
    assert "X: fp16-pure died at step 0 (seed 0)" in captured.err and "(seed 1)" in captured.err
    assert "fp16-pure (seed 0): step 0:" in captured.out
    rc = cli.main(["compare", "--recipes", "fp32", "fp16-pure", "--steps", "2", "--quiet", "--json", "--figure", "none"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["fp16-pure"]["died_at_step"] == 0 and out["fp32"]["died_at_step"] is None
    assert out["fp16-pure"]["failure"].startswith("step 0:") and len(out["fp16-pure"]["losses"]) == 1
    by_seed = compare_seeds(["fp32", "fp16-pure"], [0], ReferenceTask(n=512), steps=2, progress=False)
    assert by_seed[0]["fp16-pure"].died_at == 0


def test_cli_figure_path(tmp_path, capsys, small_task):
    d = tmp_path / "dir"
    d.mkdir()
    assert cli.main(["compare", "--recipes", "fp32", "--steps", "1", "--quiet", "--figure", str(d)]) == 0
    assert (d / "compare_loss.png").read_bytes()[:8] == PNG
    assert capsys.readouterr().err.rstrip().endswith(f": {d / 'compare_loss.png'}")
    assert cli.main(["compare", "--recipes", "fp32", "--steps", "1", "--quiet", "--figure", str(tmp_path / "a")]) == 0
    assert (tmp_path / "a.png").exists() and not (tmp_path / "a").exists()
    assert capsys.readouterr().err.rstrip().endswith(f": {tmp_path / 'a.png'}")
    rc = cli.main(["compare", "--recipes", "fp32", "--steps", "1", "--quiet", "--figure", str(tmp_path / "f.txt")])
    err = capsys.readouterr().err
    assert rc == 2 and "cannot write '.txt' files" in err and "reference task" not in err  # before any training


def test_stalled_updates_that_are_carried_say_so():
    runs = {"fp32": _run("fp32", [1.0, 0.5]), "bf16-kahan": _run("bf16-kahan", [1.0, 0.5], stalled=[0.1, 0.5]),
            "bf16-pure": _run("bf16-pure", [1.0, 0.5], stalled=[0.1, 0.5])}
    labels = [ln.get_label() for ln in compare_figure(runs).axes["stalled"].lines]
    assert labels == ["bf16-kahan: kept in the Kahan buffer", "bf16-pure"]


def test_a_panel_left_out_says_why():
    runs = {"fp32": _run("fp32", [1.0, 0.5]), "bf16-master": _run("bf16-master", [1.0, 0.6])}
    cf = compare_figure(runs)
    assert cf.panels == ("loss", "ratio")
    said = ["no run flushed an activation gradient to 0", "no run left a parameter unchanged (no update stalled)"]
    assert cf.notes[-2:] == said
    assert any(t.get_text() == "\n".join(said) for t in cf.axes["loss"].texts)


def test_a_panel_of_zeros_says_so_across_it_instead_of_an_empty_frame():
    runs = {"fp32": _run("fp32", [1.0, 0.5, 0.25]), "fp8-delayed": _run("fp8-delayed", [1.0, 0.55, 0.3])}
    cf = compare_figure(runs, panels=["ratio", "flushed"])
    ax = cf.axes["flushed"]
    lines = {ln.get_label(): list(ln.get_ydata()) for ln in ax.lines}
    assert lines == {"fp32: 0% at every step": [0.0] * 3, "fp8-delayed: 0% at every step": [0.0] * 3}
    assert [t.get_text() for t in ax.texts] == ["0% at every step:\nfp32\nfp8-delayed"]
    assert "0% at every step: fp32, fp8-delayed" in cf.notes
    lo, hi = ax.get_ylim()
    assert lo < 0 < hi  # the zero lines sit above the frame's edge, not on it
    # where some run did flush, the zeros stay a note in the corner (as in the full figure)
    runs["fp16-master"] = _run("fp16-master", [1.0, 0.6, 0.4], flushed=[0.1, 0.2, 0.3])
    ax = compare_figure(runs, panels=["flushed"]).axes["flushed"]
    assert [ln.get_label() for ln in ax.lines] == ["fp16-master"]
    assert [t.get_text() for t in ax.texts] == ["0% at every step: fp32, fp8-delayed"]


def test_a_death_is_marked_on_the_ratio_panel_too():
    cf = compare_figure(_runs(), panels=["ratio"])
    (x,) = _xmarks(cf.axes["ratio"])
    assert list(x.get_xdata()) == [2] and list(x.get_ydata()) == [pytest.approx(0.4 / 0.25)]
    assert x.get_label().startswith("_")  # the legend says it once, in the recipe's entry
    labels = [t.get_text() for t in cf.axes["ratio"].get_legend().get_texts()]
    assert labels[0] == "fp16-pure: died at step 2"


def test_curves_on_top_of_each_other_are_drawn_widest_first_and_named():
    base = [1.0, 0.5, 0.25, 0.2]
    runs = {"fp32": _run("fp32", base), "bf16-master": _run("bf16-master", [v * 1.004 for v in base]),
            "fp16-master": _run("fp16-master", [1.0, 0.5], died_at=1),
            "bf16-pure": _run("bf16-pure", [1.0, 0.7, 0.5, 0.45])}
    cf = compare_figure(runs, panels=["loss", "ratio"])
    ax = cf.axes["loss"]
    width = {ln.get_label(): ln.get_linewidth() for ln in ax.lines if ln.get_marker() != "X"}
    assert width["fp32"] > width["bf16-master"] > width["fp16-master"] == width["bf16-pure"]
    note = ("on top of each other, within 0.4% at every step: fp32, bf16-master, fp16-master (to step 1) "
            "(drawn widest first; the loss ratio tells them apart)")
    assert note in cf.notes
    assert ax.get_legend().get_title().get_text().replace("\n", " ") == note
    # two curves apart: no note, no title
    apart = compare_figure({"fp32": runs["fp32"], "bf16-pure": runs["bf16-pure"]}, panels=["loss"])
    assert apart.axes["loss"].get_legend().get_title().get_text() == "" and not apart.notes


def test_a_baseline_chosen_by_name_is_not_explained_as_the_first_recipe():
    runs = _runs()
    del runs["fp32"]
    cf = compare_figure(runs, baseline="fp16-dynamic", panels=["ratio"])
    assert cf.axes["ratio"].get_title() == "loss / fp16-dynamic loss at the same step"


def _every_recipe(zero_flushes=False):
    """A run of every registered recipe, each with a legend entry in every panel: flushes (unless
    ``zero_flushes``), stalls, a loss scale; every fifth dead at step 2."""
    return {n: _run(n, [1.0, 0.5 + i / 100, 0.25 + i / 50], flushed=None if zero_flushes else [0.01 * i, 0.2, 0.3],
                    stalled=[0.01 * i, 0.1, 0.2], scaler="dynamic", scales=[2.0**i, 2.0 ** (i + 1), 2.0**i],
                    died_at=2 if i % 5 == 1 else None) for i, n in enumerate(RECIPES)}


def _too_small(fig, axes: dict) -> dict:
    """The panels drawn less than 2.5 inches wide or high (after the layout, at the last draw)."""
    w, h = fig.get_size_inches()
    sizes = {k: (round(ax.get_position().width * w, 1), round(ax.get_position().height * h, 1))
             for k, ax in axes.items()}
    return {k: v for k, v in sizes.items() if min(v) < 2.5}


@pytest.mark.filterwarnings("error::UserWarning")
def test_the_figure_makes_room_for_the_legends_of_every_recipe(tmp_path):
    """Every recipe with an entry in every legend: the figure grows until its layout applies (at 19 x
    10.5 inches matplotlib warned "axes sizes collapsed to zero" and left the panels overlapping), and
    a note naming many recipes is wrapped to the panel's width (it ran past the figure's edge)."""
    assert len(RECIPES) > 16  # the case that did not fit
    cf = compare_figure(_every_recipe(), path=tmp_path / "f.png")
    assert cf.figure.get_size_inches()[1] > 10.5 and not _too_small(cf.figure, cf.axes)
    # as the command's real runs draw it: few entries beside the right panels, many recipes at 0% in their notes
    runs = {n: _run(n, [1.0, 0.5], flushed=[0.1, 0.2] if n == "fp16-master" else None) for n in RECIPES}
    cf = compare_figure(runs, path=tmp_path / "g.png")
    assert not _too_small(cf.figure, cf.axes)
    (note,) = cf.axes["flushed"].texts
    zeros = ", ".join(n for n in RECIPES if n != "fp16-master")
    assert note.get_text().replace("\n", " ") == f"0% at every step: {zeros}"
    assert max(map(len, note.get_text().split("\n"))) <= 60 and "\n" in note.get_text()


@pytest.mark.filterwarnings("error::UserWarning")
def test_panels_side_by_side_make_room_for_every_recipe(tmp_path):
    """The labs' row of panels, with every recipe: tall enough for the ratio legend's rows below it
    (the panels were squeezed to a sliver), a panel of zeros listing the recipes in lines that fit it."""
    cf = compare_figure(_every_recipe(zero_flushes=True), panels=["ratio", "flushed"], path=tmp_path / "f.png")
    assert not _too_small(cf.figure, cf.axes)
    (text,) = cf.axes["flushed"].texts
    lines = text.get_text().split("\n")
    assert lines[0] == "0% at every step:" and max(map(len, lines[1:])) <= 36 and text.get_fontsize() == 11
    assert " ".join(lines[1:]) == ", ".join(RECIPES)
    widths = [ln.get_linewidth() for ln in cf.axes["flushed"].lines]
    assert widths[0] == pytest.approx(1.8 + 7.0) and widths[-1] == 1.8  # widest first, at most 7 points wider
    # a few zeros: one recipe a line, large, as before
    few = compare_figure({n: _run(n, [1.0, 0.5]) for n in ("fp32", "bf16-pure")}, panels=["flushed"])
    (text,) = few.axes["flushed"].texts
    assert text.get_text() == "0% at every step:\nfp32\nbf16-pure" and text.get_fontsize() == 16
