"""Block formats are data: each carries its scale rule (``BlockFormat.scale_rule``), the formats
live in the ``BLOCK_FORMATS`` registry, and nothing in the package switches on a family name.  A
block format built from an existing rule and another element quantizes as that rule defines it
(references written out with ml_dtypes, never fpsim's own kernels)."""

from __future__ import annotations

import pathlib
import re

import ml_dtypes
import numpy as np
import pytest

import fpsim
from fpsim import Format, get_format
from fpsim.formats import BLOCK_FORMATS, BlockFormat, get_block_format, quantize
from fpsim.formats.blockfast import fake_quantize
from fpsim.formats.scale_rules import E8M0_SCALE, FLOAT32_BLOCK_SCALE, NVFP4_SCALE, ScaleRule
from fpsim.registry import Registry

E3M4 = Format("float8_e3m4", np.dtype(ml_dtypes.float8_e3m4), 3, 4)
MXFP8_E3M4 = BlockFormat("mxfp8_e3m4", E8M0_SCALE, E3M4, get_format("e8m0"), 32)
FP8_BLOCK_E5M2 = BlockFormat("fp8_block_e5m2", FLOAT32_BLOCK_SCALE, get_format("e5m2"), get_format("float32"), 128)
RNG = np.random.default_rng(3)


def test_the_registry_holds_the_block_formats_with_their_rules():
    assert isinstance(BLOCK_FORMATS, Registry)
    rules = {n: BLOCK_FORMATS.get(n).scale_rule for n in BLOCK_FORMATS}
    assert all(isinstance(r, ScaleRule) for r in rules.values())
    assert rules["mxfp4_e2m1"] is E8M0_SCALE and rules["nvfp4"] is NVFP4_SCALE and rules["fp8_block"] is FLOAT32_BLOCK_SCALE
    assert get_block_format("deepseek_fp8") is BLOCK_FORMATS.get("fp8_block")
    assert get_block_format(MXFP8_E3M4) is MXFP8_E3M4  # an unregistered record passes through
    assert [get_block_format(n).family for n in ("mxfp8", "nvfp4", "fp8_block")] == ["mx", "nvfp4", "fp8_block"]
    assert get_block_format("nvfp4").tensor_scale and not get_block_format("mxfp8").tensor_scale


def test_no_family_switch_is_left():
    root = pathlib.Path(fpsim.__file__).parent
    hits = [f"{p.relative_to(root)}:{i}" for p in root.rglob("*.py")
            for i, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"family\s*[!=]=|==\s*.*\.family", line)]
    assert hits == []


def _mx_reference(x: np.ndarray, elem_dtype, emax: int) -> np.ndarray:
    """OCP MX v1.0 section 6.3 for blocks of 32 along the last axis: X = 2**(floor(log2 amax) - emax),
    elements x / X rounded to nearest even into the element, saturating; value = element * X."""
    xb = x.reshape(-1, 32).astype(np.float64)
    amax = np.abs(xb).max(axis=1)
    e = np.clip(np.frexp(np.where(amax > 0, amax, 2.0**-127))[1] - 1 - emax, -127, 127)  # floor(log2 amax) - emax
    scale = np.ldexp(1.0, e.astype(int))[:, None]
    top = float(ml_dtypes.finfo(elem_dtype).max)
    q = np.clip((xb / scale).astype(np.float32), -top, top).astype(elem_dtype).astype(np.float64)
    return (q * scale).astype(np.float32).reshape(x.shape)


def test_a_new_mx_format_follows_the_e8m0_rule():
    x = (RNG.standard_normal((8, 64)) * np.exp(RNG.uniform(-6, 6, (8, 1)))).astype(np.float32)
    q = quantize(x, MXFP8_E3M4)
    want = _mx_reference(x, ml_dtypes.float8_e3m4, E3M4.emax)
    assert q.elements.dtype == ml_dtypes.float8_e3m4 and q.scales.dtype == get_format("e8m0").dtype
    assert np.array_equal(q.dequantize(), want)
    assert np.array_equal(fake_quantize(x, MXFP8_E3M4), want)  # the fast path, the same bits
    assert q.bits_per_element == 8.25


def test_the_float32_block_rule_takes_the_elements_max():
    x = (RNG.standard_normal((4, 256)) * 100).astype(np.float32)
    got = fake_quantize(x, FP8_BLOCK_E5M2, pow2_scales=True)
    xb = x.reshape(-1, 128)
    s = (np.float32(57344.0) / np.abs(xb).max(axis=1)).astype(np.float32)
    s = (s.view(np.uint32) & np.uint32(0xFF800000)).view(np.float32)[:, None]  # pow2: the exponent bits alone
    elems = (xb * s).astype(ml_dtypes.float8_e5m2).astype(np.float32)
    assert np.array_equal(got, (elems * (np.float32(1) / s)).reshape(x.shape))


def test_what_a_rule_takes_is_a_field():
    assert E8M0_SCALE.roundings == fpsim.formats.SCALE_ROUNDINGS and not E8M0_SCALE.pow2_scales
    assert FLOAT32_BLOCK_SCALE.pow2_scales and FLOAT32_BLOCK_SCALE.tensor_core and not FLOAT32_BLOCK_SCALE.roundings
    assert NVFP4_SCALE.tensor_scale and NVFP4_SCALE.four_over_six
    with pytest.raises(ValueError, match="pow2_scales applies to fp8_block only, not mxfp8_e3m4"):
        quantize(np.ones(32, np.float32), MXFP8_E3M4, pow2_scales=True)
    with pytest.raises(ValueError, match="fp8_block_e5m2 has its own scale rule"):
        quantize(np.ones(128, np.float32), FP8_BLOCK_E5M2, scale_rounding="floor")
    with pytest.raises(ValueError, match="unknown scale_rounding 'up'; known: floor, ceil"):
        quantize(np.ones(32, np.float32), MXFP8_E3M4, scale_rounding="up")


def test_a_rule_that_forgets_a_method_fails_at_construction():
    class NoDecode(ScaleRule):
        name = "no_decode"

        def scales(self, elem, amax, scale_rounding, pow2, xb=None, expand=None, axes=None):
            return amax, amax, amax, None

    class Whole(NoDecode):
        def decode(self, scales, tensor_scale):
            return scales

    with pytest.raises(TypeError, match="abstract class NoDecode .*abstract method '?decode"):  # 3.12 quotes it
        NoDecode()
    with pytest.raises(TypeError, match="abstract methods '?decode'?, '?scales"):
        ScaleRule()
    assert Whole().decode(np.float32([2.0]), None) == np.float32(2.0)
    assert ScaleRule.__abstractmethods__ == frozenset({"scales", "decode"})
    assert all(type(r).__abstractmethods__ == frozenset() for r in (E8M0_SCALE, NVFP4_SCALE, FLOAT32_BLOCK_SCALE))
