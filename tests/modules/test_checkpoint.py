"""Checkpoints: bit-exact round trips of model and optimizer state (master weights, float16 /
bfloat16 params), training resumed after a load identical to uninterrupted training, and bad
files that raise clearly and change nothing."""

import numpy as np
import pytest
from helpers import bits

from fpsim import checkpoint, nn
from fpsim.optim import SGD, Adam
from fpsim.tensor import tensor

pytestmark = pytest.mark.both_backends  # every test here runs on numpy and numpy-f32 (conftest.py)

RNG = np.random.default_rng(0)
BATCHES = [(RNG.standard_normal((6, 3)).astype(np.float32), RNG.standard_normal((6, 2)).astype(np.float32))
           for _ in range(6)]

OPTIMIZERS = {
    "sgd-momentum-master": lambda p: SGD(p, lr=0.05, momentum=0.9, master_weights=True),
    "sgd-momentum": lambda p: SGD(p, lr=0.05, momentum=0.9),
    "adam-master": lambda p: Adam(p, lr=1e-2, master_weights=True),
    "adam": lambda p: Adam(p, lr=1e-2),
}


def make(fmt, kind, seed=0):
    model = nn.MLP([3, 5, 2], fmt=fmt, seed=seed)
    return model, OPTIMIZERS[kind](model.parameters())


def train(model, opt, batches):
    fmt = model[0].weight.fmt
    with np.errstate(all="ignore"):  # pure-float16 Adam blows up (test_nn_optim); its state still round-trips
        for x, y in batches:
            opt.zero_grad()
            nn.mse_loss(model(tensor(x, fmt)).to("float32"), y).backward()
            opt.step()


def snapshot(model, opt=None):
    """Every array of the state as raw bits (so -0, NaN payloads and bf16 all compare exactly)."""
    out = {f"model/{k}": bits(v).copy() for k, v in model.state_dict().items()}
    if opt is not None:
        for k, v in opt.state_dict().items():
            out[f"optim/{k}"] = bits(v).copy() if isinstance(v, np.ndarray) else v
    return out


def assert_same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert np.array_equal(a[k], b[k]), k
        if isinstance(a[k], np.ndarray):
            assert a[k].dtype == b[k].dtype, k


@pytest.mark.parametrize("kind", list(OPTIMIZERS))
@pytest.mark.parametrize("fmt", ["float32", "float16", "bfloat16"])
def test_round_trip_is_bit_exact_and_resumes_identically(tmp_path, fmt, kind):
    model, opt = make(fmt, kind)
    train(model, opt, BATCHES[:3])
    path = checkpoint.save(tmp_path / "ck.npz", model, opt)
    saved = snapshot(model, opt)

    model2, opt2 = make(fmt, kind, seed=7)  # different weights, fresh optimizer
    checkpoint.load(path, model2, opt2)
    assert_same(snapshot(model2, opt2), saved)
    assert [p.fmt.name for p in model2.parameters()] == [fmt] * 4

    train(model, opt, BATCHES[3:])  # uninterrupted
    train(model2, opt2, BATCHES[3:])  # resumed
    assert_same(snapshot(model2, opt2), snapshot(model, opt))


def test_file_is_plain_npz_of_raw_bits(tmp_path):
    model, opt = make("bfloat16", "adam-master")
    train(model, opt, BATCHES[:1])
    path = checkpoint.save(tmp_path / "ck.npz", model, opt)
    with np.load(path, allow_pickle=False) as z:
        files = set(z.files)
        w = z["model/0.weight"]
        assert w.dtype == np.uint16 and str(z["model/0.weight#fmt"]) == "bfloat16"
        assert np.array_equal(w, bits(model[0].weight.numpy()))
        assert z["optim/master.0"].dtype == np.uint32
        assert int(z["optim/step_count"]) == 1
    assert {"optim/state.0.exp_avg", "optim/state.0.exp_avg_sq", "optim/state.0.step"} <= files
    assert not (tmp_path / "ck.npz.tmp").exists()


def test_special_values_survive(tmp_path):
    model = nn.MLP([2, 2], fmt="float16", seed=0)
    vals = np.array([[-0.0, np.inf], [np.nan, 2.0**-24]], np.float16)
    model[0].weight.data = vals.copy()
    checkpoint.save(tmp_path / "ck.npz", model)
    other = nn.MLP([2, 2], fmt="float16", seed=1)
    checkpoint.load(tmp_path / "ck.npz", other)
    assert bits(other[0].weight.numpy()).tolist() == bits(vals).tolist()


def _corrupt(path, how):
    raw = path.read_bytes()
    if how == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    elif how == "flipped":
        b = bytearray(raw)
        i = raw.index(b"model/0.weight.npy") + 100  # inside that member's data: CRC mismatch
        b[i: i + 8] = bytes(8)
        path.write_bytes(bytes(b))
    else:
        path.write_bytes(b"not a checkpoint at all")


@pytest.mark.parametrize("how", ["truncated", "flipped", "garbage"])
def test_corrupt_file_raises_and_changes_nothing(tmp_path, how):
    model, opt = make("float16", "adam-master")
    train(model, opt, BATCHES[:2])
    path = checkpoint.save(tmp_path / "ck.npz", model, opt)
    _corrupt(path, how)
    target, topt = make("float16", "adam-master", seed=3)
    before = snapshot(target, topt)
    with pytest.raises(ValueError, match="ck.npz"):
        checkpoint.load(path, target, topt)
    assert_same(snapshot(target, topt), before)


def test_missing_file(tmp_path):
    model = nn.MLP([3, 2], seed=0)
    before = snapshot(model)
    with pytest.raises(FileNotFoundError, match="nope.npz"):
        checkpoint.load(tmp_path / "nope.npz", model)
    assert_same(snapshot(model), before)


def test_wrong_model_raises_and_changes_nothing(tmp_path):
    src = nn.MLP([3, 5, 2], seed=0)
    path = checkpoint.save(tmp_path / "ck.npz", src)
    for other, pattern in [(nn.MLP([3, 5, 5, 2], seed=1), r"missing \['4\.weight', '4\.bias'\]"),
                           (nn.MLP([3, 2], seed=1), r"unexpected \['2\.weight', '2\.bias'\]"),
                           (nn.MLP([4, 5, 2], seed=1), r"0\.weight: expected \(5, 4\), got \(5, 3\)")]:
        before = snapshot(other)
        with pytest.raises(ValueError, match=pattern):
            checkpoint.load(path, other)
        assert_same(snapshot(other), before)


def test_optimizer_mismatch_rolls_the_model_back(tmp_path):
    model, opt = make("float16", "sgd-momentum-master")
    train(model, opt, BATCHES[:2])
    path = checkpoint.save(tmp_path / "ck.npz", model, opt)
    target, topt = make("float16", "sgd-momentum", seed=4)  # no masters: the file's master.* do not fit
    before = snapshot(target, topt)
    with pytest.raises(ValueError, match=r"unexpected \['master\.0'"):
        checkpoint.load(path, target, topt)
    assert_same(snapshot(target, topt), before)
    model_only = checkpoint.save(tmp_path / "model.npz", model)
    with pytest.raises(ValueError, match="no optimizer state"):
        checkpoint.load(model_only, target, topt)
    assert_same(snapshot(target, topt), before)


class _FailingScaler:
    def state_dict(self):
        return {"scale": 1024.0}

    def load_state_dict(self, sd):
        raise ValueError("scaler state refused")


def test_scaler_failure_rolls_back_model_and_optimizer(tmp_path):
    model, opt = make("float16", "adam-master")
    train(model, opt, BATCHES[:2])
    path = checkpoint.save(tmp_path / "ck.npz", model, opt, scaler=_FailingScaler())
    with np.load(path, allow_pickle=False) as z:
        assert float(z["scaler/scale"]) == 1024.0
    target, topt = make("float16", "adam-master", seed=5)
    train(target, topt, BATCHES[2:3])
    before = snapshot(target, topt)
    with pytest.raises(ValueError, match="scaler state refused"):
        checkpoint.load(path, target, topt, scaler=_FailingScaler())
    assert_same(snapshot(target, topt), before)


def test_failed_save_keeps_the_earlier_file(tmp_path, monkeypatch):
    model = nn.MLP([3, 2], seed=0)
    path = checkpoint.save(tmp_path / "ck.npz", model)
    good = path.read_bytes()

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", boom)
    with pytest.raises(OSError, match="disk full"):
        checkpoint.save(path, nn.MLP([3, 2], seed=1))
    assert path.read_bytes() == good


# ------------------------------------------------------------------------------ fp8 scaling state


def make_fp8(seed=0, skip=()):
    import fpsim.lowp as fp8  # the package once called fpsim.fp8

    model = nn.MLP([3, 5, 2], seed=seed)
    group = fp8.convert(model, fp8.DelayedScaling(amax_history_len=4, amax_init=True), skip=skip)
    return model, Adam(model.parameters(), lr=1e-2), group


def train_fp8(model, opt, group, batches):
    for x, y in batches:
        opt.zero_grad()
        nn.mse_loss(model(tensor(x)), y).backward()
        opt.step()
        group.update()


def fp8_snapshot(group):
    return {k: (bits(v).copy() if isinstance(v, np.ndarray) and v.dtype.kind == "f" else np.asarray(v).copy())
            for k, v in group.state_dict().items()}


def test_fp8_scaling_state_round_trips_and_resumes_identically(tmp_path):
    model, opt, group = make_fp8()
    train_fp8(model, opt, group, BATCHES[:3])
    assert len(group["0.input"].amax_history) == 3 and group["2.grad_output"].scale > 1
    path = checkpoint.save(tmp_path / "ck.npz", model, opt, fp8=group)
    saved = fp8_snapshot(group)

    model2, opt2, group2 = make_fp8(seed=7)
    checkpoint.load(path, model2, opt2, fp8=group2)
    assert_same(fp8_snapshot(group2), saved)
    assert group2["0.weight"].amax_history == group["0.weight"].amax_history
    assert group2["2.grad_output"].counts == group["2.grad_output"].counts

    train_fp8(model, opt, group, BATCHES[3:])  # uninterrupted
    train_fp8(model2, opt2, group2, BATCHES[3:])  # resumed: same scales, so the same fp8 numbers
    assert_same(snapshot(model2, opt2), snapshot(model, opt))
    assert_same(fp8_snapshot(group2), fp8_snapshot(group))


def test_fp8_state_mismatch_raises_and_changes_nothing(tmp_path):
    model, opt, group = make_fp8()
    train_fp8(model, opt, group, BATCHES[:2])
    path = checkpoint.save(tmp_path / "ck.npz", model, opt, fp8=group)
    target, topt, tgroup = make_fp8(seed=5, skip="last")  # no fp8 state for layer 2
    train_fp8(target, topt, tgroup, BATCHES[2:3])
    before, fp8_before = snapshot(target, topt), fp8_snapshot(tgroup)
    with pytest.raises(ValueError, match=r"unexpected entry '2\.input/.*fp8 tensors: 0\.input"):
        checkpoint.load(path, target, topt, fp8=tgroup)
    assert_same(snapshot(target, topt), before)
    assert_same(fp8_snapshot(tgroup), fp8_before)
    plain = checkpoint.save(tmp_path / "plain.npz", model, opt)
    with pytest.raises(ValueError, match="holds no fp8 scaling state"):
        checkpoint.load(plain, target, topt, fp8=tgroup)


def test_fp8_state_dict_refuses_the_middle_of_a_step_but_a_load_there_works(tmp_path):
    model, opt, group = make_fp8()
    train_fp8(model, opt, group, BATCHES[:2])
    path = checkpoint.save(tmp_path / "ck.npz", model, opt, fp8=group)
    saved = fp8_snapshot(group)
    x, y = BATCHES[2]
    nn.mse_loss(model(tensor(x)), y).backward()  # casts done, update() not yet called
    with pytest.raises(RuntimeError, match="middle of a step"):
        group.state_dict()
    checkpoint.load(path, model, opt, fp8=group)  # "the step failed: back to the checkpoint"
    assert all(st.step_amax is None for st in group)
    assert_same(fp8_snapshot(group), saved)


@pytest.mark.parametrize("mid_step", [False, True])
def test_fp8_group_load_is_all_or_nothing(mid_step):
    """One bad entry in a LATER state (2.weight): nothing of the earlier states may stay loaded,
    between steps or in the middle of one."""
    model, opt, group = make_fp8()
    train_fp8(model, opt, group, BATCHES[:2])
    sd = group.state_dict()
    for k in sd:
        if k.startswith("0.") and k.endswith("/steps"):
            sd[k] += 5  # so a partial load of the earlier states would show
    if mid_step:
        x, y = BATCHES[2]
        nn.mse_loss(model(tensor(x)), y).backward()
    before = group._snapshot()
    cases = {"does not fit": ("2.weight/amax_history", np.zeros(9, np.float32)),  # amax_history_len=4
             "negative steps": ("2.weight/steps", -1),
             "saved for float8_e5m2": ("2.weight/format", "float8_e5m2"),
             "unreadable": ("2.weight/steps", "x"),
             "negative amax": ("2.weight/amax_history", np.float32([0.5, -1.0]))}
    for match, (k, v) in cases.items():
        with pytest.raises(ValueError, match=match):
            group.load_state_dict({**sd, k: v})
        assert group._snapshot() == before, match
    group.load_state_dict(sd)  # and the good one loads
    assert group["0.input"].steps == sd["0.input/steps"] and group["0.input"].step_amax is None


def test_fp8_restored_when_the_optimizer_fails_after_it(tmp_path):
    model, opt, group = make_fp8()
    train_fp8(model, opt, group, BATCHES[:2])
    path = checkpoint.save(tmp_path / "ck.npz", model, opt, fp8=group)
    target, _, tgroup = make_fp8(seed=5)
    topt = Adam(target.parameters(), lr=1e-2, master_weights=True)  # the file has no master weights
    train_fp8(target, topt, tgroup, BATCHES[2:4])
    before, fp8_before = snapshot(target, topt), fp8_snapshot(tgroup)
    with pytest.raises(ValueError, match="optimizer load_state_dict"):
        checkpoint.load(path, target, topt, fp8=tgroup)  # fp8 loads first, then the optimizer refuses
    assert_same(snapshot(target, topt), before)
    assert_same(fp8_snapshot(tgroup), fp8_before)


def test_init_pending_only_where_the_recipe_has_amax_init():
    import fpsim.lowp as fp8  # the package once called fpsim.fp8

    st = fp8.ScalingState("t", "e4m3", fp8.DelayedScaling(amax_history_len=4, amax_init=True))
    sd = st.state_dict()
    assert sd["init_pending"] == 1 and sd["format"] == "float8_e4m3fn"
    plain = fp8.ScalingState("t", "e4m3", fp8.DelayedScaling(amax_history_len=4))
    plain.load_state_dict(sd)
    assert plain._init_pending is False  # TE-style recipe: no init, whatever the file says
    assert fp8.ScalingState("t", "e4m3", fp8.CurrentScaling()).state_dict()["init_pending"] == 0
