"""Every lab notebook: stored without outputs; runs top to bottom as written; each self-check
passes with the reference solution (``fpsim.labs.solutions.labNN``) and FAILS, saying what it
expected, with every wrong answer (``WRONG`` in ``tests/labs/wrong_answers/labNN.py``: the tests'
own, not shipped in the package); the last cell prints the lab's summary of its checks.

One kernel per lab does all of it: the notebook's cells run in order, and right after each
check cell the exercise is replaced by each wrong answer in turn and the check cell run again,
then by the reference solution, then the learner's (unanswered) cell is restored and the check
run once more, so that the lab's summary at the end sees what a learner would.

A check reports instead of raising (a wrong answer must not stop the lab), so the tests read
its verdict from the kernel: after every run of a check cell a probe prints
``fpsim.labs.checks.last_verdict()`` as JSON.  A check cell that ran but recorded no fresh
verdict (its check skipped, or swallowed) counts as a failure of the test, never as a pass.
"""

import functools
import importlib
import importlib.util
import json
import os
import re
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fpsim.tools.bench.labtime import kernel_environment
from fpsim.tools.labs_files import notebook_client

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

LABS = Path(__file__).resolve().parents[2] / "labs"
NOTEBOOKS = sorted(LABS.glob("[0-9][0-9]_*.ipynb"))
WRONG_ANSWERS = Path(__file__).resolve().parent / "wrong_answers"
LAB_SECONDS = 60  # a lab should run top to bottom in under a minute, kernel start included (warned, not failed)
WIDTH = 100  # the widest line a lab may print: JupyterLab wraps a longer one mid-word and mid-number


def _lab_number(path: Path) -> int:
    return int(path.name[:2])


def _wrong_answers(lab: int) -> dict:
    """``WRONG`` of ``wrong_answers/labNN.py`` (exercise number -> [(the mistake, code), ...]); {} for a
    lab without one.  Loaded by path: ``labs`` is also the notebooks' folder at the repository root."""
    path = WRONG_ANSWERS / f"lab{lab:02d}.py"
    if not path.exists():
        return {}
    spec = importlib.util.spec_from_file_location(f"wrong_answers_lab{lab:02d}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.WRONG


def _tags(cell) -> list:
    return cell.get("metadata", {}).get("tags", [])


def _outputs_text(outputs) -> str:
    parts = []
    for o in outputs:
        if o.get("output_type") == "stream":
            parts.append(o.get("text", ""))
        elif "data" in o:
            parts.append(o["data"].get("text/plain", ""))
        elif o.get("output_type") == "error":
            parts.append(f"{o.get('ename')}: {o.get('evalue')}")
    return "".join(parts)


def _long_lines(outputs) -> list[str]:
    """The lines over ``WIDTH`` characters in a cell's stream and plain-text outputs; a figure or an
    HTML output (and the text/plain beside it) is exempt."""
    texts = []
    for o in outputs:
        if o.get("output_type") == "stream":
            texts.append(o.get("text", ""))
        elif "data" in o and not any(k == "text/html" or k.startswith("image/") for k in o["data"]):
            texts.append(o["data"].get("text/plain", ""))
    return [line for text in texts for line in text.splitlines() if len(line) > WIDTH]


def _exercise_names(cell) -> list[str]:
    return re.findall(r"^def (exercise\d+)\(", cell.source, flags=re.M)


@dataclass
class Attempt:
    exercise: str
    what: str  # "as written", "reference", or a wrong answer's description
    ok: bool  # the check cell ran without an error
    ename: str = ""
    evalue: str = ""
    text: str = ""
    status: str = "no verdict"  # the check's recorded verdict: passed, not right yet, not attempted
    message: str = ""  # the verdict's one-line reason


_PROBE = ("import json as _json\nfrom fpsim.labs.checks import last_verdict as _last\n"
          "print(_json.dumps(_last() and _last()._asdict()))")


def _read_verdict(client, index, attempt: Attempt, serial: list) -> Attempt:
    """Fill ``attempt`` with the verdict the check cell just recorded; "no verdict" when none is
    newer than ``serial[0]`` (the last one seen), which is then moved on."""
    probe = nbformat.v4.new_code_cell(_PROBE)
    client.execute_cell(probe, index, store_history=False)
    v = json.loads(_outputs_text(probe.outputs).strip() or "null")
    if v and v["serial"] > serial[0]:
        serial[0] = v["serial"]
        attempt.status, attempt.message = v["status"], v["message"]
    return attempt


@dataclass
class LabRun:
    path: Path
    seconds: float = 0.0
    cell_seconds: dict = field(default_factory=dict)
    error: str = ""  # an original cell raised (as written)
    attempts: list = field(default_factory=list)
    last_source: str = ""  # the last code cell, as written, and what it printed
    last_text: str = ""
    long_lines: list = field(default_factory=list)  # (cell index, line) over WIDTH, as written or solved

    def of(self, what):
        return [a for a in self.attempts if (a.what == what if what in ("as written", "reference")
                                             else a.what not in ("as written", "reference"))]


def _exercise_of_each_check(nb) -> dict[int, str]:
    """check cell index -> the exercise it checks (the last exercise cell above it)."""
    out, current = {}, None
    for i, c in enumerate(nb.cells):
        if c.cell_type != "code":
            continue
        if "exercise" in _tags(c):
            names = _exercise_names(c)
            assert names, f"an exercise cell defines no exerciseN function: {c.source[:80]!r}"
            current = names[0]
        elif "check" in _tags(c):
            assert current is not None, "a check cell comes before any exercise cell"
            out[i] = current
    return out


@functools.cache
def _execute(path: Path) -> LabRun:
    """Run the notebook in one kernel, with the wrong answers and the reference solutions
    tried at each check cell (see the module docstring)."""
    nb = nbformat.read(path, as_version=4)
    lab = _lab_number(path)
    wrong = _wrong_answers(lab)
    checks = _exercise_of_each_check(nb)
    client = notebook_client(nb, timeout=240, kernel_name="python3",
                             resources={"metadata": {"path": str(path.parent)}})
    with kernel_environment():  # Agg, and no widgets: one would swallow an error the test must see
        return _execute_in_kernel(client, nb, path, lab, wrong, checks)


def _execute_in_kernel(client, nb, path, lab, wrong, checks) -> LabRun:
    run = LabRun(path)
    exercise_cells = {}
    serial = [0]

    def attempt(exercise, what, code, check_cell, index):
        for src in (code, check_cell.source):
            cell = nbformat.v4.new_code_cell(src)
            try:
                client.execute_cell(cell, index, store_history=False)
            except nbclient.exceptions.CellExecutionError as e:
                run.attempts.append(_read_verdict(client, index, Attempt(
                    exercise, what, False, e.ename, e.evalue, _outputs_text(cell.outputs)), serial))
                return
        if what == "reference":  # what a learner who got it right reads
            run.long_lines += [(index, line) for line in _long_lines(cell.outputs)]
        run.attempts.append(_read_verdict(client, index, Attempt(exercise, what, True,
                                                                 text=_outputs_text(cell.outputs)), serial))

    t0 = time.perf_counter()
    with client.setup_kernel():
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            t = time.perf_counter()
            try:
                client.execute_cell(cell, i)
            except nbclient.exceptions.CellExecutionError as e:
                run.error = f"cell {i} raised {e.ename}: {e.evalue}"
                break
            run.cell_seconds[i] = time.perf_counter() - t
            run.long_lines += [(i, line) for line in _long_lines(cell.outputs)]
            run.last_source, run.last_text = cell.source, _outputs_text(cell.outputs)
            if "exercise" in _tags(cell):
                exercise_cells[_exercise_names(cell)[0]] = cell
            if i not in checks:
                continue
            ex = checks[i]
            run.attempts.append(_read_verdict(client, i, Attempt(ex, "as written", True,
                                                                 text=_outputs_text(cell.outputs)), serial))
            number = int(ex.removeprefix("exercise"))
            extra = time.perf_counter()
            for description, code in wrong.get(number, []):
                attempt(ex, description, code, cell, i)
            attempt(ex, "reference", f"from fpsim.labs.solutions.lab{lab:02d} import {ex}", cell, i)
            for src in (exercise_cells[ex].source, cell.source):  # the learner's cell again, and its verdict
                client.execute_cell(nbformat.v4.new_code_cell(src), i, store_history=False)
            t0 += time.perf_counter() - extra  # the lab's own time leaves out these extra runs
    run.seconds = time.perf_counter() - t0
    return run


def test_long_lines_are_the_text_lines_over_the_width():
    """Stream and plain-text lines over WIDTH count; a figure's or an HTML output's text/plain does not."""
    line = "x" * WIDTH
    outputs = [{"output_type": "stream", "name": "stdout", "text": f"{line}\n{line}y\nshort"},
               {"output_type": "execute_result", "data": {"text/plain": f"'{line}'"}},
               {"output_type": "display_data", "data": {"text/plain": line * 2, "image/png": ""}},
               {"output_type": "display_data", "data": {"text/plain": line * 2, "text/html": "<table/>"}}]
    assert _long_lines(outputs) == [f"{line}y", f"'{line}'"]


def test_there_are_labs():
    assert len(NOTEBOOKS) >= 1
    assert (LABS / "README.md").exists()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_without_outputs(path):
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert not cell.get("outputs"), f"{path.name}: a code cell has stored outputs"
            assert cell.get("execution_count") is None, f"{path.name}: a code cell has an execution count"


_CELL_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")  # nbformat 4.5's schema for a cell's id


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_cell_has_a_unique_id(path):
    """nbformat 4.5 or later, and an id on every cell, unique in the notebook, as the schema spells
    one; read as stored (``nbformat.read`` would only warn and make missing ids up)."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    version = (nb.get("nbformat"), nb.get("nbformat_minor"))
    assert version >= (4, 5), f"{path.name}: nbformat {version[0]}.{version[1]}; cell ids need 4.5 or later"
    ids = [c.get("id") for c in nb["cells"]]
    missing = [i for i, x in enumerate(ids) if x is None]
    assert not missing, f"{path.name}: cells {missing} have no id"
    bad = [x for x in ids if not isinstance(x, str) or not _CELL_ID.fullmatch(x)]
    assert not bad, f"{path.name}: ids not of 1-64 letters, digits, '-' or '_': {bad}"
    repeated = sorted({x for x in ids if ids.count(x) > 1})
    assert not repeated, f"{path.name}: ids on more than one cell: {repeated}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_exercise_has_a_solution_and_three_wrong_answers(path):
    nb = nbformat.read(path, as_version=4)
    lab = _lab_number(path)
    solutions = importlib.import_module(f"fpsim.labs.solutions.lab{lab:02d}")
    all_wrong = _wrong_answers(lab)
    checks = _exercise_of_each_check(nb)
    exercises = sorted(set(checks.values()))
    assert len(exercises) >= 2, f"{path.name}: needs 2+ exercises with self-checks"
    for ex in exercises:
        n = int(ex.removeprefix("exercise"))
        assert callable(getattr(solutions, ex, None)), f"{path.name}: no reference solution for {ex}"
        wrong = all_wrong.get(n, [])
        assert len(wrong) >= 3, f"{path.name}: {ex} has {len(wrong)} wrong answers; at least 3 are needed"
        for description, code in wrong:
            assert re.search(rf"^def {ex}\(", code, flags=re.M), f"{path.name}: wrong answer {description!r} defines no {ex}"
    assert set(all_wrong) <= {int(e.removeprefix("exercise")) for e in exercises}, \
        f"{path.name}: wrong_answers/lab{lab:02d}.py has answers for exercises the notebook does not check"


def test_the_package_ships_no_wrong_answers():
    """The wrong answers are the tests' own: no module of ``fpsim.labs.solutions`` holds a ``WRONG``
    table, and every file in wrong_answers/ belongs to a lab notebook."""
    import pkgutil

    import fpsim.labs.solutions as solutions

    modules = [m.name for m in pkgutil.iter_modules(solutions.__path__)]
    assert len(modules) == len(NOTEBOOKS)
    for name in modules:
        assert not hasattr(importlib.import_module(f"{solutions.__name__}.{name}"), "WRONG"), name
    files = sorted(WRONG_ANSWERS.glob("lab*.py"))
    assert {int(f.stem.removeprefix("lab")) for f in files} == {_lab_number(p) for p in NOTEBOOKS}


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_runs_as_written(path):
    run = _execute(path)
    assert not run.error, f"{path.name}: {run.error}"
    for a in run.of("as written"):  # unanswered exercises are reported, not failed
        assert a.status == "not attempted" and "not attempted yet" in a.text, \
            f"{path.name}: {a.exercise} check gave {a.status!r} and printed {a.text!r}"
    exercises = len({a.exercise for a in run.of("as written")})
    assert "summary(" in run.last_source, f"{path.name}: the last code cell does not print summary({_lab_number(path)})"
    assert f"0 of {exercises} checks passed" in run.last_text and run.last_text.count("not attempted") == exercises, \
        f"{path.name}: the summary at the end says {run.last_text!r}"
    long = [f"  cell {i} ({len(line)} chars): {line}" for i, line in run.long_lines]
    assert not long, f"{path.name}: lines over {WIDTH} characters (JupyterLab wraps them):\n" + "\n".join(long)
    slowest = max(run.cell_seconds, key=run.cell_seconds.get)
    if run.seconds > LAB_SECONDS:  # reported, not failed: a loaded machine is slow (fpsim bench --labs times labs)
        warnings.warn(f"{path.name} took {run.seconds:.0f} s (slowest: cell {slowest}, "
                      f"{run.cell_seconds[slowest]:.1f} s); a lab should run in under a minute", stacklevel=1)


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_self_checks_pass_with_reference_solutions(path):
    run = _execute(path)
    assert not run.error, f"{path.name}: {run.error}"
    refs = run.of("reference")
    assert refs, f"{path.name}: no check ran with a reference solution"
    for a in refs:
        assert a.ok and a.status == "passed" and "passed" in a.text, \
            f"{path.name}: {a.exercise} with the reference solution: {a.status}: {a.message} {a.ename} {a.text!r}"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_wrong_answers_fail_and_say_what_was_expected(path):
    run = _execute(path)
    assert not run.error, f"{path.name}: {run.error}"
    wrong = run.of("wrong")
    assert wrong, f"{path.name}: no wrong answer was tried"
    problems = []
    for a in wrong:
        if not a.ok:  # a check reports; it never raises, so the lab runs on
            problems.append(f"{a.exercise}, {a.what!r}: the cell raised {a.ename}: {a.evalue}")
        elif a.status != "not right yet":
            problems.append(f"{a.exercise}, {a.what!r}: the check gave {a.status!r} ({a.text.strip()!r})")
        elif "expected" not in a.message or "\n" in a.message or "not right yet" not in a.text:
            problems.append(f"{a.exercise}, {a.what!r}: the verdict does not say in one line what was expected: "
                            f"{a.message!r}")
        elif "Traceback" in a.text or any(len(line) > 100 for line in a.text.splitlines()):
            problems.append(f"{a.exercise}, {a.what!r}: the verdict is not short lines: {a.text!r}")
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


_HIDE_TORCH = '''
import sys


class _NoTorch:
    """Make "import torch" fail as if PyTorch were not installed (the labs' tests hide it)."""

    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None


sys.meta_path.insert(0, _NoTorch())
'''


@pytest.mark.slow
@pytest.mark.parametrize(("lab", "exercises"), [(11, 2), (14, 2), (16, 3)])
def test_the_pytorch_labs_skip_cleanly_without_pytorch(tmp_path, lab, exercises):
    """Labs 11, 14 and 16 in a kernel where PyTorch cannot be imported: no error, a printed
    sentence saying what was skipped, and every exercise still checked (here: not attempted)."""
    path = next((p for p in NOTEBOOKS if _lab_number(p) == lab), None)
    if path is None:
        pytest.skip(f"no lab {lab}")
    (tmp_path / "sitecustomize.py").write_text(_HIDE_TORCH)
    nb = nbformat.read(path, as_version=4)
    client = notebook_client(nb, timeout=240, kernel_name="python3",
                             resources={"metadata": {"path": str(path.parent)}})
    with kernel_environment(PYTHONPATH=os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)):
        client.execute()
    text = "".join(_outputs_text(c.get("outputs", [])) for c in nb.cells if c.cell_type == "code")
    assert "skipped: PyTorch is not installed here" in text
    assert "PyTorch found" not in text
    assert text.count("not attempted yet") == exercises
