"""fpsim.optim_state: the optimizer-state formats against independent references - bitsandbytes'
dynamic map rebuilt with torch by bitsandbytes' own algorithm, the nearest code by brute force over
all 256, linear codes from float64, COAT's expansion by its defining property - their memory, and
Adam / Muon reading and writing them (float32 state the same bits as the optimizer's own)."""

import ml_dtypes
import numpy as np
import pytest

import fpsim
from fpsim.optim import Adam
from fpsim.optim_state import STATE_FORMATS, bytes_per_value, dynamic_map, get_state_format


def _bnb_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8):
    """bitsandbytes.functional.create_dynamic_map, as bitsandbytes writes it (torch float32)."""
    torch = pytest.importorskip("torch")
    data = []
    non_sign_bits = total_bits - 1
    for i in range(max_exponent_bits):
        items = int(2 ** (i + non_sign_bits - max_exponent_bits) + 1 if signed
                    else 2 ** (i + non_sign_bits - max_exponent_bits + 1) + 1)
        boundaries = torch.linspace(0.1, 1, items)
        means = (boundaries[:-1] + boundaries[1:]) / 2.0
        data += (10 ** (-(max_exponent_bits - 1) + i) * means).tolist()
        if signed:
            data += (-10 ** (-(max_exponent_bits - 1) + i) * means).tolist()
    data += [0, 1.0]
    data += [0] * (256 - len(data))
    data.sort()
    return torch.tensor(data).numpy()


@pytest.mark.parametrize("signed", [True, False])
def test_the_dynamic_map_is_bitsandbytes(signed):
    table = dynamic_map(signed)
    assert table.dtype == np.float32 and table.size == 256 and np.all(np.diff(table) >= 0)
    assert np.array_equal(table, _bnb_dynamic_map(signed))
    assert table.max() == 1.0 and (table.min() == -table[table < 1].max() if signed else table.min() == 0)
    # seven decades: the smallest non-zero magnitude is in [1e-7, 1e-6)
    assert 1e-7 < np.abs(table[table != 0]).min() < 1e-6


def _x(shape=(3000,), scale=1e-3, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def test_int8_dynamic_codes_are_the_nearest_of_the_256():
    f = STATE_FORMATS["int8-dynamic"]
    for signed, x in ((True, _x()), (False, _x() ** 2)):
        st = f.store(x, signed)
        table = dynamic_map(signed).astype(np.float64)
        assert st.codes.size == x.size  # codes for the values only, no padding stored
        blocks = np.zeros(2 * 2048, np.float32)
        blocks[: x.size] = x
        blocks = blocks.reshape(2, 2048)
        amax = np.abs(blocks).max(axis=1)
        xn = (blocks / amax[:, None]).astype(np.float64)
        d = np.abs(xn[..., None] - table)
        best = d.argmin(axis=-1)  # argmin takes the first: the smaller of a tie
        want = (best - 128).astype(np.int8) if signed else best.astype(np.uint8)
        assert np.array_equal(st.codes, want.ravel()[: x.size]) and np.array_equal(st.scales, amax)
        assert np.array_equal(f.load(st), (table[best] * amax[:, None]).astype(np.float32).ravel()[: x.size])


def test_int8_linear_codes_from_float64():
    f = STATE_FORMATS["int8-linear"]
    for signed, x in ((True, _x()), (False, _x() ** 2)):
        st = f.store(x, signed)
        padded = np.concatenate([x, np.zeros(2 * 2048 - x.size, np.float32)]).reshape(2, 2048).astype(np.float64)
        scale = (np.abs(padded).max(axis=1) / (127 if signed else 255)).astype(np.float32)
        codes = np.rint(padded / scale.astype(np.float64)[:, None])  # the float32 quotient rounds alike
        assert np.array_equal(st.codes.astype(np.float64), codes.ravel()[: x.size]) and np.array_equal(st.scales, scale)
        back = f.load(st)
        assert np.abs(back - x).max() <= scale.max() / 2 * (1 + 1e-6)
    # the failure the finding measures: linear codes flush the small second moments to zero
    v = _x() ** 2
    assert (f.load(f.store(v, False)) == 0).mean() > 0.05 > (STATE_FORMATS["int8-dynamic"].load(
        STATE_FORMATS["int8-dynamic"].store(v, False)) == 0).mean()


def test_coat_expansion_fills_e4m3s_range_and_comes_back():
    f = STATE_FORMATS["e4m3-coat"]
    for signed, x in ((True, _x((1024,))), (False, _x((1024,)) ** 2)):
        st = f.store(x, signed)
        a = np.abs(x.reshape(8, 128)).astype(np.float64)
        lo, hi = np.where(a > 0, a, np.inf).min(axis=1), a.max(axis=1)
        k = np.log(448 / 2.0**-6) / np.log(hi / lo)
        assert np.allclose(st.k, k, rtol=1e-6)
        # after the expansion the group's range is e4m3's normal range, its largest value 448
        assert np.array_equal(st.scales, hi.astype(np.float32))
        y = (a / hi[:, None]) ** k[:, None] * 448
        assert np.allclose(y.max(axis=1), 448, rtol=1e-6)
        assert np.allclose(np.where(a > 0, y, np.inf).min(axis=1), 2.0**-6, rtol=1e-4)  # 448 / R_e4m3
        assert np.all(np.abs(st.codes.astype(np.float64).reshape(8, 128)) <= 448)
        back = f.load(st).astype(np.float64)
        # e4m3's relative step (2^-3, half of it by rounding) taken back through the 1/k power
        bound = (1 + 2.0**-4) ** (1 / k.min()) - 1 + 1e-5
        assert np.all(np.abs(back - x) <= bound * np.abs(x)) and np.all(np.sign(back) == np.sign(x))


def test_bfloat16_state_rounds_to_nearest_or_stochastically_without_bias():
    x = _x((4096,))
    near = STATE_FORMATS["bfloat16"]
    assert np.array_equal(near.load(near.store(x)), fpsim.round_to(x, "bfloat16"))
    sr = STATE_FORMATS["bfloat16-sr"]
    rng = np.random.default_rng(1)
    draws = np.mean([sr.load(sr.store(x, rng=rng)).astype(np.float64) for _ in range(200)], axis=0)
    err_near = np.abs(fpsim.round_to(x, "bfloat16").astype(np.float64) - x).mean()
    assert np.abs(draws - x).mean() < 0.2 * err_near


def test_bytes_per_value_counts_codes_and_scales():
    assert bytes_per_value("float32") == 4 and bytes_per_value("bfloat16") == 2
    assert bytes_per_value("int8-linear") == bytes_per_value("int8-dynamic") == 1 + 4 / 2048
    assert bytes_per_value("e4m3-coat") == 1 + 8 / 128
    with pytest.raises(ValueError, match="unknown state_format 'int4'; known: float32"):
        get_state_format("int4")


def _adam_run(state_format, steps=5):
    rng = np.random.default_rng(2)
    p = fpsim.tensor(rng.standard_normal((32, 16)).astype(np.float32), "float32", requires_grad=True)
    opt = Adam([p], lr=1e-2, state_format=state_format, seed=0)
    for _ in range(steps):
        p.grad = fpsim.tensor((rng.standard_normal((32, 16)) * 1e-3).astype(np.float32), "float32")
        opt.step()
    return p.f32(), opt


def test_adam_with_float32_state_format_is_the_same_bits_as_plain_adam():
    assert np.array_equal(_adam_run(None)[0], _adam_run("float32")[0])


def test_adam_keeps_its_moments_in_the_state_format():
    w, opt = _adam_run("int8-dynamic")
    st = opt.state[0]
    assert st["exp_avg"].codes.dtype == np.int8 and st["exp_avg_sq"].codes.dtype == np.uint8 and st["step"] == 5
    ref = _adam_run(None)[0]
    assert 0 < np.abs(w - ref).max() < 1e-2  # close to float32 state, not equal


@pytest.mark.parametrize("name", ["int8-linear", "int8-dynamic", "e4m3-coat"])
def test_a_block_holding_nan_loads_as_nan_and_the_rest_as_before(name):
    f = STATE_FORMATS[name]
    x = _x((4096,))
    bad = x.copy()
    bad[5] = np.nan
    with np.errstate(all="raise"):  # no NaN ever cast to an integer code
        st = f.store(bad)
    back, ref = f.load(st), f.load(f.store(x))
    assert np.isnan(back[: f.block]).all() and np.array_equal(back[f.block:], ref[f.block:])


def test_a_stored_state_reads_as_float32_like_a_tensor():
    st = STATE_FORMATS["int8-dynamic"].store(_x((100,)))
    assert np.array_equal(st.f32(), STATE_FORMATS["int8-dynamic"].load(st)) and st.f32().dtype == np.float32


def _resumed(cls, state_format, update_rounding="nearest", via=None):
    """(uninterrupted, resumed): two optimizers stepped 3 times on the same gradients, the second
    built afresh after 3 steps and loaded from the first's state dict, then both 2 more steps."""
    rng = np.random.default_rng(5)
    grads = [(rng.standard_normal((32, 16)) * 1e-3).astype(np.float32) for _ in range(5)]
    w0 = np.random.default_rng(2).standard_normal((32, 16)).astype(np.float32)

    def build(w):
        p = fpsim.tensor(w, "bfloat16" if update_rounding != "nearest" else "float32", requires_grad=True)
        return p, cls([p], lr=1e-2, state_format=state_format, update_rounding=update_rounding, seed=0)

    def step(p, opt, g):
        p.grad = fpsim.tensor(g, p.fmt)
        opt.step()

    p, opt = build(w0)
    for g in grads[:3]:
        step(p, opt, g)
    sd = via(opt.state_dict()) if via else opt.state_dict()
    q, fresh = build(np.zeros_like(w0))
    q.data = p.data.copy()
    fresh.load_state_dict(sd)
    for g in grads[3:]:
        step(p, opt, g)
        step(q, fresh, g)
    return (p, opt), (q, fresh)


def _bits(opt):
    return {k: np.atleast_1d(v).view(np.uint8).tobytes() for k, v in opt.state_dict().items() if k != "optimizer"}


@pytest.mark.parametrize("cls", [Adam, fpsim.optim.Muon])
@pytest.mark.parametrize("name", list(STATE_FORMATS))
def test_state_held_in_a_state_format_round_trips_through_the_state_dict(cls, name):
    (p, opt), (q, fresh) = _resumed(cls, name)
    assert np.array_equal(p.numpy().view(np.uint32), q.numpy().view(np.uint32))
    assert _bits(opt) == _bits(fresh)  # the codes, scales and k of every moment, and the generator
    sd = opt.state_dict()
    key = "state.0.exp_avg" if cls is Adam else "state.0.momentum_buffer"
    st = opt.state[0][key.split(".")[2]]
    assert sd["state_format"] == name and sd[f"{key}.codes"].dtype == st.codes.dtype
    assert np.array_equal(sd[f"{key}.codes"].view(np.uint8), st.codes.view(np.uint8))
    assert (f"{key}.scales" in sd) == (st.scales is not None) and (f"{key}.k" in sd) == (name == "e4m3-coat")


def test_a_bfloat16_state_dict_holds_the_moments_as_bfloat16_bits():
    (p, opt), _ = _resumed(Adam, "bfloat16")
    sd = opt.state_dict()
    m = sd["state.0.exp_avg.codes"]
    assert m.dtype == ml_dtypes.bfloat16 and m.shape == (32, 16) and "state.0.exp_avg.scales" not in sd
    assert np.array_equal(m.astype(np.float32), opt.state[0]["exp_avg"].f32())
    assert "rng_state" not in sd  # nearest: no draws to resume


@pytest.mark.parametrize("state_format, update_rounding", [("bfloat16-sr", "nearest"), (None, "stochastic")])
def test_a_stochastic_optimizer_resumes_its_generator(state_format, update_rounding):
    (p, opt), (q, fresh) = _resumed(Adam, state_format, update_rounding)
    assert opt.state_dict()["rng_state"].dtype == np.uint64
    assert p.numpy().dtype == q.numpy().dtype and p.numpy().tobytes() == q.numpy().tobytes()
    assert _bits(opt) == _bits(fresh)
    words = opt.state_dict()["rng_state"]
    assert int(words[2]) << 64 | int(words[3]) == opt._rng.bit_generator.state["state"]["inc"]


def test_a_state_format_checkpoint_file_resumes_bit_for_bit(tmp_path):
    model = fpsim.nn.MLP([8, 16, 4], seed=0)
    x = fpsim.tensor(np.random.default_rng(1).standard_normal((5, 8)).astype(np.float32))

    def step(m, opt):
        opt.zero_grad()
        (m(x) * m(x)).mean().backward()
        opt.step()

    opt = Adam(model.parameters(), lr=1e-2, state_format="e4m3-coat", seed=0)
    for _ in range(3):
        step(model, opt)
    fpsim.checkpoint.save(tmp_path / "c.npz", model, opt)
    model2 = fpsim.nn.MLP([8, 16, 4], seed=1)
    opt2 = Adam(model2.parameters(), lr=1e-2, state_format="e4m3-coat", seed=0)
    assert fpsim.checkpoint.load(tmp_path / "c.npz", model2, opt2) == {}
    for _ in range(2):
        step(model, opt)
        step(model2, opt2)
    assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(model.parameters(), model2.parameters()))
    assert _bits(opt) == _bits(opt2)


def test_a_state_dict_that_does_not_fit_the_state_format_is_refused():
    (_, opt), _ = _resumed(Adam, "int8-linear")
    sd, before = opt.state_dict(), _bits(opt)
    rng = np.random.default_rng(2)
    other = Adam([fpsim.tensor(rng.standard_normal((32, 16)).astype(np.float32), "float32", requires_grad=True)],
                 state_format="int8-dynamic")
    with pytest.raises(ValueError, match="saved with state_format 'int8-linear', this optimizer keeps 'int8-dynamic'"):
        other.load_state_dict(sd)
    plain = Adam([fpsim.tensor(np.ones((32, 16), np.float32), "float32", requires_grad=True)])
    with pytest.raises(ValueError, match="saved with state_format 'int8-linear', this optimizer keeps None"):
        plain.load_state_dict(sd)
    bad = dict(sd, **{"state.0.exp_avg.codes": sd["state.0.exp_avg.codes"].astype(np.uint8)})
    with pytest.raises(ValueError, match=r"state.0.exp_avg.codes must be int8 \(512,\) in state_format 'int8-linear', "
                                         r"got uint8 \(512,\)"):
        opt.load_state_dict(bad)
    short = {k: v for k, v in sd.items() if k != "state.0.exp_avg_sq.scales"}
    with pytest.raises(ValueError, match=r"state.0.exp_avg_sq.scales must be float32 \(1,\) .*got nothing"):
        opt.load_state_dict(short)
    orphan = {k: v for k, v in sd.items() if k != "state.0.exp_avg.codes"}
    with pytest.raises(ValueError, match="state.0.exp_avg.scales has no state.0.exp_avg.codes"):
        opt.load_state_dict(orphan)
    with pytest.raises(ValueError, match="rng_state must be six uint64 words"):
        opt.load_state_dict(dict(sd, rng_state=np.zeros(6, np.int64)))
    assert _bits(opt) == before  # each refusal changed nothing
