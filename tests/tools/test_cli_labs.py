"""``fpsim labs``: where ``--html`` writes is checked before any lab runs, in one line."""

from __future__ import annotations

import os

import pytest

from fpsim.tools.cli import main


@pytest.fixture(autouse=True)
def _labs_modules():
    for name in ("nbclient", "nbformat", "nbconvert", "latex2mathml"):
        pytest.importorskip(name)


def test_labs_html_onto_a_file_says_it_wants_a_folder(tmp_path, capsys):
    target = tmp_path / "page.html"
    target.write_text("mine")
    assert main(["labs", "--html", str(target), "--lab", "1"]) == 2  # was "[Errno 17] File exists"
    out, err = capsys.readouterr()
    assert out == "" and err == (f"fpsim labs: error: --html {target}: that is a file; --html wants a folder (made if "
                                 "missing) to write NN_name.html and index.html into\n")
    assert target.read_text() == "mine"


def test_labs_html_under_a_file_or_in_a_read_only_folder_is_one_line(tmp_path, capsys):
    (tmp_path / "f").write_text("")
    assert main(["labs", "--html", str(tmp_path / "f" / "out"), "--lab", "1"]) == 2
    assert capsys.readouterr().err == (f"fpsim labs: error: --html {tmp_path / 'f' / 'out'}: cannot write a folder "
                                       "there (Not a directory); --html wants a folder (made if missing) to write "
                                       "NN_name.html and index.html into\n")
    if os.geteuid() == 0:
        return  # root writes into a read-only folder
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        assert main(["labs", "--html", str(ro), "--lab", "1"]) == 2
    finally:
        ro.chmod(0o755)
    assert capsys.readouterr().err.startswith(f"fpsim labs: error: --html {ro}: cannot write a folder there "
                                              "(Permission denied)")
    assert list(ro.iterdir()) == []


@pytest.mark.parametrize("runner", ["bench --labs", "labs --html"])
def test_a_lab_kernel_runs_without_the_unencrypted_tcp_warning(tmp_path, capfd, runner):
    """ipykernel >= 7.4 logged "Kernel is running over TCP without encryption" (on the kernel's
    stderr, which is ours) for every lab: the kernel manager now provisions CurveZMQ keys."""
    import nbformat

    from fpsim.tools.bench.labtime import time_lab
    from fpsim.tools.labs_html import run_lab

    path = tmp_path / "01_one.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("print(6 * 7)")]
    nbformat.write(nb, path)
    if runner == "bench --labs":
        t, cells = time_lab(path)
        assert t.name == "01_one.ipynb" and len(cells) == 1
    else:
        assert run_lab(path).cells[0].outputs[0]["text"] == "42\n"  # the kernel ran, encrypted or not
    out, err = capfd.readouterr()
    assert "without encryption" not in err and "WARNING" not in err, err
