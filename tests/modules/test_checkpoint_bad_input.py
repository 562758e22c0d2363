"""``fpsim.checkpoint`` with a file that does not fit what it is loaded into - another format,
another optimizer, no scaler state - and a save that fails: each refused naming what differs (or
converted with a report, when asked), and nothing already in memory or on disk changed."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import state_bits

pytestmark = pytest.mark.both_backends  # every test here runs on numpy and numpy-f32 (conftest.py)


def _model(fmt, value, seed=0):
    from fpsim import nn

    m = nn.Linear(2, 2, fmt=fmt, seed=seed)
    m.weight.data = fpsim_cast(np.full((2, 2), value), fmt)
    return m


def fpsim_cast(x, fmt):
    from fpsim import cast

    return cast(x, fmt)


@pytest.mark.parametrize("src_fmt, value, dst_fmt, overflow", [("bfloat16", 1e5, "float16", 4),
                                                               ("float32", 1000.0, "float8_e4m3fn", 4)])
def test_checkpoint_format_change_is_refused_by_default_and_reported_when_converted(tmp_path, src_fmt, value,
                                                                                  dst_fmt, overflow):
    from fpsim import checkpoint

    path = checkpoint.save(tmp_path / "ck.npz", _model(src_fmt, value))
    target = _model(dst_fmt, 0.5, seed=1)
    before = state_bits(target)
    with pytest.raises(ValueError, match=rf"model/weight \({src_fmt} -> {dst_fmt}\).*convert_formats=True"):
        checkpoint.load(path, target)
    assert state_bits(target) == before
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
    before = state_bits(m)
    with pytest.raises(ValueError, match="saved from 'SGD', this optimizer is Adam"):
        checkpoint.load(path, m, opt)
    assert state_bits(m) == before and opt.state == [{}, {}] and opt.step_count == 0
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


def test_model_only_checkpoint_with_a_scaler_says_what_is_missing(tmp_path):
    from fpsim import GradScaler, checkpoint, nn

    path = checkpoint.save(tmp_path / "m.npz", nn.Linear(2, 2, seed=0))
    m = nn.Linear(2, 2, seed=1)
    before = state_bits(m)
    with pytest.raises(ValueError, match="holds no loss-scaler state") as e:
        checkpoint.load(path, m, scaler=GradScaler())
    assert "disabled GradScaler" not in str(e.value).split("(")[0]
    assert state_bits(m) == before
    checkpoint.load(path, m, scaler=GradScaler(enabled=False))  # nothing to load into: fine
