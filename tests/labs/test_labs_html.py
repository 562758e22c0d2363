"""``fpsim labs``: the list; ``--copy DIR`` (a fresh set, the learner's edits kept); ``--html DIR``:
every lab run and written as HTML with its outputs and inline figures, its math as MathML and no
script from the network, an index linking them, a failing lab named with its cell while the others
are kept.

One real lab (10, a few seconds) and notebooks written here; nbformat builds them, the HTML is
parsed back with the standard library's HTMLParser.  The installed-wheel case is
tests/labs/test_labs_wheel.py.
"""

import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from fpsim.tools import cli, labs_files

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
    out, err = capsys.readouterr()
    assert out.split() == ["01_anatomy_of_a_float.ipynb", "10_block_scaling.ipynb"]
    assert "fpsim labs --copy DIR" in err and "jupyter lab DIR" in err


def test_copy_writes_a_fresh_set_and_keeps_the_learners_edits(tmp_path, capsys):
    shipped = {p.name: p for p in labs_files.lab_files()}
    target = tmp_path / "my-labs"
    assert cli.main(["labs", "--copy", str(target), "--lab", "1", "10"]) == 0
    names = ["01_anatomy_of_a_float.ipynb", "10_block_scaling.ipynb"]
    assert sorted(p.name for p in target.iterdir()) == [*names, "README.md"]
    assert all((target / n).read_bytes() == shipped[n].read_bytes() for n in names)
    assert f"jupyter lab {target}" in capsys.readouterr().err
    edited = target / names[0]
    edited.write_text(edited.read_text().replace("Anatomy", "My anatomy"))
    mine = edited.read_bytes()
    assert cli.main(["labs", "--copy", str(target), "--lab", "1", "10"]) == 0  # again: nothing to replace but mine
    err = capsys.readouterr().err
    assert edited.read_bytes() == mine
    assert f"kept {edited}" in err and "--overwrite replaces it" in err and "0 files written" in err
    assert cli.main(["labs", "--copy", str(target), "--lab", "1", "--overwrite"]) == 0
    assert edited.read_bytes() == shipped[names[0]].read_bytes()


@pytest.mark.parametrize(("argv", "message"), [
    (["--overwrite"], "--overwrite replaces notebooks written by --copy DIR"),
    (["--copy", "X", "--html", "Y"], "--copy and --html: one at a time"),
])
def test_copy_options_that_do_not_go_together(tmp_path, capsys, argv, message):
    argv = [a if a not in ("X", "Y") else str(tmp_path / a) for a in argv]
    assert cli.main(["labs", *argv]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "X").exists() and not (tmp_path / "Y").exists()


def test_copy_onto_a_file_is_named(tmp_path, capsys):
    (tmp_path / "f").write_text("")
    assert cli.main(["labs", "--copy", str(tmp_path / "f"), "--lab", "1"]) == 2
    assert f"--copy: {tmp_path / 'f'} exists and is not a folder" in capsys.readouterr().err


def test_a_package_without_notebooks_says_so_not_labs_dir(tmp_path, monkeypatch, capsys):
    """Where neither the wheel's fpsim/labs/notebooks/ nor a checkout's labs/ exists, the message names
    both places, not an option the user never passed."""
    monkeypatch.setattr(labs_files, "__file__", str(tmp_path / "site-packages" / "fpsim" / "tools" / "labs_files.py"))
    assert cli.main(["labs"]) == 2
    err = capsys.readouterr().err
    assert "this fpsim has no lab notebooks" in err and str(tmp_path / "site-packages" / "fpsim" / "labs" / "notebooks") in err
    assert "--labs-dir:" not in err


class _Page(HTMLParser):
    """What a rendered page holds: scripts with a src, external links, <math> elements, and the text
    outside code, math, styles and scripts."""

    SKIP = {"code", "pre", "math", "style", "script"}

    def __init__(self):
        super().__init__()
        self.script_src, self.links, self.maths, self.prose, self._skip = [], [], 0, [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script" and a.get("src") is not None:
            self.script_src.append(a["src"])
        for key in ("src", "href"):
            if (a.get(key) or "").startswith(("http:", "https:", "//")):
                self.links.append(a[key])
        self.maths += tag == "math"
        if tag in self.SKIP:
            self._skip.append(tag)

    def handle_endtag(self, tag):
        if self._skip and self._skip[-1] == tag:
            self._skip.pop()

    def handle_data(self, data):
        if not self._skip:
            self.prose.append(data)


def _page(path) -> _Page:
    page = _Page()
    page.feed(Path(path).read_text(encoding="utf-8"))
    return page


def _formulas(markdown: str) -> int:
    """How many $...$ and $$...$$ a Markdown text holds outside code (fenced blocks and `spans`)."""
    text = re.sub(r"```.*?```", "", markdown, flags=re.S)
    text = re.sub(r"`[^`]*`", "", text)
    return len(re.findall(r"\$\$.+?\$\$|\$[^$\n]+?\$", text, flags=re.S))


def test_math_becomes_mathml_and_code_keeps_its_dollars(tmp_path):
    from fpsim.tools.labs_html import write_html

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# $2^{-24}$ in a heading\n\nInline $x = m \\cdot 2^e$, "
                                              "`$HOME` in code, and\n\n$$\\frac{M}{2^m}$$\n\n```\n$ fpsim labs\n```"),
                nbformat.v4.new_code_cell("print('$5')", outputs=[nbformat.v4.new_output("stream", text="$5\n")])]
    page = _page(write_html(nb, tmp_path / "m.html"))
    text = (tmp_path / "m.html").read_text()
    assert page.maths == 3 and text.count('display="block"') == 1
    assert "<mfrac>" in text and "<msup><mn>2</mn>" in text and "ns0:" not in text
    assert "$HOME" in text and "$ fpsim labs" in text and "$5" in text  # code and outputs are left alone
    assert "$" not in "".join(page.prose)


@pytest.mark.parametrize("path", labs_files.lab_files(), ids=lambda p: p.name)
def test_every_formula_of_every_lab_is_mathml_and_nothing_loads_from_the_network(tmp_path, path):
    """Each notebook as written (not run: its Markdown is what holds the math): as many <math>
    elements as formulas in its Markdown, no dollar left in its prose, no script with a src, no
    link to the network."""
    from fpsim.tools.labs_html import write_html

    nb = nbformat.read(path, as_version=4)
    page = _page(write_html(nb, tmp_path / "lab.html"))
    expected = sum(_formulas(c.source) for c in nb.cells if c.cell_type == "markdown")
    assert page.maths == expected, f"{path.name}: {page.maths} <math> elements for {expected} formulas"
    assert "$" not in "".join(page.prose), f"{path.name}: raw TeX left in the page"
    assert page.script_src == [] and page.links == [], (page.script_src, page.links)
    assert "mathjax" not in (tmp_path / "lab.html").read_text().lower()


def test_without_nbconvert_one_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "nbconvert", None)  # import nbconvert now raises ImportError
    assert cli.main(["labs", "--html", str(tmp_path), "--lab", "10"]) == 2
    err = capsys.readouterr().err
    assert "nbconvert is not installed here" in err and "fpsim[labs]" in err


@pytest.mark.parametrize("argv", [["--help"], ["labs", "--help"]])
def test_help_imports_no_notebook_package(argv):
    code = ("import contextlib, io, sys\nfrom fpsim.tools.cli import main\n"
            f"with contextlib.redirect_stdout(io.StringIO()):\n    try:\n        main({argv!r})\n"
            "    except SystemExit:\n        pass\n"
            "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('nbconvert', 'nbclient', 'nbformat', 'jupyter_client', 'matplotlib'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == []
