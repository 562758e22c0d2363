"""fpsim.labs.tf32 (lab 17): the TF32 rounding on bit patterns against fpsim's reference rounding,
the TF32 matmul against float64 sums of TF32 operands, and the TF32 Linear's three GEMMs against
numpy's float64 products of the TF32 values."""

import numpy as np
import pytest

import fpsim
from fpsim import nn
from fpsim.labs.tf32 import (
    TF32,
    TF32_ROUNDINGS,
    TF32Classifier,
    TF32Linear,
    dot_errors,
    swap_tf32_linears,
    tf32_matmul,
    to_tf32,
)
from fpsim.tensorcore import matmul as tc_matmul

EDGES = np.array([0x00000000, 0x80000000, 0x00000001, 0x00001000, 0x00003000, 0x007FFFFF, 0x3F801000, 0x3F803000,
                  0x3F800FFF, 0xBF801000, 0x7F7FFFFF, 0x7F7FEFFF, 0x7F7FF000, 0x7F800000, 0xFF800000, 0x7FC00000,
                  0x7FFFFFFF, 0xFFFFFFFF, 0xFFFFF000], dtype=np.uint32)


def _patterns():
    rng = np.random.default_rng(0)
    return np.concatenate([EDGES, rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32)]).view(np.float32)


@pytest.mark.parametrize("rounding", TF32_ROUNDINGS)
def test_to_tf32_is_the_reference_rounding_into_e8m10(rounding):
    x = _patterns()
    got, want = to_tf32(x, rounding), fpsim.round_to(x, TF32, rounding)
    assert got.dtype == np.float32
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got.view(np.uint32)[~nan], want.view(np.uint32)[~nan])  # -0 kept, bit for bit


def test_toward_zero_is_the_instructions_reading_of_the_top_19_bits():
    x = _patterns()
    finite = np.isfinite(x)
    assert np.array_equal(to_tf32(x)[finite].view(np.uint32), x[finite].view(np.uint32) & np.uint32(0xFFFFE000))
    assert TF32.mantissa_bits == 10 and TF32.exponent_bits == 8 and TF32.eps == 2.0**-10


def test_ties_away_and_to_even():
    x = np.array([1 + 2**-11, 1 + 3 * 2**-11, -(1 + 2**-11)], np.float32)
    assert to_tf32(x, "nearest_away").tolist() == [1 + 2**-10, 1 + 2 * 2**-10, -(1 + 2**-10)]
    assert to_tf32(x, "nearest").tolist() == [1.0, 1 + 2 * 2**-10, -1.0]


@pytest.mark.parametrize("rounding", ["nearest_away", "toward_zero"])
def test_tf32_matmul_exact_sum_of_tf32_operands(rounding):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((5, 40)).astype(np.float32), rng.standard_normal((40, 3)).astype(np.float32)
    ta, tb = (fpsim.round_to(v, TF32, rounding).astype(np.float64) for v in (a, b))
    want = np.array([[float(np.float32(np.float64(sum(sorted(ta[i] * tb[:, j], key=abs)))))
                      for j in range(3)] for i in range(5)], np.float32)
    got = tf32_matmul(a, b, arch=None, rounding=rounding)
    # the float64 sum of 40 products of 11-bit values is exact, so rounding it once is the reference
    assert np.array_equal(got, want)


def test_tf32_matmul_on_the_tensor_core_truncates_its_operands_itself():
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((4, 32)).astype(np.float32), rng.standard_normal((32, 4)).astype(np.float32)
    assert np.array_equal(tf32_matmul(a, b, arch="ampere"), tc_matmul(to_tf32(a), to_tf32(b), arch="ampere"))
    assert np.array_equal(tf32_matmul(a, b, arch="ampere", rounding="nearest_away"),
                          tc_matmul(to_tf32(a, "nearest_away"), to_tf32(b, "nearest_away"), arch="ampere"))


def test_tf32_linear_three_gemms():
    rng = np.random.default_rng(3)
    layer = nn.Linear(24, 6, seed=0)
    wrapped = TF32Linear(layer, rounding="nearest_away")
    assert wrapped.weight is layer.weight and wrapped.bias is layer.bias
    x_np = rng.standard_normal((10, 24)).astype(np.float32)
    x = fpsim.tensor(x_np, requires_grad=True)
    out = wrapped(x)
    g = rng.standard_normal((10, 6)).astype(np.float32)
    (out * fpsim.tensor(g)).sum().backward()
    t = lambda v: fpsim.round_to(np.asarray(v, np.float32), TF32, "nearest_away").astype(np.float64)
    w, bias = layer.weight.data.astype(np.float64), layer.bias.data.astype(np.float64)
    want_out = (t(x_np) @ t(w).T).astype(np.float32) + layer.bias.data
    assert np.array_equal(out.data, want_out)
    assert np.array_equal(x.grad.data, (t(g) @ t(w)).astype(np.float32))
    assert np.array_equal(layer.weight.grad.data, (t(g).T @ t(x_np)).astype(np.float32))
    assert np.allclose(layer.bias.grad.data, g.astype(np.float64).sum(0), rtol=1e-6) and bias.shape == (6,)


def test_swap_and_the_classifier_task():
    model = swap_tf32_linears(nn.MLP([4, 8, 2], seed=0))
    assert [type(m).__name__ for _, m in model.named_modules()].count("TF32Linear") == 2
    from fpsim.experiments import train
    from fpsim.labs.classifier import BlobClassifier
    a = train(BlobClassifier(n=128, steps=5), "fp32")
    b = train(TF32Classifier(n=128, steps=5), "fp32")
    assert a.losses != b.losses and abs(b.losses[-1] / a.losses[-1] - 1) < 0.01


def test_dot_errors():
    e32, etz = dot_errors(64, positive=True, rounding=None), dot_errors(64, positive=True)
    assert e32.shape == (64,) and np.all(np.abs(e32) < 2**-23)
    assert np.all(etz < 0) and np.all(etz > -2**-9)  # truncated positive operands: always too small


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="rounding must be one of"):
        to_tf32(np.float32([1.0]), "stochastic")
    with pytest.raises(ValueError, match="volta tensor cores do not take tf32"):
        TF32Linear(nn.Linear(2, 2, seed=0), arch="volta")
    with pytest.raises(ValueError, match="k must be an integer"):
        dot_errors(0)
