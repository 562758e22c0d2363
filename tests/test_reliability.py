"""Issue 14: the defects found by trying fpsim as a new user would - each reproduced here
first, then pinned.  (The randomised search that keeps them out is tests/test_fuzz.py.)"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fpsim.tools import cli

pytestmark = pytest.mark.both_backends  # every test here runs on numpy and numpy-f32 (conftest.py)


def strict_json(text: str):
    """Parse as a strict parser would: NaN, Infinity and -Infinity are not JSON (RFC 8259)."""

    def refuse(token):
        raise ValueError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)


def run(capsys, *argv):
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


# -- 1. compare --json: strict JSON, null for a diverged run's numbers ---------------------------

def test_compare_json_is_strict_json_with_null_for_a_diverged_run(capsys):
    rc, out, err = run(capsys, "compare", "--recipes", "fp32", "fp16-pure", "--steps", "3", "--figure", "none",
                       "--json", "--quiet")
    assert rc == 0, err
    d = strict_json(out)
    bad, good = d["fp16-pure"], d["fp32"]
    assert bad["final_loss"] is None and bad["r2"] is None  # Adam's exp_avg_sq underflows: NaN at step 0
    assert bad["null_values"] == {"final_loss": "nan", "r2": "nan"}
    assert bad["failure"].startswith("step 0:")
    assert isinstance(good["final_loss"], float) and "null_values" not in good


def test_jsonout_replaces_every_non_finite_value_and_says_where():
    from fpsim.tools.jsonout import dumps, finite

    notes = {}
    obj = finite({"a": float("nan"), "b": [1.0, float("inf"), np.float32("-inf")], "c": {"d": np.float64(2.5)},
                  "e": np.int64(3), "f": np.array([np.nan, 1.0])}, notes)
    assert obj == {"a": None, "b": [1.0, None, None], "c": {"d": 2.5}, "e": 3, "f": [None, 1.0]}
    assert notes == {"a": "nan", "b": "2 of 3 values non-finite (-inf, inf)", "f": "1 of 2 values non-finite (nan)"}
    assert strict_json(dumps(obj)) == obj
    with pytest.raises(ValueError):
        dumps({"x": math.nan})  # allow_nan=False: it cannot come back


# -- 2. audit with nothing to judge ---------------------------------------------------------------

@pytest.mark.parametrize("arrays", [
    {"a": np.full(5, np.nan, np.float32), "b": np.array([np.inf, -np.inf], np.float16)},
    {"empty": np.zeros(0, np.float32)},
    {"zeros": np.zeros(3, np.float32)},
    {"ints": np.arange(4), "flags": np.ones(2, bool)},  # every tensor skipped
], ids=["nonfinite", "empty", "zeros", "skipped"])
def test_audit_with_no_finite_nonzero_value_says_so_and_fails(tmp_path, capsys, arrays):
    path = tmp_path / "g.npz"
    np.savez(path, **arrays)
    rc, out, err = run(capsys, "audit", path)
    assert rc == 2
    assert "2^-30" not in out and "2^40" not in out  # the old, empty verdict "2^-30 .. 2^40"
    assert "nothing to judge" in out
    assert err.count("\n") == 1 and "nothing to judge" in err
    assert not (tmp_path / "g_audit.png").exists()
    rc, out, err = run(capsys, "audit", path, "--json")
    d = strict_json(out)
    assert rc == 2 and d["nothing_to_judge"].startswith(str(path))
    assert all(f["scale_exponents"] is None for f in d["overall"]["formats"].values())


# -- 3. audit --out that cannot be written: the report first, then one error ------------------

def test_audit_prints_the_report_before_a_figure_that_cannot_be_written(tmp_path, capsys):
    path = tmp_path / "g.npz"
    np.savez(path, g=np.float32([1e-8, 1.0]))
    rc, out, err = run(capsys, "audit", path, "--formats", "fp16", "--out", tmp_path / "missing" / "x.png")
    assert rc == 2
    assert "2^2 .. 2^15" in out  # 1e-8 x 2^2 is float16's first survivor; 1.0 x 2^16 overflows
    assert "figure:" not in out
    assert err.count("\n") == 1 and "missing/x.png could not be written" in err


# -- 4. a checkpoint in another format: refused, or converted with a report -------------------

def _model(fmt, value, seed=0):
    from fpsim import nn

    m = nn.Linear(2, 2, fmt=fmt, seed=seed)
    m.weight.data = fpsim_cast(np.full((2, 2), value), fmt)
    return m


def fpsim_cast(x, fmt):
    from fpsim import cast

    return cast(x, fmt)


def _bits(model):
    return {k: v.tobytes() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("src_fmt, value, dst_fmt, overflow", [("bfloat16", 1e5, "float16", 4),
                                                               ("float32", 1000.0, "float8_e4m3fn", 4)])
def test_checkpoint_format_change_is_refused_by_default_and_reported_when_converted(tmp_path, src_fmt, value,
                                                                                  dst_fmt, overflow):
    from fpsim import checkpoint

    path = checkpoint.save(tmp_path / "ck.npz", _model(src_fmt, value))
    target = _model(dst_fmt, 0.5, seed=1)
    before = _bits(target)
    with pytest.raises(ValueError, match=rf"model/weight \({src_fmt} -> {dst_fmt}\).*convert_formats=True"):
        checkpoint.load(path, target)
    assert _bits(target) == before
    report = checkpoint.load(path, target, convert_formats=True)
    assert report["model/weight"] == {"from": src_fmt, "to": dst_fmt, "values": 4, "overflow": overflow,
                                      "underflow": 0, "inexact": overflow}
    assert report["model/bias"]["from"] == src_fmt and report["model/bias"]["overflow"] == 0
    w = target.weight.numpy().astype(np.float64)
    # bfloat16's 1e5 is 99840 > float16's 65504: inf; 1000 > e4m3fn's 448: NaN (it has no inf)
    assert np.all(np.isinf(w)) if dst_fmt == "float16" else np.all(np.isnan(w))


def test_checkpoint_in_the_same_format_loads_with_an_empty_report(tmp_path):
    from fpsim import checkpoint

    path = checkpoint.save(tmp_path / "ck.npz", _model("float16", 3.0))
    target = _model("float16", 0.5, seed=1)
    assert checkpoint.load(path, target) == {}
    assert float(target.weight.numpy()[0, 0]) == 3.0


# -- 5. an optimizer's state into another optimizer ------------------------------------------

def _trained_sgd(tmp_path):
    from fpsim import checkpoint, nn
    from fpsim.optim import SGD

    m = nn.Linear(2, 1, seed=0)
    opt = SGD(m.parameters(), lr=0.1, momentum=0.9)
    nn.mse_loss(m(fpsim_tensor([[1.0, 2.0]])), fpsim_tensor([[0.0]])).backward()
    opt.step()
    return checkpoint.save(tmp_path / "sgd.npz", m, opt)


def fpsim_tensor(x):
    from fpsim import tensor

    return tensor(np.asarray(x, np.float32))


def test_sgd_momentum_checkpoint_into_adam_is_refused_naming_both(tmp_path):
    from fpsim import checkpoint, nn
    from fpsim.optim import Adam

    path = _trained_sgd(tmp_path)
    m = nn.Linear(2, 1, seed=1)
    opt = Adam(m.parameters(), lr=0.1)
    before = _bits(m)
    with pytest.raises(ValueError, match="saved from 'SGD', this optimizer is Adam"):
        checkpoint.load(path, m, opt)
    assert _bits(m) == before and opt.state == [{}, {}] and opt.step_count == 0
    # a state dict without the type (hand-made, or older): the state names give it away
    sd = {k: v for k, v in opt.state_dict().items() if k != "optimizer"}
    from fpsim.optim import SGD

    sgd_sd = {k: v for k, v in SGD(nn.Linear(2, 1).parameters(), lr=0.1).state_dict().items()}
    sgd_sd.update({"state.0.momentum_buffer": np.zeros((1, 2), np.float32)})
    del sgd_sd["optimizer"]
    with pytest.raises(ValueError, match="momentum_buffer, which Adam does not keep"):
        opt.load_state_dict(sgd_sd)
    with pytest.raises(ValueError, match=r"state.0 lacks exp_avg_sq"):
        opt.load_state_dict({**sd, "state.0.step": 1, "state.0.exp_avg": np.zeros((1, 2), np.float32)})
    assert opt.state == [{}, {}]


# -- 7. non-finite hyperparameters ------------------------------------------------------------

NAN, INF = float("nan"), float("inf")
# (optimizer, arguments, the one that is bad, whether PyTorch 2.13 refuses it too)
BAD_HYPER = [
    ("SGD", {"lr": NAN}, "learning rate", False), ("SGD", {"lr": INF}, "learning rate", False),
    ("SGD", {"lr": 0.1, "momentum": NAN}, "momentum", False), ("SGD", {"lr": 0.1, "momentum": INF}, "momentum", False),
    ("SGD", {"lr": 0.1, "weight_decay": NAN}, "weight_decay", False),
    ("SGD", {"lr": 0.1, "momentum": 0.9, "dampening": NAN}, "dampening", False),
    ("Adam", {"eps": NAN}, "eps", True), ("Adam", {"eps": INF}, "eps", False), ("Adam", {"lr": NAN}, "learning rate", True),
    ("Adam", {"lr": INF}, "learning rate", False), ("Adam", {"betas": (NAN, 0.999)}, r"betas\[0\]", True),
    ("Adam", {"betas": (0.9, INF)}, r"betas\[1\]", True), ("Adam", {"weight_decay": NAN}, "weight_decay", True),
    ("AdamW", {"weight_decay": NAN}, "weight_decay", True), ("AdamW", {"betas": (0.9, NAN)}, r"betas\[1\]", True),
    ("AdamW", {"eps": NAN}, "eps", True),
]


@pytest.mark.parametrize("name, kwargs, arg, torch_refuses", BAD_HYPER, ids=[f"{n}-{a}" for n, _, a, _ in BAD_HYPER])
def test_non_finite_hyperparameters_are_refused_naming_the_argument(name, kwargs, arg, torch_refuses):
    from fpsim import nn, optim

    with pytest.raises(ValueError, match=rf"^{arg} must be a finite number"):
        getattr(optim, name)(nn.Linear(2, 2).parameters(), **kwargs)
    # PyTorch refuses the same with ValueError where it checks at all; where it takes NaN or inf
    # (SGD, an infinite lr or eps) fpsim's refusal is a deliberate departure (docs/guarantees.md)
    torch = pytest.importorskip("torch")
    try:
        getattr(torch.optim, name)([torch.zeros(2, requires_grad=True)], **kwargs)
        refused = False
    except ValueError:
        refused = True
    assert refused == torch_refuses


@pytest.mark.parametrize("kwargs", [{"init_scale": NAN}, {"init_scale": INF}, {"growth_factor": NAN},
                                    {"growth_factor": INF}, {"backoff_factor": NAN}, {"min_scale": NAN}])
def test_scaler_refuses_non_finite_settings(kwargs):
    from fpsim import GradScaler, StaticScaler

    with pytest.raises(ValueError, match=next(iter(kwargs)).split("_")[0]):
        GradScaler(**kwargs)
    with pytest.raises(ValueError, match="init_scale"):
        StaticScaler(scale=NAN)
    torch = pytest.importorskip("torch")
    if "min_scale" not in kwargs:  # PyTorch takes every one of these (a departure: docs/guarantees.md)
        torch.amp.GradScaler("cpu", **kwargs)


# -- 8. a failed save leaves no .tmp -----------------------------------------------------------

def test_failed_save_leaves_no_tmp_and_keeps_the_earlier_file(tmp_path, monkeypatch):
    from fpsim import checkpoint, nn

    path = checkpoint.save(tmp_path / "ck.npz", nn.Linear(2, 2, seed=0))
    good = path.read_bytes()
    (tmp_path / "dir.npz").mkdir()
    with pytest.raises(OSError):
        checkpoint.save(tmp_path / "dir.npz", nn.Linear(2, 2, seed=1))  # the target is a directory
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck.npz", "dir.npz"]

    def disk_full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", disk_full)
    with pytest.raises(OSError, match="No space left"):
        checkpoint.save(path, nn.Linear(2, 2, seed=1))
    assert path.read_bytes() == good
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck.npz", "dir.npz"]


# -- 10. a model-only checkpoint loaded with a scaler -------------------------------------------

def test_model_only_checkpoint_with_a_scaler_says_what_is_missing(tmp_path):
    from fpsim import GradScaler, checkpoint, nn

    path = checkpoint.save(tmp_path / "m.npz", nn.Linear(2, 2, seed=0))
    m = nn.Linear(2, 2, seed=1)
    before = _bits(m)
    with pytest.raises(ValueError, match="holds no loss-scaler state") as e:
        checkpoint.load(path, m, scaler=GradScaler())
    assert "disabled GradScaler" not in str(e.value).split("(")[0]
    assert _bits(m) == before
    checkpoint.load(path, m, scaler=GradScaler(enabled=False))  # nothing to load into: fine


# -- 6. the scale hint considers overflow ------------------------------------------------------

def test_example_hint_for_a_gradient_that_overflows(capsys):
    rc, out, err = run(capsys, "example", "--grad", 1000, "--format", "e4m3")
    assert rc == 0, err
    a = out[:out.index("(c)")]
    assert "2^0 = 1" not in a
    # e4m3fn: max 448, min normal 2^-6; 1000 x 2^-1 = 500 rounds past 464 -> NaN, 1000 x 2^-2 = 250 is normal,
    # 1000 x 2^-16 = 0.01526 rounds up to 8 x 2^-9 = 2^-6 (normal), 1000 x 2^-17 stays subnormal
    assert "no scale >= 1 helps" in a and "S = 2^-16 .. 2^-2" in a
    assert a.count("overflowed to NaN") == 4


def test_normal_scale_range_against_the_format_limits():
    from fpsim.examples import normal_scale_range, smallest_normalizing_scale

    assert normal_scale_range(1e-8, "float16") == (13, 42)  # 1e-8 x 2^13 >= 2^-14; x 2^43 = 87960 > 65504
    assert normal_scale_range(-1e-8, "float16") == (13, 42)
    assert normal_scale_range(1e38, "bfloat16") == (-252, 1)
    assert smallest_normalizing_scale(1e-8, "float16") == 2.0**13
    with pytest.raises(ValueError, match="overflows float8_e4m3fn"):
        smallest_normalizing_scale(1000.0, "e4m3")


def test_example_takes_negative_numbers_and_prints_no_numpy_warnings(capsys):
    rc, out, err = run(capsys, "example", "--grad", "-1e-8")
    assert rc == 0, err
    assert "g = -1e-08 cast straight to float16" in out and "-1.0251998901367188e-05" in out
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a numpy RuntimeWarning would fail here
        rc, out, err = run(capsys, "example", "--grad", "1e38", "--scale", "1e30", "--format", "bf16")
    assert rc == 0 and err == "" and "overflowed to inf" in out
    rc, out, err = run(capsys, "example", "--grad", "-inf")
    assert rc == 2 and "grad must be a finite number, got -inf" in err


# -- 10. the smaller ones ---------------------------------------------------------------------

@pytest.mark.parametrize("rounding", ["nearest", "toward_zero", "stochastic"])
@pytest.mark.parametrize("saturate", [False, True])
def test_zero_d_inputs_come_back_as_zero_d_arrays_in_every_rounding_mode(rounding, saturate):
    from fpsim import cast, round_to

    for x in (1.1, np.float64(1.1), np.float32(1.1), np.array(1.1), np.float16(1.1)):
        for fn in (cast, round_to):
            r = fn(x, "e4m3", rounding, saturate=saturate, seed=0)
            assert type(r) is np.ndarray and r.shape == (), (fn.__name__, type(x))
    assert cast(1.1, "fp16", rounding, seed=0).dtype == np.float16


def test_safetensors_shape_errors_name_the_file(tmp_path):
    from fpsim.tools.audit.tensorfiles import read_tensors

    for shape in ([-1, -4], [2, "x"], [4.5], 4):
        header = json.dumps({"a": {"dtype": "F32", "shape": shape, "data_offsets": [0, 16]}}).encode()
        path = tmp_path / "bad.safetensors"
        path.write_bytes(len(header).to_bytes(8, "little") + header + bytes(16))
        with pytest.raises(ValueError, match=r"bad\.safetensors: tensor 'a'"):
            list(read_tensors(path))


def test_closed_stdout_is_an_error():
    import subprocess
    import sys

    # started with stdout closed (`fpsim formats >&-`): Python has no sys.stdout, print() would drop every line
    r = subprocess.run(["sh", "-c", f'"{sys.executable}" -m fpsim formats >&-'], stderr=subprocess.PIPE, timeout=60)
    assert r.returncode == 2 and r.stderr == b"fpsim formats: error: standard output is closed; nothing would be seen\n"
    # closed after start: the write fails (EBADF), one line, exit 2
    r = subprocess.run([sys.executable, "-c", "import sys, os; os.close(1); from fpsim.tools.cli import main; "
                        "sys.exit(main(['formats']))"], stderr=subprocess.PIPE, timeout=60)
    assert r.returncode == 2 and r.stderr == b"fpsim formats: error: [Errno 9] Bad file descriptor\n"
    r = subprocess.run([sys.executable, "-m", "fpsim", "formats"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       timeout=60)
    assert r.returncode == 0


def _graph(x):
    """The same graph in fpsim and PyTorch (same code): tanh and a product save tensors in both."""
    return (x * x).tanh().sum()


def test_backward_twice_raises_as_pytorch_does_and_retain_graph_accumulates():
    torch = pytest.importorskip("torch")
    from fpsim import tensor

    v = np.array([0.5, -0.75, 0.25], np.float32)  # away from tanh's saturation, where 1 - y*y cancels
    tx = torch.tensor(v, requires_grad=True)
    tl = _graph(tx)
    tl.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        tl.backward()
    x = tensor(v, requires_grad=True)
    loss = _graph(x)
    loss.backward()
    once = x.grad.numpy().copy()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()
    assert np.array_equal(x.grad.numpy(), once)  # nothing accumulated by the refused call
    np.testing.assert_allclose(once, tx.grad.numpy(), rtol=2e-7)
    # retain_graph=True: walk it twice, the gradient doubles - in both
    tx.grad = None
    tl = _graph(tx)
    tl.backward(retain_graph=True)
    tl.backward()
    x.grad = None
    loss = _graph(x)
    loss.backward(retain_graph=True)
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=2e-7)
    np.testing.assert_array_equal(x.grad.numpy(), 2 * once)
    with pytest.raises(RuntimeError, match="second time"):
        loss.backward()  # the last call did not retain it


def test_a_graph_of_saved_nothing_is_freed_too_a_departure_from_pytorch():
    torch = pytest.importorskip("torch")
    from fpsim import tensor

    tx = torch.ones(3, requires_grad=True)
    tl = (tx + 1).sum()
    tl.backward()
    tl.backward()  # PyTorch: add and sum save no tensors, so nothing was freed
    assert tx.grad.tolist() == [2.0] * 3
    x = tensor(np.ones(3), requires_grad=True)
    loss = (x + 1).sum()
    loss.backward()
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        loss.backward()  # fpsim frees every graph it walked (docs/guarantees.md)
    assert x.grad.numpy().tolist() == [1.0] * 3


# -- docs/guarantees.md: every test the Guarantees page cites exists --------------------------------------

def test_every_test_the_guarantees_section_cites_exists():
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    section = (root / "docs" / "guarantees.md").read_text()
    cited = re.findall(r"`([^`]*test_[^`]*)`", section)
    assert len(cited) >= 15
    current = None
    for item in cited:
        m = re.fullmatch(r"(?:((?:\w+/)*test_\w+\.py)::)?(test_\w+\*?)|(?:tests/)?((?:\w+/)*test_\w+\.py)", item)
        assert m, f"cannot read the citation {item!r}"
        if m.group(3):
            assert (root / "tests" / m.group(3)).exists(), item
            continue
        file, name = m.group(1), m.group(2)
        current = file or current  # a bare name is in the file last named
        text = (root / "tests" / current).read_text()
        pattern = rf"def {re.escape(name.rstrip('*'))}" + (r"\w*" if name.endswith("*") else r"\(")
        assert re.search(pattern, text), f"{current}::{name}"


def test_example_at_the_ends_of_float32(capsys):
    rc, out, err = run(capsys, "example", "--grad", "5e-324", "--format", "e5m2")
    assert rc == 0, err
    assert "g is 0 in float32 already" in out
    rc, out, err = run(capsys, "example", "--grad", "1e-40", "--format", "e5m2")
    # 1e-40 x 2^119 = 6.6e-5 >= e5m2's 2^-14; x 2^148 = 3.6e4 <= 57344, x 2^149 overflows
    assert rc == 0 and "2^119 = 6.64614e+35 (up to 2^148" in out
    for argv in (["--grad", "1.7e308"], ["--scale", "1e300"]):
        rc, out, err = run(capsys, "example", *argv)
        assert rc == 2 and "float32 number" in err and err.count("\n") == 1


def test_audit_figure_that_fails_half_way_leaves_no_file(tmp_path, capsys, monkeypatch):
    from matplotlib.figure import Figure

    path = tmp_path / "g.npz"
    np.savez(path, g=np.float32([1e-8, 1.0]))

    def disk_full(self, fname, **kwargs):
        with open(fname, "wb") as fh:
            fh.write(b"\x89PNG half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", disk_full)
    rc, out, err = run(capsys, "audit", path, "--formats", "fp16", "--out", tmp_path / "g.png")
    assert rc == 2 and "2^2 .. 2^15" in out and "No space left on device" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.npz"]
    monkeypatch.undo()
    rc, out, err = run(capsys, "audit", path, "--formats", "fp16", "--out", tmp_path / "g.png")
    assert rc == 0 and (tmp_path / "g.png").read_bytes()[:4] == b"\x89PNG"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.npz", "g.png"]


def test_environment_is_restored_exceptions_included(monkeypatch):
    """state.environment: set inside (a child process would inherit it), as it was afterwards -
    a variable that was not set is removed again - also when the block raises."""
    import os

    from fpsim import state

    monkeypatch.setenv("FPSIM_TEST_KEPT", "before")
    monkeypatch.delenv("FPSIM_TEST_NEW", raising=False)
    with pytest.raises(KeyError):
        with state.environment({"FPSIM_TEST_KEPT": "inside", "FPSIM_TEST_NEW": "1"}):
            assert os.environ["FPSIM_TEST_KEPT"] == "inside" and os.environ["FPSIM_TEST_NEW"] == "1"
            raise KeyError("boom")
    assert os.environ["FPSIM_TEST_KEPT"] == "before" and "FPSIM_TEST_NEW" not in os.environ
