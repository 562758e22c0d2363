"""The calls that round or quantize (docs/formats.md, "Which call rounds"): each on the same numbers,
pinned by value against ml_dtypes, so that what tells them apart - the dtype given back, codes or
values, a scale per block or per tensor - is checked, not only described; and their old names warn."""

import ml_dtypes
import numpy as np
import pytest

import fpsim
from fpsim import lowp
from fpsim.formats.blockfast import fake_quantize

X = np.float32([1 / 3, 300.0, -1e-3])
E4M3 = [0.34375, 288.0, -(2.0**-9)]  # nearest e4m3fn values (ulps 2^-5, 32; 2^-9 its smallest subnormal)


def test_cast_gives_the_storage_dtype_round_to_the_input_dtype_encode_the_codes():
    c = fpsim.cast(X, "e4m3")
    assert c.dtype == ml_dtypes.float8_e4m3fn and c.astype(np.float64).tolist() == E4M3
    assert c.view(np.uint8).tolist() == X.astype(ml_dtypes.float8_e4m3fn).view(np.uint8).tolist()  # reference
    r = fpsim.round_to(X, "e4m3")
    assert r.dtype == np.float32 and r.tolist() == E4M3
    assert fpsim.round_to(X.astype(np.float64), "e4m3").dtype == np.float64
    assert fpsim.encode(X, "e4m3").tolist() == [0x2B, 0x79, 0x81]  # 0 0101 011, 0 1111 001, 1 0000 001
    k = fpsim.formats.f32_to_fp8(X, "e4m3")
    assert k.dtype == ml_dtypes.float8_e4m3fn and k.view(np.uint8).tolist() == [0x2B, 0x79, 0x81]


def test_quantize_keeps_elements_and_scales_fake_quantize_only_their_values():
    x = np.float32([3.0, 0.5, -448.0 * 4] + [0.0] * 29)  # one MXFP8 block: amax 1792 = 1.75 * 2^10
    q = fpsim.quantize(x, "mxfp8_e4m3")
    assert q.scales.dtype == ml_dtypes.float8_e8m0fnu and q.scales.astype(np.float64).tolist() == [4.0]
    assert q.elements.dtype == ml_dtypes.float8_e4m3fn and q.elements[:3].astype(np.float64).tolist() == [0.75, 0.125,
                                                                                                          -448.0]
    v = fake_quantize(x, "mxfp8_e4m3")
    assert v.dtype == np.float32 and v[:3].tolist() == [3.0, 0.5, -1792.0]
    assert v.view(np.uint32).tolist() == q.dequantize().view(np.uint32).tolist()


def test_quantize_fp8_gives_numbers_and_a_scale_qdq_a_differentiable_float32_tensor():
    st = lowp.ScalingState("x", "e4m3", init_scale=0.5)  # values are multiplied by 0.5 before the cast
    q = lowp.quantize_fp8(X, st)
    # 1/6 -> 11 * 2^-6; 150 -> 9 * 16; -5e-4 is below half of 2^-9 (e4m3fn's smallest subnormal): -0
    assert q.scale == np.float32(0.5) and q.numpy().astype(np.float64).tolist() == [0.171875, 144.0, -0.0]
    assert st.counts["underflow"] == 1 and np.signbit(q.numpy()[2])
    x = fpsim.tensor(X, requires_grad=True)
    y = lowp.qdq(x, st)
    assert y.numpy().tolist() == [0.34375, 288.0, -0.0] and np.signbit(y.numpy()[2])  # fp8 / scale, float32
    y.sum().backward()
    assert x.grad.numpy().tolist() == [1.0, 1.0, 1.0]  # straight through


def test_the_old_names_warn_with_their_removal_date():
    with pytest.warns(DeprecationWarning, match=r"fpsim\.lowp\.f32_to_fp8 is deprecated \(removed 2027-06-01\): "
                                               r"use fpsim\.formats\.f32_to_fp8"):
        assert lowp.f32_to_fp8 is fpsim.formats.f32_to_fp8
    assert "f32_to_fp8" not in lowp.__all__
    r = lowp.BlockScaling("mxfp8")
    a = X.reshape(1, 3).repeat(32, axis=1)
    with pytest.warns(DeprecationWarning, match=r"BlockScaling\.q is deprecated \(removed 2027-06-01\): "
                                               r"use BlockScaling\.quantize_operand"):
        assert r.q(a, -1).tolist() == r.quantize_operand(a, -1).tolist()
