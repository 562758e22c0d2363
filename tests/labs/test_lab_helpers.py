"""fpsim.labs.bits and fpsim.labs.loops (the helpers of labs 01-04), against numpy / ml_dtypes
bit patterns, numpy float32 loops and PyTorch's GradScaler state machine as literals."""

import math

import numpy as np
import pytest
from helpers import small_task

from fpsim import GradScaler, StaticScaler, get_format
from fpsim.labs import bits, loops

UINT = {8: np.uint8, 16: np.uint16}


def _all_patterns(name):
    f = get_format(name)
    pats = np.arange(2**f.bits, dtype=np.uint32).astype(UINT[f.bits])
    return pats, pats.view(f.dtype).astype(np.float64)


@pytest.mark.parametrize("name", ["float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_fields_of_every_pattern_rebuild_the_value(name):
    """Every finite pattern: fields() gives the same bits back, and the fields with the
    textbook formula give numpy's / ml_dtypes' own decoding of the pattern."""
    f = get_format(name)
    pats, vals = _all_patterns(name)
    step = 1 if f.bits == 8 else 7  # a spread of 16-bit patterns keeps this fast
    for p, v in zip(pats[::step], vals[::step]):
        if not math.isfinite(v):
            continue
        b = bits.fields(v, name)
        assert b.bits == int(p) or (v == 0 and b.bits & ~(1 << (f.bits - 1)) == 0)
        s = -1.0 if b.sign else 1.0
        if b.exponent == 0:
            rebuilt = s * b.mantissa * 2.0 ** (1 - f.bias - f.mantissa_bits)
        else:
            rebuilt = s * (1 + b.mantissa / 2**f.mantissa_bits) * 2.0 ** (b.exponent - f.bias)
        assert rebuilt == v, (name, hex(int(p)))
        assert bits.from_fields(b.sign, b.exponent, b.mantissa, name) == v


def test_the_worked_example_survivor_is_subnormal_0x00AC():
    b = bits.fields(1.0251998901367188e-05, "float16")
    assert (b.hex, b.category, b.exponent, b.mantissa) == ("0x00AC", "subnormal", 0, 172)
    assert b.significant_bits == 8 and b.power == -14
    assert b.value == 172 * 2.0**-24
    assert bits.fields(1.024e-5, "float16").bits == 0x00AC  # rounding on the way in
    assert "172 x 2^-24" in b.formula()


def test_fields_pinned_patterns():
    assert bits.fields(1.0, "float32").bit_string == "0 01111111 " + "0" * 23
    assert bits.fields(1.0, "float16").hex == "0x3C00"
    assert bits.fields(0.1, "bfloat16").hex == "0x3DCD"  # float32 0x3DCCCCCD rounded, not truncated
    assert bits.fields(0.1, "float32").hex == "0x3DCCCCCD"
    assert bits.fields(65504.0, "float16").significant_bits == 11
    assert bits.fields(70000.0, "float16").category == "inf"
    top = bits.fields(448.0, "float8_e4m3fn")
    assert (top.hex, top.category) == ("0x7E", "normal")
    assert bits.fields(500.0, "float8_e4m3fn").category == "nan"  # no inf to overflow to
    assert bits.fields(-0.0, "float16").bits == 0x8000
    assert bits.fields(2.0**-24, "float16").bits == 0x0001


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="one number"):
        bits.fields([1.0, 2.0], "float16")
    with pytest.raises(ValueError, match="exponent field of float16"):
        bits.from_fields(0, 32, 0, "float16")
    with pytest.raises(ValueError, match="unknown format"):
        bits.fields(1.0, "fp17")


def test_bit_figure_draws_one_box_per_bit():
    fig = bits.bit_figure(0.1, ["float16", "float8_e5m2"])
    boxes = [p for p in fig.axes[0].patches if p.get_width() > 0]
    assert len(boxes) == 16 + 8


def _float32_sgd(w0, grad_stored, lr, steps):
    """SGD on a float32 weight in plain numpy: w - float32(lr) * g, rounded to float32 each step."""
    w = np.float32(w0)
    for _ in range(steps):
        w = np.float32(w - np.float32(lr) * np.float32(grad_stored))
    return w


def test_one_weight_without_master_loses_every_small_update():
    r = loops.one_weight(1.0, grad=0.01, lr=0.01, steps=100, fmt="float16")
    assert np.all(r.stored == 1.0) and r.master is None  # 1e-4 < 2^-12, half the gap below 1.0


def test_one_weight_with_master_matches_a_numpy_float32_loop():
    r = loops.one_weight(1.0, grad=0.01, lr=0.01, steps=100, fmt="float16", master=True)
    want = _float32_sgd(1.0, np.float16(0.01), 0.01, 100)  # the gradient was stored in float16
    assert r.master[-1] == float(want)
    assert r.stored[-1] == float(np.float16(want)) == 0.990234375
    f32 = loops.one_weight(1.0, grad=0.01, lr=0.01, steps=100, fmt="float32")
    assert f32.stored[-1] == float(_float32_sgd(1.0, np.float32(0.01), 0.01, 100))


def test_one_weight_medium_updates_move_one_whole_gap():
    r = loops.one_weight(1.0, grad=0.06, lr=0.01, steps=100, fmt="float16")
    assert r.stored[-1] == 1.0 - 100 * 2.0**-11
    with pytest.raises(ValueError, match="steps"):
        loops.one_weight(steps=-1)


def test_scaler_run_first_step_trap_and_ceiling():
    """A float16 loss: S = 2^16 is inf as d(S*L)/dL, so step 0 is skipped, and every growth
    back to 2^16 after growth_interval clean steps is skipped again (PyTorch's state machine)."""
    r = loops.scaler_run(GradScaler(growth_interval=10), small_task(), steps=23, loss_format="float16",
                         measure=False)
    assert [i for i, s in enumerate(r.skipped) if s] == [0, 11, 22]
    assert r.scales[0] == r.scales[11] == r.scales[22] == 65536.0
    assert set(r.scales[1:11]) == {32768.0}
    assert r.losses[-1] < r.losses[0]


def test_scaler_run_static_scale_too_large_skips_every_step():
    task = small_task()
    big = loops.scaler_run(StaticScaler(2.0**40), task, steps=4)
    assert big.steps_skipped == 4 and len(set(big.losses)) == 1  # nothing ever moves
    ok = loops.scaler_run(StaticScaler(1024.0), task, steps=4)
    assert ok.steps_skipped == 0 and ok.losses[-1] < ok.losses[0]


def test_scaler_run_low_scale_flushes_more():
    task = small_task(4096)
    low = loops.scaler_run(StaticScaler(1.0), task, steps=1)
    high = loops.scaler_run(StaticScaler(1024.0), task, steps=1)
    assert low.flushed[0] > 0.005 and high.flushed[0] < low.flushed[0] / 10


def test_scaler_run_bad_arguments():
    with pytest.raises(ValueError, match="loss_format"):
        loops.scaler_run(GradScaler(), loss_format="bfloat16")
    with pytest.raises(ValueError, match="steps"):
        loops.scaler_run(GradScaler(), steps=0)
