"""fpsim.optim_state: the optimizer-state formats against independent references - bitsandbytes'
dynamic map rebuilt with torch by bitsandbytes' own algorithm, the nearest code by brute force over
all 256, linear codes from float64, COAT's expansion by its defining property - their memory, and
Adam / Muon reading and writing them (float32 state the same bits as the optimizer's own)."""

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
    with pytest.raises(NotImplementedError, match="state_format 'int8-dynamic'"):
        opt.state_dict()


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
