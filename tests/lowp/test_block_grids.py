"""What the block-scaled GEMMs tell ``matmul_f32`` of their operands (``fake_quantize_on_grid``'s grid:
mantissa bits, 2**-149): the claim checked on the values themselves (every finite nonzero value
normal, with at most mantissa bits + 1 significant bits), given where the scales are powers of two
and withheld where they are not (NVFP4) or where a value would fall below float32's normal range;
and a block Linear's outputs and gradients the same bits with the grids as without them."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import bits

import fpsim
from fpsim.formats import quantize
from fpsim.formats.blockfast import fake_quantize_on_grid
from fpsim.lowp import BlockScaling
from fpsim.lowp import block as lowp_block
from fpsim.lowp.block import block_linear

CASES = [("mxfp8_e4m3", {}, 3), ("mxfp8_e5m2", {}, 2), ("mxfp6_e2m3", {}, 3), ("mxfp6_e3m2", {}, 2),
         ("mxfp4_e2m1", {}, 1), ("mxfp4_e2m1", {"rounding": "stochastic", "seed": 1}, 1),
         ("fp8_block", {"pow2_scales": True}, 3)]


def _holds(v: np.ndarray, mant: int) -> bool:
    """Every finite nonzero value of float32 v is normal and has at most mant + 1 significant bits."""
    b = v.view(np.uint32) & np.uint32(0x7FFFFFFF)
    live = (b != 0) & (b < 0x7F800000)
    return bool((b[live] >= 0x00800000).all() and (b[live] & np.uint32((1 << (23 - mant)) - 1) == 0).all())


@pytest.mark.parametrize("fmt, kw, mant", CASES, ids=[f"{f}-{len(k)}" for f, k, _ in CASES])
def test_the_grid_holds_where_it_is_given(fmt, kw, mant):
    rng = np.random.default_rng(mant)
    x = (rng.standard_normal((256, 128)) * 2.0 ** rng.integers(-12, 12, (256, 1))).astype(np.float32)
    x[:3] = 0.0
    x[5, :7] = [np.inf, -0.0, 1e-45, 3e38, -3e38, 2.0**-120, np.nan]
    for axis in (-1, 0):
        got, grid = fake_quantize_on_grid(x, fmt, axis, **kw)
        want = quantize(x, fmt, axis, **kw).dequantize()
        assert np.array_equal(bits(got), bits(want))
        assert grid == (mant, 2.0**-149) and _holds(got, mant)
    # blocks of magnitudes near float32's smallest normal: some values would be float32 subnormals
    tiny = x * np.float32(2.0**-118)
    got, grid = fake_quantize_on_grid(tiny, fmt, -1, **kw)
    assert grid is None and not _holds(got, mant)


def test_no_grid_where_the_scales_are_not_powers_of_two():
    x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    for fmt, kw in (("nvfp4", {}), ("nvfp4", {"block": (16, 16)}), ("fp8_block", {}), ("mxint8", {}),
                    ("mxfp8", {"rounding": "toward_zero"})):
        got, grid = fake_quantize_on_grid(x, fmt, -1, **kw)
        assert grid is None and np.array_equal(bits(got), bits(quantize(x, fmt, -1, **kw).dequantize()))


@pytest.mark.parametrize("recipe", [BlockScaling("mxfp8_e4m3"), BlockScaling("mxfp4_e2m1", grad_rounding="stochastic",
                                                                             hadamard=True)], ids=["mxfp8", "mxfp4-rht"])
def test_a_block_linear_is_the_same_with_and_without_grids(recipe, monkeypatch):
    rng = np.random.default_rng(9)
    x0 = rng.standard_normal((4, 64, 96)).astype(np.float32)
    w0 = (rng.standard_normal((80, 96)) * 0.1).astype(np.float32)
    g0 = rng.standard_normal((4, 64, 80)).astype(np.float32)

    def run():
        x, w = fpsim.tensor(x0, requires_grad=True), fpsim.tensor(w0, requires_grad=True)
        y = block_linear(x, w, None, recipe)
        fpsim.manual_seed(3)
        (y * fpsim.tensor(g0)).sum().backward()
        return [bits(a) for a in (y.numpy(), x.grad.numpy(), w.grad.numpy())]

    told = []
    real = lowp_block.matmul_f32
    monkeypatch.setattr(lowp_block, "matmul_f32", lambda a, b, *g: told.append(g) or real(a, b, *g))
    with_grids = run()
    mant = fpsim.get_block_format(recipe.format).element.mantissa_bits
    gemms = [g for g in told if len(g) == 2]  # the three GEMMs (the Hadamard transform's own products tell nothing)
    assert gemms == [((mant, 2.0**-149), (mant, 2.0**-149))] * 3
    monkeypatch.setattr(lowp_block, "matmul_f32", lambda a, b, *g: real(a, b))
    for got, want in zip(run(), with_grids):
        assert np.array_equal(got, want)
