"""The `fpsim` commands under an unusable environment - each defect reproduced here
first, then pinned: one line on stderr and exit 2, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fpsim import backend as B

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def fpsim_cmd(*argv, env=None, timeout=300):
    env = {**os.environ, "PYTHONPATH": ROOT, "OPENBLAS_NUM_THREADS": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "fpsim.tools.cli", *map(str, argv)], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


@pytest.mark.skipif(B.BACKENDS["cupy"].available(), reason="CuPy with a GPU is available here")
def test_fpsim_backend_cupy_without_a_gpu_is_one_line_naming_the_variable():
    out = fpsim_cmd("compare", "--recipes", "fp32", "--steps", "1", "--figure", "none", "--quiet",
                    env={"FPSIM_BACKEND": "cupy"})
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("fpsim compare: error: ") and last.endswith(
        "the environment variable FPSIM_BACKEND='cupy' names a backend that is not available here (it needs CuPy "
        "and a CUDA GPU); unset it or set FPSIM_BACKEND=numpy")


@pytest.mark.skipif(B.BACKENDS["cupy"].available(), reason="CuPy with a GPU is available here")
def test_fpsim_formats_still_runs_with_an_unusable_fpsim_backend():
    out = fpsim_cmd("formats", env={"FPSIM_BACKEND": "cupy"})
    assert out.returncode == 0 and "float16" in out.stdout, out.stderr


# -- the tiny GPT's task and the training loop check their settings ------------------------------

@pytest.mark.parametrize("kwargs, match", [
    ({"warmup": -5}, "TinyGPTTask: warmup must be an integer >= 0, got -5"),
    ({"steps": 2.7}, "TinyGPTTask: steps must be an integer >= 1, got 2.7"),
    ({"batch": True}, "TinyGPTTask: batch must be an integer >= 1, got True"),
    ({"lr": -1.0}, "TinyGPTTask: lr must be a finite number > 0"),
    ({"data_seed": -1}, "TinyGPTTask: data_seed must be an integer >= 0, got -1"),
    ({"data_seed": 1.5}, "TinyGPTTask: data_seed must be an integer >= 0, got 1.5"),
    ({"qk_scale": "a"}, "qk_scale must be a finite number, got 'a'"),
    ({"ln_acc": "bogus"}, "ln_acc must be None, 'input' or a format name"),
])
def test_tinygpt_task_refuses_bad_settings_naming_them(kwargs, match):
    from fpsim.experiments.tinygpt import TinyGPTTask

    with pytest.raises(ValueError, match=match):
        TinyGPTTask(**kwargs)


@pytest.mark.parametrize("kwargs, match", [({"steps": 2.7}, "steps must be an integer >= 1, got 2.7"),
                                           ({"steps": 0}, "steps must be an integer >= 1, got 0"),
                                           ({"seed": -1}, "seed must be an integer >= 0, got -1"),
                                           ({"seed": 1.5}, "seed must be an integer >= 0, got 1.5")])
def test_train_refuses_fractional_steps_and_bad_seeds_before_training(kwargs, match):
    from fpsim.experiments import TinyGPTTask, train

    with pytest.raises(ValueError, match=match):
        train(TinyGPTTask(), "fp32", **kwargs)


# -- compare --figure: a place that cannot be written fails before the runs -----------------------

def _unwritable(tmp_path):
    """A folder this process cannot write into: read-only for an ordinary user; /proc for root."""
    if os.geteuid() != 0:
        d = tmp_path / "ro"
        d.mkdir()
        d.chmod(0o555)
        return d
    if not os.path.isdir("/proc/self"):
        pytest.skip("running as root without /proc: no folder root cannot write")
    return "/proc/self"


def test_compare_figure_into_an_unwritable_place_fails_before_any_run(tmp_path):
    where = _unwritable(tmp_path)
    out = fpsim_cmd("compare", "--recipes", "fp32", "--steps", "400", "--quiet", "--figure", f"{where}/f.png",
                    timeout=60)  # 400 steps would take minutes: the error comes first
    assert out.returncode == 2 and "Traceback" not in out.stderr and out.stdout == ""
    assert out.stderr.strip().splitlines()[-1].startswith(f"fpsim compare: error: --figure {where}/f.png: cannot "
                                                          "write there (")
    assert "--figure none" not in out.stderr  # the user named the place; the default was not used


def test_compare_default_figure_in_an_unwritable_folder_suggests_figure_none(tmp_path):
    where = _unwritable(tmp_path)
    env = {**os.environ, "PYTHONPATH": ROOT, "OPENBLAS_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", "fpsim.tools.cli", "compare", "--recipes", "fp32", "--steps", "400",
                          "--quiet"], capture_output=True, text=True, timeout=60, env=env, cwd=where)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1].endswith("or --figure none")


def test_compare_figure_under_a_file_size_limit_keeps_the_table_and_says_it_was_the_figure(tmp_path):
    """``ulimit -f``: the table is out, then the figure's write fails (EFBIG): one line naming the
    figure, exit 1, and neither a truncated PNG nor the temporary left in the folder."""
    import resource

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 1024, resource.RLIM_INFINITY))

    env = {**os.environ, "PYTHONPATH": ROOT, "OPENBLAS_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", "fpsim.tools.cli", "compare", "--recipes", "fp32", "bf16-pure",
                          "--steps", "2", "--quiet", "--figure", str(tmp_path / "f.png")], capture_output=True,
                         text=True, timeout=120, env=env, cwd=ROOT, preexec_fn=small_files)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert "\nfp32 " in out.stdout and "\nbf16-pure " in out.stdout  # the table stands
    assert out.stderr.strip().splitlines()[-1] == (f"fpsim compare: error: --figure {tmp_path / 'f.png'}: the figure "
                                                   "could not be written (File too large); the results above are "
                                                   "complete")
    assert list(tmp_path.iterdir()) == []


def test_compare_figure_whose_folder_cannot_be_written_by_then_is_one_line_after_the_table(tmp_path, monkeypatch,
                                                                                           capsys):
    """The place was writable when checked, not when the figure is saved (a folder made read-only
    or removed meanwhile): one line saying it was the figure; the JSON printed before it stands."""
    import json

    from matplotlib.figure import Figure

    from fpsim.tools import cli

    def refuse(self, fname, **kw):
        raise PermissionError(13, "Permission denied", str(fname))

    monkeypatch.setattr(Figure, "savefig", refuse)
    rc = cli.main(["compare", "--recipes", "fp32", "--steps", "1", "--quiet", "--json", "--figure",
                   str(tmp_path / "f.png")])
    out, err = capsys.readouterr()
    assert rc == 1 and list(json.loads(out)) == ["fp32"]
    assert err.strip().splitlines()[-1] == (f"fpsim compare: error: --figure {tmp_path / 'f.png'}: the figure could "
                                            "not be written (Permission denied); the results above are complete")
    assert list(tmp_path.iterdir()) == []


# -- bench --labs: no Jupyter, a lab that raises, a file that is no notebook ---------------------

def test_bench_labs_without_nbclient_is_one_line():
    code = ("import sys; sys.modules['nbclient'] = None\nfrom fpsim.tools import cli\n"
            "sys.exit(cli.main(['bench', '--labs', 'x.ipynb']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": ROOT})
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip() == ("fpsim bench: error: fpsim bench --labs runs the notebooks with nbclient and "
                                  "nbformat; nbclient is not installed here (pip install -e '.[labs]')")


def test_bench_labs_names_each_failing_lab_and_still_times_the_others(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    bad, good, junk = tmp_path / "01_bad.ipynb", tmp_path / "02_good.ipynb", tmp_path / "03_junk.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell("1 / 0")]
    nbformat.write(nb, bad)
    nb.cells = [nbformat.v4.new_code_cell("y = 2")]
    nbformat.write(nb, good)
    junk.write_text("not json")
    out = fpsim_cmd("bench", "--labs", bad, good, junk, timeout=300)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert "02_good.ipynb" in out.stdout and "01_bad" not in out.stdout
    ours = [ln for ln in out.stderr.splitlines() if ln.startswith("fpsim bench --labs:")]
    assert ours == ["fpsim bench --labs: 01_bad.ipynb failed at cell 1: ZeroDivisionError: division by zero",
                    f"fpsim bench --labs: {junk}: not a readable notebook (NotJSONError: Notebook does not appear "
                    "to be JSON: 'not json')"]


def test_bench_labs_unknown_name_is_a_usage_error_naming_it_and_the_labs(capsys):
    """``bench --labs NOSUCH`` exited 1 after trying to run it; now argparse's code 2, one line, nothing run."""
    pytest.importorskip("nbclient")
    pytest.importorskip("nbformat")
    from fpsim.tools.bench.labtime import lab_paths
    from fpsim.tools.cli import main

    assert main(["bench", "--labs", "NOSUCH"]) == 2
    out, err = capsys.readouterr()
    known = ", ".join(p.stem for p in lab_paths())
    assert out == "" and err == (f"fpsim bench: error: --labs NOSUCH: no such notebook, nor a lab of that number or "
                                 f"name; the labs are {known} (name one by number, name or path)\n")
    assert "01_anatomy_of_a_float" in known


def test_bench_labs_names_a_lab_by_number_name_or_file(tmp_path):
    from fpsim.tools.bench.labtime import resolve_labs

    for n in ("01_a.ipynb", "08_b.ipynb", "notes.ipynb"):
        (tmp_path / n).write_text("{}")
    other = tmp_path / "notes.ipynb"
    assert resolve_labs(["8", "01", "08_b", "01_a.ipynb", other], tmp_path) == [
        tmp_path / "08_b.ipynb", tmp_path / "01_a.ipynb", tmp_path / "08_b.ipynb", tmp_path / "01_a.ipynb", other]
    with pytest.raises(ValueError, match=r"^--labs 3: no such notebook, nor a lab of that number or name; the labs are "
                                         r"01_a, 08_b \(name one by number, name or path\)$"):
        resolve_labs(["8", "3"], tmp_path)


# -- audit: hostile files name the file and the tensor; memory bounded by the declared shapes -----

def _npz_declaring(path, shape, data: bytes):
    import struct
    import zipfile

    hdr = f"{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}"
    hdr = hdr + " " * (118 - len(hdr)) + "\n"
    npy = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode() + data
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("x.npy", npy)


def test_audit_refuses_an_npz_member_declaring_more_than_it_holds_before_allocating(tmp_path):
    import tracemalloc

    from fpsim.tools.audit import read_tensors

    path = tmp_path / "bomb.npz"
    _npz_declaring(path, "(4000000000,)", b"\0" * 16)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError) as e:
            list(read_tensors(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(e.value) == (f"{path}: array 'x' declares shape (4000000000,) of float32 (16,000,000,000 bytes) but "
                            "its member holds 16 data bytes")
    assert peak < 10**6


@pytest.mark.parametrize("make, what", [
    (lambda torch: {"sp": torch.eye(3).to_sparse()}, "'sp' is a sparse tensor"),
    (lambda torch: {"q": torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.quint8)}, "'q' is a quantized tensor"),
])
def test_audit_names_the_file_and_tensor_that_is_not_a_dense_array(tmp_path, make, what):
    torch = pytest.importorskip("torch")
    import warnings

    path = tmp_path / "t.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.save(make(torch), path)
    out = fpsim_cmd("audit", path, "--no-figure", timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr and "Warning" not in out.stderr, out.stderr
    assert out.stderr.strip().startswith(f"fpsim audit: error: {path}: tensor {what}")


def test_audit_names_a_safetensors_dtype_that_is_not_a_name(tmp_path):
    import json
    import struct

    path = tmp_path / "t.safetensors"
    h = json.dumps({"a": {"dtype": ["F32"], "shape": [1], "data_offsets": [0, 4]}}).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"\0" * 4)
    out = fpsim_cmd("audit", path, "--no-figure", timeout=120)
    assert out.returncode == 2 and out.stderr.strip() == (f"fpsim audit: error: {path}: tensor 'a' has a dtype that "
                                                          "is not a name: ['F32']")
