"""The labs ship with the package: a wheel built from this repository carries the nineteen notebooks
(and the README and example gradient dump they read), and ``fpsim labs`` / ``fpsim labs --copy``
work from that wheel installed into a fresh virtual environment, run from a folder outside the
checkout.

The wheel is built from a copy of the sources (so the build writes no build/ or egg-info into the
checkout) without build isolation (so nothing is downloaded: the running environment's setuptools
builds it).  The virtual environment sees the running one's packages (numpy, ml_dtypes, ...)
through ``--system-site-packages`` and, where the tests run inside a virtual environment
themselves, a .pth file naming its site-packages; fpsim itself comes only from the wheel.
"""

import os
import shutil
import site
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[2]
LABS = sorted(p.name for p in (ROOT / "labs").glob("[0-9][0-9]_*.ipynb"))


def _package_dirs() -> set[str]:
    """Every folder of fpsim/ holding a module or data, as a package name (fpsim.tools.audit)."""
    out = set()
    for path in (ROOT / "fpsim").rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            out.add(".".join(path.parent.relative_to(ROOT).parts))
    return out


def test_pyproject_names_every_package():
    """The packages are listed by name (one of them, the notebooks, is labs/ mapped into fpsim/): a
    subpackage missing from the list would be missing from the wheel."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    assert listed - {"fpsim.labs.notebooks"} == _package_dirs()
    assert config["package-dir"] == {"fpsim.labs.notebooks": "labs"}


def _build_wheel(tmp: Path) -> Path:
    pytest.importorskip("setuptools", minversion="77", reason="building the wheel needs setuptools >= 77")
    src = tmp / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.nbi", "*.nbc", ".ipynb_checkpoints")
    shutil.copytree(ROOT / "fpsim", src / "fpsim", ignore=ignore)
    shutil.copytree(ROOT / "labs", src / "labs", ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    out = tmp / "wheel"
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(out)], check=True, capture_output=True, text=True)
    return next(out.glob("fpsim-*.whl"))


def _environment(tmp: Path, wheel: Path) -> Path:
    """A fresh virtual environment with the wheel installed (and nothing else of its own); its bin/
    (Scripts/ on Windows)."""
    env = tmp / "venv"
    # no pip of its own (ensurepip takes seconds): the running pip installs into it (--python)
    venv.create(env, system_site_packages=True, with_pip=False)
    bin_dir = env / ("Scripts" if os.name == "nt" else "bin")
    python = bin_dir / ("python.exe" if os.name == "nt" else "python")
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    # the running environment's packages, after the new one's own (a path, not a site dir: its .pth
    # files, an editable fpsim's finder among them, are not run)
    Path(purelib, "running_env.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q",
                    str(wheel)], check=True, capture_output=True, text=True)
    return bin_dir


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    wheel = _build_wheel(tmp)
    return wheel, _environment(tmp, wheel), tmp_path_factory.mktemp("elsewhere")


def _fpsim(bin_dir: Path, cwd: Path, *args) -> subprocess.CompletedProcess:
    """``fpsim ARGS`` of the fresh environment, run in ``cwd``.  JUPYTER_PATH: nbconvert's templates
    are data files of the running environment, which the .pth file does not bring along."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "")])
    env["JUPYTER_PATH"] = os.pathsep.join([str(Path(sys.prefix, "share", "jupyter")), env.get("JUPYTER_PATH", "")])
    exe = bin_dir / ("fpsim.exe" if os.name == "nt" else "fpsim")
    return subprocess.run([str(exe), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_the_wheel_carries_the_labs_and_every_module(installed):
    wheel, _, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"fpsim/labs/notebooks/{n}" for n in LABS} | {"fpsim/labs/notebooks/README.md"} <= names
    assert "fpsim/resources/reference_grads.npz" in names  # lab 05's example dump (fpsim.tools.figures)
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "fpsim").rglob("*.py")}
    assert modules <= names, sorted(modules - names)[:5]
    assert len(LABS) == 19


@pytest.mark.slow
def test_fpsim_labs_lists_them_from_the_installed_package(installed):
    _, bin_dir, elsewhere = installed
    r = _fpsim(bin_dir, elsewhere, "labs")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == LABS
    assert "site-packages" in r.stderr and str(Path("fpsim", "labs", "notebooks")) in r.stderr
    assert str(ROOT) not in r.stderr  # not the checkout's labs/
    assert "--labs-dir" not in r.stderr


@pytest.mark.slow
def test_fpsim_labs_copy_from_the_installed_package(installed):
    _, bin_dir, elsewhere = installed
    r = _fpsim(bin_dir, elsewhere, "labs", "--copy", "course")
    assert r.returncode == 0, r.stderr
    course = elsewhere / "course"
    assert sorted(p.name for p in course.iterdir()) == sorted([*LABS, "README.md"])
    for name in LABS:
        assert (course / name).read_bytes() == (ROOT / "labs" / name).read_bytes()
    assert "open them with: jupyter lab course" in r.stderr
    answered = course / LABS[1]
    answered.write_text(answered.read_text() + " ")
    r = _fpsim(bin_dir, elsewhere, "labs", "--copy", "course")
    assert r.returncode == 0 and f"kept {Path('course') / LABS[1]}" in r.stderr, r.stderr
    assert answered.read_text().endswith(" ")


@pytest.mark.slow
def test_a_lab_runs_from_the_installed_package(installed):
    """Lab 05 (the one that reads a file: the example gradient dump) run by the installed fpsim, in a
    kernel of the fresh environment, as HTML - what it reads came with the wheel."""
    pytest.importorskip("nbclient")
    pytest.importorskip("latex2mathml")
    _, bin_dir, elsewhere = installed
    r = _fpsim(bin_dir, elsewhere, "labs", "--html", "pages", "--lab", "5")
    assert r.returncode == 0, r.stderr[-2000:]
    page = (elsewhere / "pages" / "05_gradient_histograms.html").read_text()
    assert "Traceback" not in page and "not attempted yet" in page
