"""``fpsim labs --html DIR``: every lab run and written as HTML with its outputs and inline figures,
an index linking them, a failing lab named with its cell while the others are kept.

One real lab (10, a few seconds) and two notebooks written here; nbformat builds them, the HTML
is read back as text.
"""

import re
import subprocess
import sys

import pytest

from fpsim.tools import cli

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("nbconvert")

IMG = re.compile(r'<img[^>]+src="data:image/png;base64,[A-Za-z0-9+/=\s]{1000,}"')


def _notebook(path, *sources):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {path.stem}")] + [nbformat.v4.new_code_cell(s) for s in sources]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def test_one_lab_with_its_outputs_and_figure(tmp_path, capsys):
    out = tmp_path / "html"
    assert cli.main(["labs", "--html", str(out), "--lab", "10"]) == 0
    page = (out / "10_block_scaling.html").read_text()
    assert "values lost to 0: 31 of 31" in page  # section 2's printed line: the outputs are there
    assert len(IMG.findall(page)) == 1  # lab 10 draws one figure, inline
    assert "Traceback" not in page and 'data-mime-type="application/vnd.jupyter.stderr"' not in page  # no error output
    index = (out / "index.html").read_text()
    assert 'href="10_block_scaling.html"' in index and "Lab 10" in index
    err = capsys.readouterr().err
    assert re.search(r"\[1/1\] 10_block_scaling\.ipynb: \d+\.\d s -> ", err) and "1 of 1 labs written" in err


def test_a_failing_lab_is_named_with_its_cell_and_the_others_kept(tmp_path, capsys):
    labs = tmp_path / "labs"
    labs.mkdir()
    _notebook(labs / "01_fine.ipynb",
              "%matplotlib inline\nimport matplotlib.pyplot as plt\nplt.plot([1, 2, 3]); plt.show()",
              "from fpsim.labs.explorer import explore\nexplore(0.1)", "print('the last cell ran')")
    _notebook(labs / "02_broken.ipynb", "x = 1", "print('before')\n1 / 0", "print('never')")
    out = tmp_path / "html"
    rc = cli.main(["labs", "--html", str(out), "--labs-dir", str(labs)])
    err = capsys.readouterr().err
    assert rc == 1, err
    assert "02_broken.ipynb failed at cell 2 (\"print('before')\"): ZeroDivisionError: division by zero" in err
    assert "1 of 2 labs written" in err
    fine = (out / "01_fine.html").read_text()
    assert len(IMG.findall(fine)) == 1 and "the last cell ran" in fine
    # the bit explorer without a kernel: the widget's plain-text fallback, not a blank
    assert "no widgets here" in fine and "0.0999755859375" in fine  # 0.1 in float16, as the explorer shows it
    assert not (out / "02_broken.html").exists()
    index = (out / "index.html").read_text()
    assert 'href="01_fine.html"' in index and "02_broken.ipynb failed at cell 2" in index


def test_an_unknown_lab_number_is_named(tmp_path, capsys):
    out = tmp_path / "html"
    assert cli.main(["labs", "--html", str(out), "--lab", "10", "99"]) == 2
    err = capsys.readouterr().err
    assert "--lab 99: no such lab" in err and "10" in err.split("the labs are")[1]
    assert not out.exists()


def test_without_html_it_lists_the_labs(capsys):
    assert cli.main(["labs", "--lab", "1", "10"]) == 0
    assert capsys.readouterr().out.split() == ["01_anatomy_of_a_float.ipynb", "10_block_scaling.ipynb"]


def test_without_nbconvert_one_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "nbconvert", None)  # import nbconvert now raises ImportError
    assert cli.main(["labs", "--html", str(tmp_path), "--lab", "10"]) == 2
    err = capsys.readouterr().err
    assert "nbconvert is not installed here" in err and "[labs]" in err


@pytest.mark.parametrize("argv", [["--help"], ["labs", "--help"]])
def test_help_imports_no_notebook_package(argv):
    code = ("import contextlib, io, sys\nfrom fpsim.tools.cli import main\n"
            f"with contextlib.redirect_stdout(io.StringIO()):\n    try:\n        main({argv!r})\n"
            "    except SystemExit:\n        pass\n"
            "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('nbconvert', 'nbclient', 'nbformat', 'jupyter_client', 'matplotlib'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == []
