"""``fpsim audit`` where there is nothing to judge, a figure that cannot be written (or fails half
way) and a damaged safetensors header: the report still comes first, one error line follows, and
no half-written file is left."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli, strict_json

pytestmark = pytest.mark.both_backends  # every test here runs on numpy and numpy-f32 (conftest.py)


@pytest.mark.parametrize("arrays", [
    {"a": np.full(5, np.nan, np.float32), "b": np.array([np.inf, -np.inf], np.float16)},
    {"empty": np.zeros(0, np.float32)},
    {"zeros": np.zeros(3, np.float32)},
    {"ints": np.arange(4), "flags": np.ones(2, bool)},  # every tensor skipped
], ids=["nonfinite", "empty", "zeros", "skipped"])
def test_audit_with_no_finite_nonzero_value_says_so_and_fails(tmp_path, capsys, arrays):
    path = tmp_path / "g.npz"
    np.savez(path, **arrays)
    rc, out, err = run_cli(capsys, "audit", path)
    assert rc == 2
    assert "2^-30" not in out and "2^40" not in out  # the old, empty verdict "2^-30 .. 2^40"
    assert "nothing to judge" in out
    assert err.count("\n") == 1 and "nothing to judge" in err
    assert not (tmp_path / "g_audit.png").exists()
    rc, out, err = run_cli(capsys, "audit", path, "--json")
    d = strict_json(out)
    assert rc == 2 and d["nothing_to_judge"].startswith(str(path))
    assert all(f["scale_exponents"] is None for f in d["overall"]["formats"].values())


def test_audit_prints_the_report_before_a_figure_that_cannot_be_written(tmp_path, capsys):
    path = tmp_path / "g.npz"
    np.savez(path, g=np.float32([1e-8, 1.0]))
    rc, out, err = run_cli(capsys, "audit", path, "--formats", "fp16", "--out", tmp_path / "missing" / "x.png")
    assert rc == 2
    assert "2^2 .. 2^15" in out  # 1e-8 x 2^2 is float16's first survivor; 1.0 x 2^16 overflows
    assert "figure:" not in out
    assert err.count("\n") == 1 and "missing/x.png could not be written" in err


def test_audit_figure_that_fails_half_way_leaves_no_file(tmp_path, capsys, monkeypatch):
    from matplotlib.figure import Figure

    path = tmp_path / "g.npz"
    np.savez(path, g=np.float32([1e-8, 1.0]))

    def disk_full(self, fname, **kwargs):
        with open(fname, "wb") as fh:
            fh.write(b"\x89PNG half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", disk_full)
    rc, out, err = run_cli(capsys, "audit", path, "--formats", "fp16", "--out", tmp_path / "g.png")
    assert rc == 2 and "2^2 .. 2^15" in out and "No space left on device" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.npz"]
    monkeypatch.undo()
    rc, out, err = run_cli(capsys, "audit", path, "--formats", "fp16", "--out", tmp_path / "g.png")
    assert rc == 0 and (tmp_path / "g.png").read_bytes()[:4] == b"\x89PNG"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.npz", "g.png"]


def test_safetensors_shape_errors_name_the_file(tmp_path):
    from fpsim.tools.audit.tensorfiles import read_tensors

    for shape in ([-1, -4], [2, "x"], [4.5], 4):
        header = json.dumps({"a": {"dtype": "F32", "shape": shape, "data_offsets": [0, 16]}}).encode()
        path = tmp_path / "bad.safetensors"
        path.write_bytes(len(header).to_bytes(8, "little") + header + bytes(16))
        with pytest.raises(ValueError, match=r"bad\.safetensors: tensor 'a'"):
            list(read_tensors(path))
