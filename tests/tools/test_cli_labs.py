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
