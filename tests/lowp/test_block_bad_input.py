"""Block formats and block-scaled training under bad input - each defect reproduced
here first, then pinned (references: ml_dtypes' casts, exact powers of two, TE's NVFP4 rule)."""

from __future__ import annotations

import dataclasses
import tracemalloc

import ml_dtypes
import numpy as np
import pytest

import fpsim
from fpsim.formats import f16_to_f32, fp8_to_f32, quantize

F32 = np.float32


# -- NVFP4: a block whose e4m3 scale rounds to 0 ------------------------------------------------

def test_nvfp4_block_whose_scale_rounds_to_zero_is_zeros_counted_as_underflow():
    x = np.r_[np.full(16, 1e-6), np.ones(16)].astype(F32)
    q = quantize(x, "nvfp4")
    # TE: S_enc = 448 * 6 / 1; the first block's decode scale 1e-6 * (S_enc / 6) is below half of
    # e4m3's smallest subnormal, so it rounds to 0 - and TE encodes that block by 0.
    s_enc = F32(448 * 6) / F32(1)
    assert (F32(F32(1e-6) * (s_enc * (F32(1) / F32(6))))).astype(ml_dtypes.float8_e4m3fn) == 0
    assert q.scales.astype(F32).tolist() == [0.0, 448.0]
    assert q.elements[:16].astype(F32).tolist() == [0.0] * 16  # was 16 x 6.0 (saturated)
    assert q.elements[16:].astype(F32).tolist() == [6.0] * 16
    assert q.stats.underflow.tolist() == [16, 0] and q.stats.saturated.tolist() == [0, 0]
    assert q.dequantize().tolist() == [0.0] * 16 + [1.0] * 16


# -- BlockQuantized: frozen, and dequantize reads its own scales --------------------------------

@pytest.mark.parametrize("fmt", ["mxfp8", "nvfp4", "fp8_block"])
def test_block_quantized_arrays_are_read_only(fmt):
    q = quantize(np.linspace(-3, 3, 64, dtype=F32).reshape(2, 32), fmt)
    for a in (q.elements, q.scales, q.stats.underflow, q.stats.saturated, q.stats.scale):
        with pytest.raises(ValueError, match="read-only"):
            a[...] = 0


def test_dequantize_uses_the_objects_own_scales_and_tensor_scale():
    x = np.linspace(-3, 3, 64, dtype=F32).reshape(2, 32)
    q = quantize(x, "mxfp8")
    codes = q.scales.view(np.uint8) + np.uint8(1)  # every e8m0 scale doubled
    q2 = dataclasses.replace(q, scales=codes.view(ml_dtypes.float8_e8m0fnu))
    assert np.array_equal(q2.dequantize(), q.dequantize() * F32(2))  # exact: powers of two
    n = quantize(x, "nvfp4")
    n2 = dataclasses.replace(n, tensor_scale=F32(n.tensor_scale) * F32(4))
    assert np.array_equal(n2.dequantize(), n.dequantize() * F32(4))
    d = quantize(x, "fp8_block")
    d2 = dataclasses.replace(d, scales=np.full_like(d.scales, 0.5))
    assert np.array_equal(d2.dequantize(), d.elements.astype(F32) * F32(0.5))


# -- the widening kernels refuse the wrong dtype -----------------------------------------------

@pytest.mark.parametrize("arr", [np.ones(3, F32), np.ones(3, np.uint16), np.ones(3, ml_dtypes.bfloat16), [1.0]])
def test_f16_to_f32_refuses_other_dtypes(arr):
    with pytest.raises(TypeError, match="f16_to_f32 takes a float16"):
        f16_to_f32(arr)


@pytest.mark.parametrize("arr", [np.ones(3, F32), np.ones(3, np.int8), np.ones(3, np.uint8), np.ones(3, np.float16),
                                 [1.0]])
def test_fp8_to_f32_refuses_other_dtypes_and_builds_no_huge_table(arr):
    with pytest.raises(TypeError, match="fp8_to_f32 takes a numpy array in a one-byte float format"):
        fp8_to_f32(arr)


def test_fp8_to_f32_still_widens_every_one_byte_format_exactly():
    for name in ("float8_e4m3fn", "float8_e5m2", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn", "float8_e8m0fnu"):
        dt = fpsim.get_format(name).dtype
        codes = np.arange(256, dtype=np.uint8).view(dt)
        want = codes.astype(np.float64)  # ml_dtypes' own cast, exact in float64
        got = fp8_to_f32(codes).astype(np.float64)
        assert np.array_equal(got, want, equal_nan=True), name


# -- a huge block allocates with the data, not with the block -----------------------------------

@pytest.mark.parametrize("fmt, block", [("mxfp8", 10**9), ("nvfp4", (10**9, 10**9)), ("fp8_block", 2**40)])
def test_a_block_longer_than_the_axis_costs_the_data_not_the_block(fmt, block):
    x = np.linspace(-1, 1, 256, dtype=F32).reshape(4, 64)
    whole = x.shape[-1] if not isinstance(block, tuple) else x.shape
    tracemalloc.start()
    try:
        q = quantize(x, fmt, block=block)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 10**6
    ref = quantize(x, fmt, block=whole if isinstance(whole, tuple) else whole)  # one block per row / one tile
    assert q.block == block and q.scales.shape == ref.scales.shape
    assert np.array_equal(q.dequantize(), ref.dequantize()) and np.array_equal(q.scales.view(np.uint8),
                                                                                ref.scales.view(np.uint8))


# -- seeds and generators ------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [-1, 1.5, "3", True, np.float64(2.0)])
def test_quantize_bad_seed_is_one_value_error_naming_it(seed):
    with pytest.raises(ValueError, match=r"seed must be an integer >= 0 or None, got"):
        quantize(np.ones(4, F32), "mxfp4", rounding="stochastic", seed=seed)


def test_quantize_bad_rng_is_one_type_error_naming_it():
    with pytest.raises(TypeError, match="rng must be a numpy Generator"):
        quantize(np.ones(4, F32), "mxfp4", rounding="stochastic", rng=3)


# -- BlockScaling: every field checked at construction, naming it -------------------------------

@pytest.mark.parametrize("kwargs, exc, match", [
    ({"format": "fp8_block", "pow2_scales": "False"}, TypeError, "pow2_scales must be True or False, got 'False'"),
    ({"hadamard": 1}, TypeError, "hadamard must be True or False"),
    ({"reuse_forward_blocks": "yes"}, TypeError, "reuse_forward_blocks must be True or False"),
    ({"format": "nvfp4", "scale_rounding": "ceil"}, ValueError, "scale_rounding applies to the MX formats only"),
    ({"format": "mxfp8", "pow2_scales": True}, ValueError, "pow2_scales applies to fp8_block only"),
    ({"block": (32, 32)}, ValueError, r"block must be a positive integer \(the 1-D block length\).*weight_block"),
    ({"block": 2.5}, ValueError, "block must be a positive integer"),
    ({"weight_block": (16, 16, 1)}, ValueError, "weight_block must be"),
    ({"weight_block": "16"}, ValueError, "weight_block must be"),
    ({"hadamard_seed": -1}, ValueError, "hadamard_seed must be an integer >= 0, got -1"),
    ({"hadamard_seed": 1.5}, ValueError, "hadamard_seed must be an integer >= 0, got 1.5"),
    ({"accumulate": "fp17"}, ValueError, "accumulate: unknown format 'fp17'"),
    ({"accumulate": 13, "promote_every": True}, ValueError, "promote_every must be a positive integer"),
])
def test_block_scaling_refuses_each_bad_field_naming_it(kwargs, exc, match):
    from fpsim.lowp import BlockScaling

    with pytest.raises(exc, match=match):
        BlockScaling(**kwargs)


def test_block_scaling_settings_for_some_of_its_formats_are_kept():
    from fpsim.lowp import BlockScaling

    r = BlockScaling("mxfp8", grad_format="nvfp4", scale_rounding="rceil")  # used for X and W, not dY
    assert r.scale_rounding == "rceil"
    assert BlockScaling("nvfp4", grad_format="fp8_block", pow2_scales=True).pow2_scales is True


def test_block_scaling_with_a_huge_block_builds_and_trains():
    from fpsim.lowp import BlockScaling, convert

    fpsim.manual_seed(0)
    model = fpsim.nn.Sequential(fpsim.nn.Linear(8, 4))
    ref = fpsim.nn.Sequential(fpsim.nn.Linear(8, 4))
    ref.load_state_dict(model.state_dict())
    convert(model, BlockScaling("mxfp8", block=10**9))
    convert(ref, BlockScaling("mxfp8", block=8))  # one block per row either way
    x = fpsim.tensor(np.linspace(-1, 1, 24, dtype=F32).reshape(3, 8))
    for m in (model, ref):
        m(x).sum().backward()
    assert np.array_equal(model[0].weight.grad.numpy(), ref[0].weight.grad.numpy())


def test_weight_block_as_a_list_is_the_pair_and_the_backward_pass_runs():
    from fpsim.lowp import BlockScaling, convert

    r = BlockScaling("nvfp4", weight_block=[16, 16])
    assert r.weight_block == (16, 16) and hash(r) == hash(BlockScaling("nvfp4", weight_block=(16, 16)))
    grads = []
    for rec in (r, BlockScaling("nvfp4", weight_block=(16, 16))):
        fpsim.manual_seed(1)
        model = fpsim.nn.Sequential(fpsim.nn.Linear(32, 16))
        convert(model, rec)
        model(fpsim.tensor(np.linspace(-1, 1, 64, dtype=F32).reshape(2, 32))).sum().backward()
        grads.append(model[0].weight.grad.numpy())
    assert np.array_equal(*grads)


def test_fp8_to_f32_takes_a_numpy_scalar_of_a_one_byte_format():
    s = np.zeros(3, np.float32).astype(ml_dtypes.float8_e4m3fn).sum()  # a 0-d result can be a numpy scalar
    assert isinstance(s, np.generic) and fp8_to_f32(np.asarray(s).reshape(()).view(ml_dtypes.float8_e4m3fn)) == 0
    assert fp8_to_f32(ml_dtypes.float8_e4m3fn(3.0)) == F32(3.0)


def test_stochastic_rounding_draws_for_the_padded_blocks_as_before():
    # one draw per padded position: a block longer than the axis rounds as the zero-padded input does
    x = np.linspace(-1, 1, 30, dtype=F32).reshape(3, 10)
    padded = np.pad(x, [(0, 0), (0, 30)])
    q = quantize(x, "mxfp4", block=40, rounding="stochastic", seed=7)
    ref = quantize(padded, "mxfp4", block=40, rounding="stochastic", seed=7)
    assert np.array_equal(q.elements.view(np.uint8), ref.elements[:, :10].view(np.uint8))
    assert np.array_equal(q.scales.view(np.uint8), ref.scales.view(np.uint8))


def test_stochastic_rounding_with_a_huge_block_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"block 1000000000 with stochastic rounding pads the input of shape \(4, 64\)"):
        quantize(np.ones((4, 64), F32), "mxfp8", block=10**9, rounding="stochastic", seed=0)
