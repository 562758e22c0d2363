"""``fpsim.cast`` and ``fpsim.round_to`` keep a 0-d input 0-d (a scalar, a numpy scalar or a 0-d
array comes back as a 0-d array) in every rounding mode, saturating or not."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.both_backends  # every test here runs on numpy and numpy-f32 (conftest.py)


@pytest.mark.parametrize("rounding", ["nearest", "toward_zero", "stochastic"])
@pytest.mark.parametrize("saturate", [False, True])
def test_zero_d_inputs_come_back_as_zero_d_arrays_in_every_rounding_mode(rounding, saturate):
    from fpsim import cast, round_to

    for x in (1.1, np.float64(1.1), np.float32(1.1), np.array(1.1), np.float16(1.1)):
        for fn in (cast, round_to):
            r = fn(x, "e4m3", rounding, saturate=saturate, seed=0)
            assert type(r) is np.ndarray and r.shape == (), (fn.__name__, type(x))
    assert cast(1.1, "fp16", rounding, seed=0).dtype == np.float16


def test_text_is_refused_alone_and_in_a_list_in_one_line():
    """``cast("1.0")`` refused while ``cast(["1.0"])`` parsed the string (numpy's float64 conversion
    does): both refuse text now, naming what they got; numbers in lists, nested lists and tuples, bools
    and Python ints beyond int64 are read as before (float64)."""
    from fpsim import cast, round_to

    for bad, what in (("1.0", "str"), (["1.0"], "list holding text"), ([1.0, "2"], "list holding text"),
                      ((b"1",), "tuple holding text"), ([[1.0], ["2"]], "list holding text")):
        with pytest.raises(TypeError, match=f"got (a )?{what}") as e:
            cast(bad, "fp16")
        assert "\n" not in str(e.value) and "float()" in str(e.value)
    with pytest.raises(TypeError, match="got a list holding non-numbers"):
        cast([[1, 2], [3]], "fp16")
    assert cast([[1, 2.5], (3, True)], "fp16").tolist() == [[1.0, 2.5], [3.0, 1.0]]
    assert round_to([2**70, np.float32(0.1)], "float32").tolist() == [2.0**70, float(np.float32(0.1))]
    assert round_to([np.float32(0.1)], "float32").dtype == np.float64  # a list is read as float64, as before


def test_torch_bfloat16_and_float8_tensors_are_widened_exactly():
    """torch's bfloat16 (and float8) tensors, which numpy cannot read ("unsupported ScalarType"), are
    widened to float32 by torch first: exact, so cast, round_to and quantize give what the same values
    as an ml_dtypes array give."""
    torch = pytest.importorskip("torch")
    import ml_dtypes

    import fpsim

    vals = np.array([1.0, -2.5, 3.140625, 1e-20, -0.0, 65504.0, 3e38], np.float32)
    t = torch.tensor(vals, dtype=torch.bfloat16)
    ref = vals.astype(ml_dtypes.bfloat16)
    for fmt in ("fp16", "bf16", "e4m3", "p3109_k8p4se"):
        assert np.array_equal(fpsim.cast(t, fmt), fpsim.cast(ref, fmt), equal_nan=True)
    assert fpsim.round_to(t, "bf16").dtype == np.float32 and np.signbit(fpsim.round_to(t, "bf16")[4])
    blocks = torch.tensor(np.linspace(-3, 3, 64, dtype=np.float32).reshape(2, 32), dtype=torch.bfloat16)
    got = fpsim.quantize(blocks, "mxfp8_e4m3").dequantize()
    want = fpsim.quantize(blocks.float().numpy().astype(ml_dtypes.bfloat16), "mxfp8_e4m3").dequantize()
    assert np.array_equal(got, want)
    e4 = torch.tensor([0.5, 448.0], dtype=torch.float8_e4m3fn)
    assert fpsim.cast(e4, "fp16").tolist() == [0.5, 448.0]
