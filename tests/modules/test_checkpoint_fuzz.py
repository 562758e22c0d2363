"""Property tests of ``checkpoint.load`` on damaged and edited files - bytes overwritten or cut,
entries dropped, renamed, reshaped, retyped or given junk values or formats - for an fp16 MLP with
Adam's master weights and a GradScaler, a block-scaled MLP and a tiny GPT: the load is whole
(exactly what the file holds) or ONE one-line ``ValueError`` / ``TypeError`` / ``OSError`` naming
the file, and the model, optimizer and scaler are left unchanged."""

from __future__ import annotations

import io

import numpy as np
import pytest
from helpers import state_bits
from support.fuzzing import Saved, corrupt, one_line

import fpsim
from fpsim import checkpoint, nn
from fpsim.formats import ALL_FORMATS, get_format
from fpsim.lowp import BlockScaling, convert

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

ALLOWED = (ValueError, TypeError, OSError)


def _ckpt_objects(seed):
    from fpsim import GradScaler
    from fpsim.optim import Adam

    model = nn.MLP([3, 4, 2], fmt="float16", seed=seed)
    opt = Adam(model.parameters(), lr=1e-2, master_weights=True)
    return model, opt, GradScaler(init_scale=2.0 ** (8 + seed))


def _state(model, opt, scaler):
    out = {f"m/{k}": v.tobytes() for k, v in model.state_dict().items()}
    out.update({f"o/{k}": v.tobytes() if isinstance(v, np.ndarray) else v for k, v in opt.state_dict().items()})
    out.update({f"s/{k}": v for k, v in scaler.state_dict().items()})
    return out


@pytest.fixture(scope="module")
def saved_checkpoint(tmp_path_factory):
    from fpsim import tensor

    tmp = tmp_path_factory.mktemp("ckpt")
    model, opt, scaler = _ckpt_objects(0)
    x = tensor(np.random.default_rng(0).standard_normal((5, 3)), "float16")
    nn.mse_loss(model(x).float(), tensor(np.zeros((5, 2)))).backward()
    opt.step()
    path = checkpoint.save(tmp / "ck.npz", model, opt, scaler=scaler)
    return Saved((tmp, path.read_bytes(), _state(model, opt, scaler)))


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_damaged_checkpoint_loads_whole_or_changes_nothing(saved_checkpoint, data):
    tmp, raw, saved = saved_checkpoint
    path = tmp / "bad.npz"
    path.write_bytes(corrupt(raw, data))
    model, opt, scaler = _ckpt_objects(1)
    before = _state(model, opt, scaler)
    try:
        checkpoint.load(path, model, opt, scaler=scaler)
    except ALLOWED as e:
        assert str(path) in str(e) or "left unchanged" in str(e), str(e)
        assert _state(model, opt, scaler) == before
        return
    assert _state(model, opt, scaler) == saved  # loaded: then exactly what was saved


def _edit(entries: dict, data) -> dict:
    """A readable checkpoint with wrong contents: entries dropped, renamed, reshaped, retyped or
    given junk values - what a hand-edited file or one from another program looks like."""
    out = dict(entries)
    for _ in range(data.draw(st.integers(1, 3), label="edits")):
        key = data.draw(st.sampled_from(sorted(out)), label="key")
        how = data.draw(st.sampled_from(["drop", "rename", "reshape", "retype", "junk", "format"]), label="how")
        v = out[key]
        if how == "drop":
            del out[key]
        elif how == "rename":
            out[key.replace("/", "/x", 1) if "/" in key else "x" + key] = out.pop(key)
        elif how == "reshape":
            out[key] = np.resize(v, (v.size + 1,)) if v.ndim else np.zeros(2, v.dtype)
        elif how == "retype":
            out[key] = v.astype(data.draw(st.sampled_from([np.float64, np.float32, np.int8, np.bool_]))) \
                if v.dtype.kind in "fiub" else np.asarray(1.5)
        elif how == "junk":
            out[key] = np.asarray(data.draw(st.sampled_from([-1, 0, 2**40, np.nan, np.inf, "abc", "Adam", "SGD"])))
        else:
            names = sorted(ALL_FORMATS) + ["fp4", "e8m0", "float64", "nope"]  # 4- / 6-bit and scale formats too
            out[key.split("#")[0] + "#fmt"] = np.asarray(data.draw(st.sampled_from(names)))
    return out


def _file_model_bits(path) -> dict:
    with np.load(path, allow_pickle=False) as z:
        return {k[len("model/"):]: z[k].view(get_format(str(z[k + "#fmt"])).dtype).tobytes()
                for k in z.files if k.startswith("model/") and "#" not in k}


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_edited_checkpoint_loads_whole_or_changes_nothing(saved_checkpoint, data):
    tmp, raw, saved = saved_checkpoint
    with np.load(io.BytesIO(raw), allow_pickle=False) as z:
        entries = {k: z[k] for k in z.files}
    path = tmp / "edited.npz"
    np.savez(path, **_edit(entries, data))
    model, opt, scaler = _ckpt_objects(1)
    before = _state(model, opt, scaler)
    try:
        checkpoint.load(path, model, opt, scaler=scaler)
    except ALLOWED as e:
        msg = str(e)
        assert "\n" not in msg and (str(path) in msg or "left unchanged" in msg), msg
        assert _state(model, opt, scaler) == before
        return
    got = {k[len("m/"):]: v for k, v in _state(model, opt, scaler).items() if k.startswith("m/")}
    assert got == _file_model_bits(path)  # loaded: the model holds exactly what the file says


def _gpt(seed):
    return nn.TinyGPT(11, 6, d_model=8, n_heads=2, n_layers=1, fmt="bfloat16", seed=seed)


def _blocky(seed):
    model = nn.MLP([8, 16, 4], fmt="float16", seed=seed)
    convert(model, BlockScaling("nvfp4", weight_block=(16, 16)))
    return model


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("models")
    out = {}
    for name, make in (("gpt", _gpt), ("blocky", _blocky)):
        m = make(0)
        out[name] = (checkpoint.save(tmp / f"{name}.npz", m).read_bytes(), state_bits(m))
    return Saved((tmp, out))


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data(), which=st.sampled_from([("gpt", _gpt), ("blocky", _blocky)]))
def test_block_and_transformer_checkpoints_load_whole_or_change_nothing(saved_models, data, which):
    import io

    tmp, saved = saved_models
    name, make = which
    raw, bits = saved[name]
    with np.load(io.BytesIO(raw), allow_pickle=False) as z:
        entries = {k: z[k] for k in z.files}
    if data.draw(st.booleans(), label="edit"):
        key = data.draw(st.sampled_from(sorted(entries)), label="key")
        how = data.draw(st.sampled_from(["drop", "format", "flip", "reshape"]), label="how")
        if how == "drop":
            del entries[key]
        elif how == "format":
            entries[key.split("#")[0] + "#fmt"] = np.asarray(data.draw(st.sampled_from(
                ["float16", "float4_e2m1fn", "float6_e3m2fn", "float8_e8m0fnu", "mxfp8", "float8_e5m2"])))
        elif how == "flip" and entries[key].dtype.kind == "u" and entries[key].size:
            a = entries[key].copy()
            a.reshape(-1)[data.draw(st.integers(0, a.size - 1))] ^= a.dtype.type(1)
            entries[key] = a
        else:
            entries[key] = np.zeros((entries[key].size + 1,), entries[key].dtype)
    path = tmp / f"{name}-edited.npz"
    np.savez(path, **entries)
    model = make(1)
    before = state_bits(model)
    try:
        checkpoint.load(path, model)
    except ALLOWED as e:
        assert one_line(e, str(path), "left unchanged"), str(e)
        assert state_bits(model) == before
        return
    with np.load(path, allow_pickle=False) as z:
        want = {k[len("model/"):]: z[k].tobytes() for k in z.files if k.startswith("model/") and "#" not in k}
    assert state_bits(model) == want  # loaded: exactly what the file holds
    if want == {k: v for k, v in bits.items()}:
        x = np.random.default_rng(0).integers(0, 11, (1, 4)) if name == "gpt" else \
            fpsim.tensor(np.ones((2, 8), np.float32), "float16")
        assert np.all(np.isfinite(model(x).numpy().astype(np.float64))) or name == "blocky"
