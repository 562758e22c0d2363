"""The installed ``fpsim`` command: `formats` and `example` print the numbers of
shared/reference/numbers.md; bad input exits 2 with one line."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def fpsim_cmd():
    exe = Path(sys.executable).parent / "fpsim"  # the console script pip installed beside python
    return [str(exe)] if exe.exists() else [shutil.which("fpsim") or sys.executable, "-m", "fpsim"]


def run(*args, input=None):
    return subprocess.run([*fpsim_cmd(), *args], capture_output=True, text=True, timeout=120, input=input)


def test_example_prints_the_worked_examples():
    r = run("example")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    # (a) 1e-8, S = 1024
    assert "1.0251998901367188e-05" in out and "subnormal" in out and "+0.117%" in out
    assert "1.0011717677116394e-08" in out
    assert "2^13 = 8192" in out
    # (b) 2.45e-6, S = 2^15: subnormal, not normal
    b = out[out.index("(b)"):out.index("(c)")]
    assert re.search(r"2\.4437904357910156e-06 +subnormal", b) and "-0.253%" in b
    assert "0.08026123046875" in b and "normal" in b
    # (c) the vanishing update vanishes in float32 too
    c = out[out.index("(c)"):]
    assert c.count("update lost: w unchanged") == 3
    assert "float16   just above 2^-11" in c and "bfloat16  just above 2^-8" in c and "float32   just above 2^-24" in c


def test_example_with_options():
    r = run("example", "--grad", "3e-8", "--scale", "4096", "--format", "bf16")
    assert r.returncode == 0, r.stderr
    assert "format bfloat16" in r.stdout and "3.003515303134918e-08" in r.stdout
    r = run("example", "--grad", "3e-8", "--format", "fp16")  # 3e-8 is above the flush edge 2^-25
    assert "5.960464477539063e-08" in r.stdout


@pytest.mark.parametrize("args,needle", [(["example", "--format", "fp17"], "unknown format 'fp17'"),
                                         (["example", "--scale", "-2"], "expected a finite number > 0"),
                                         (["example", "--grad", "abc"], "argument --grad: expected a number, got 'abc'"),
                                         (["example", "--grad", "nan"], "argument --grad: expected a finite number, "
                                                                        "got 'nan'"),
                                         (["example", "--grad", "-inf"], "argument --grad: expected a finite number, "
                                                                         "got '-inf'")])
def test_bad_input_exits_2_with_a_message(args, needle):
    r = run(*args)
    assert r.returncode == 2
    assert needle in r.stderr and "Traceback" not in r.stderr
    assert r.stdout == ""  # refused before anything is printed ('--grad nan' printed case (a)'s heading first)


def test_formats_table():
    r = run("formats")
    assert r.returncode == 0, r.stderr
    lines = {ln.split()[0]: ln for ln in r.stdout.splitlines() if ln.strip()}
    assert "65504" in lines["float16"] and "2^-24 = 5.96046e-08" in lines["float16"]
    assert "2^-14 = 6.10352e-05" in lines["float16"] and "2.98023e-08" in lines["float16"]
    assert "448" in lines["float8_e4m3fn"] and "no (NaN only)" in lines["float8_e4m3fn"]
    assert "57344" in lines["float8_e5m2"] and "2^-16 = 1.52588e-05" in lines["float8_e5m2"]
    assert "3.38953e+38" in lines["bfloat16"] and "2^-133 = 9.18355e-41" in lines["bfloat16"]
    assert "2^-149 = 1.4013e-45" in lines["float32"]


def test_a_closed_pipe_is_not_an_error():
    p = subprocess.Popen([*fpsim_cmd(), "example"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # the reader leaves (as `| head -1` does) long before Python has started up
    assert p.wait(timeout=60) == 0
    assert b"Traceback" not in p.stderr.read()


def test_python_dash_m_fpsim_and_help():
    r = subprocess.run([sys.executable, "-m", "fpsim", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0
    for cmd in ("compare", "formats", "example", "audit", "figures", "bench", "gpu-check", "reproduce"):
        assert cmd in r.stdout


@pytest.mark.parametrize("argv", [["--help"], ["formats"], ["example", "--grad", "1e-8"]])
def test_light_commands_import_neither_matplotlib_nor_the_tools(argv):
    """Each command imports only what it runs: in a fresh interpreter, ``fpsim --help`` and
    ``fpsim formats`` leave matplotlib, the bench, audit, figures, gpu-check and the
    experiments unimported (the allocator setting every command makes is ctypes and os only)."""
    import subprocess
    import sys

    code = ("import contextlib, io, sys\nfrom fpsim.tools.cli import main\n"
            f"with contextlib.redirect_stdout(io.StringIO()):\n    try:\n        main({argv!r})\n"
            "    except SystemExit:\n        pass\n"
            "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib' or "
            "m.startswith(('fpsim.tools.', 'fpsim.experiments', 'tqdm')))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["fpsim.tools.allocator", "fpsim.tools.cli"]


def test_a_tool_command_imports_its_own_package_only():
    code = ("import contextlib, io, sys\nfrom fpsim.tools.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n    try:\n        main(['audit', '--help'])\n"
            "    except SystemExit:\n        pass\n"
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('fpsim.tools.') or "
            "m.split('.')[0] == 'matplotlib')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert "fpsim.tools.audit" in out and not [m for m in out if m.startswith(("fpsim.tools.bench",
                                                                              "fpsim.tools.gpu_check", "matplotlib"))]


def test_formats_all_lists_ocp_int8_and_every_p3109_format(capsys):
    from fpsim.tools import cli

    assert cli.main(["formats"]) == 0
    plain = capsys.readouterr().out
    assert "p3109_" not in plain.split("aliases:")[0] and "--all adds" in plain
    assert cli.main(["formats", "--all"]) == 0
    rows = capsys.readouterr().out.splitlines()
    names = [r.split()[0] for r in rows if r.startswith("p3109_")]
    assert len(names) == 132 == len(set(names))  # k = 3..8, p = 1..k, signed/unsigned, extended/finite
    # the OCP MX spec's INT8 element: i/64 for i in [-128, 127] - max 127/64, ulp(1) = 2^-6
    int8 = next(r for r in rows if r.startswith("ocp_int8"))
    assert "1.98438" in int8 and int8.count("2^-6 = 0.015625") == 2  # smallest value and eps alike
    # P3109 binary8 p=4 extended: max 224, bias 8, NaN at 0x80 (IEEE P3109 interim report)
    k8p4 = next(r for r in rows if r.startswith("p3109_k8p4se "))
    assert " 224 " in k8p4 and "NaN 0x80" in k8p4


# -- fpsim compare reads its tasks and recipes from the registries ----------------------------------

def _compare_args(*argv):
    from fpsim.tools import cli

    return cli.build_parser("compare").parse_args(["compare", *argv])


def test_compare_help_lists_every_registered_task_and_recipe(capsys):
    from fpsim.experiments import RECIPES, TASKS
    from fpsim.tools import cli

    with pytest.raises(SystemExit):
        cli.main(["compare", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name in TASKS:
        assert f"{name}: {TASKS[name].help_line()}" in " ".join(text.split()), name
    known = text.split("known: ")[1]
    assert all(name in known for name in RECIPES)
    assert "tinygpt 250" in text and "reference 150" in text  # --steps: each task's default


def test_a_registered_task_and_recipe_are_one_registration_each(capsys, tmp_path):
    """A task class registered in TASKS and a Recipe in RECIPES: both in --help, both run."""
    import json
    from dataclasses import dataclass

    import numpy as np

    from fpsim import nn, ops
    from fpsim.experiments import RECIPES, TASKS, Recipe, Task
    from fpsim.tensor import tensor

    @dataclass(frozen=True)
    class Halve(Task):
        """Learn y = x / 2 with one Linear."""

        steps: int = 3
        lr: float = 0.1
        default_recipes = ("fp32", "bf16-pure")
        figure_name = "halve.png"

        def model(self, seed=0):
            return nn.Sequential(nn.Linear(2, 2, seed=seed))

        def batches(self, recipe, backend):
            x = np.eye(2, dtype=np.float32)
            batch = (tensor(x, recipe.params, backend=backend), tensor(x / 2, "float32", backend=backend))
            return lambda step: batch

        def loss(self, model, batch, recipe):
            with recipe.forward_context():
                pred = model(batch[0])
            return ops.mse_loss(pred.to("float32"), batch[1])

    TASKS.register(Halve, "halve")
    RECIPES.register(Recipe("bf16-master-sgd-test", "bfloat16", master=True))
    try:
        from fpsim.tools import cli

        with pytest.raises(SystemExit):
            cli.main(["compare", "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "halve: Learn y = x / 2 with one Linear (default recipes fp32 bf16-pure)" in text
        assert "bf16-master-sgd-test" in text.split("known: ")[1]
        args = _compare_args("--task", "halve", "--quiet", "--json", "--figure", "none")
        assert args.func(args) == 0
        out, err = capsys.readouterr()
        assert list(json.loads(out)) == ["fp32", "bf16-pure"] and "Halve: 3 steps, adam lr 0.1, seed 0" in err
        args = _compare_args("--task", "halve", "--recipes", "bf16-master-sgd-test", "--quiet", "--figure",
                             str(tmp_path))
        assert args.func(args) == 0
        assert "bf16-master-sgd-test" in capsys.readouterr().out and (tmp_path / "compare_loss.png").exists()
    finally:
        TASKS.unregister("halve")
        RECIPES.unregister("bf16-master-sgd-test")


def test_provoke_overflow_needs_a_task_with_an_overflow_setting(capsys):
    args = _compare_args("--task", "reference", "--provoke-overflow", "--figure", "none")
    assert args.func(args) == 2
    assert "--provoke-overflow needs --task tinygpt (a task with an overflow setting), got --task reference" in (
        capsys.readouterr().err)


def test_what_the_commands_write_by_default_is_ignored_in_a_clone():
    """``fpsim compare``'s default figure (each task's, in figures/), ``fpsim reproduce``'s
    (figures/findings/) and ``fpsim audit``'s beside the dump land in a clone's tree: .gitignore
    keeps them out of ``git status``; the figures ``fpsim figures`` draws stay tracked."""
    from fpsim.experiments import TASKS

    root = Path(__file__).resolve().parents[2]
    if shutil.which("git") is None or not (root / ".git").exists():
        pytest.skip("needs git and a clone")
    outputs = [f"figures/{cls.figure_name}" for cls in TASKS.values()] + [
        "figures/findings/bf16-pure-stalls.png", "fpsim/resources/reference_grads_audit.png"]
    ignored = subprocess.run(["git", "check-ignore", "--no-index", *outputs], cwd=root, capture_output=True, text=True)
    assert sorted(ignored.stdout.split()) == sorted(outputs)
    tracked = subprocess.run(["git", "ls-files", "figures"], cwd=root, capture_output=True, text=True).stdout.split()
    assert tracked and subprocess.run(["git", "check-ignore", "--no-index", *tracked], cwd=root).returncode == 1
