"""Property tests of block quantization (``fpsim.formats.quantize``): random block formats, shapes,
axes, block sizes, scale roundings and special values against the exact-fraction reference
(tests/support/block_reference.py), block by block; junk arguments are ONE ``ValueError`` /
``TypeError`` whose one-line message names the argument."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from helpers import same
from support.block_reference import MX_ELEM, blocks_1d, fp8_block, mx_block, nvfp4_block, nvfp4_tensor_scale
from support.fuzzing import BLOCK_NAMES, one_line

from fpsim.formats import SCALE_ROUNDINGS, get_block_format, quantize

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
ALLOWED = (ValueError, TypeError)


VALUES = st.one_of(st.floats(-1e4, 1e4, width=32), st.floats(width=32, allow_nan=False, allow_infinity=False),
                   st.sampled_from([0.0, -0.0, 1e-40, -2.0**-126, 2.0**-149, 448.0, 6.0, 3.4e38, 1e-6, np.inf,
                                    -np.inf, np.nan]))


# the formats the exact-fraction reference is written for (mxint8's elements are checked in test_block_formats)
REFERENCED = [n for n in BLOCK_NAMES if get_block_format(n).name in MX_ELEM or get_block_format(n).family != "mx"]


@st.composite
def block_case(draw):
    name = draw(st.sampled_from(REFERENCED))
    fam = get_block_format(name).family
    x = draw(hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=9), elements=VALUES))
    axis = draw(st.integers(-x.ndim, x.ndim - 1))
    block = draw(st.one_of(st.none(), st.integers(1, 40), st.just(10**9)))
    sr = draw(st.sampled_from([None, *SCALE_ROUNDINGS])) if fam == "mx" else None
    pow2 = draw(st.booleans()) if fam == "fp8_block" else False
    return name, x, axis, block, sr, pow2


def _reference(name, x, axis, k, sr, pow2):
    bf = get_block_format(name)
    if bf.family == "mx":
        elem = MX_ELEM[bf.name]
        return lambda v: mx_block(v, elem, sr or "floor")
    if bf.family == "nvfp4":
        finite = x[np.isfinite(x)]
        s_enc = nvfp4_tensor_scale(max((abs(Fraction(float(v))) for v in finite.flat), default=Fraction(0)))
        return lambda v: nvfp4_block(v, s_enc)
    return lambda v: fp8_block(v, pow2)


@FUZZ
@given(case=block_case())
def test_quantize_matches_the_exact_reference_block_by_block(case):
    name, x, axis, block, sr, pow2 = case
    q = quantize(x, name, axis, block=block, scale_rounding=sr, pow2_scales=pow2)
    k = min(block or get_block_format(name).block, max(x.shape[axis], 1))
    assert q.elements.shape == x.shape and not q.elements.flags.writeable
    ref = _reference(name, x, axis, k, sr, pow2)
    dq = np.moveaxis(q.dequantize(), axis, -1)
    el = np.moveaxis(q.elements.astype(np.float64), axis, -1)
    under, sat = (np.moveaxis(a, axis, -1) for a in (q.stats.underflow, q.stats.saturated))
    for idx, vals in blocks_1d(x, axis, k):
        r = ref(vals)
        *lead, j = idx
        sl = (*lead, slice(j * k, j * k + len(vals)))
        assert same(dq[sl], r.dequant), (idx, vals)
        if r.scale is not None:
            assert same(el[sl], r.elements), (idx, vals)
            assert (under[idx], sat[idx]) == (r.underflow, r.saturated), (idx, vals)


@FUZZ
@given(data=st.data())
def test_quantize_with_junk_arguments_is_one_error_naming_it(data):
    x = np.linspace(-2, 2, 64, dtype=np.float32).reshape(2, 32)
    arg = data.draw(st.sampled_from(["fmt", "axis", "block", "scale_rounding", "rounding", "pow2_scales", "seed",
                                     "rng"]))
    junk = data.draw(st.sampled_from([None, -1, 0, 2.5, "x", (0, 4), (4, 4, 4), [16, 16], True, np.nan, 10**12,
                                      "nearest", "floor"]))
    kwargs = {"fmt": "mxfp8", "axis": -1, "rounding": "stochastic", arg: junk}
    fmt = kwargs.pop("fmt")
    try:
        q = quantize(x, fmt, **kwargs)
    except ALLOWED as e:
        assert one_line(e, arg, repr(junk), str(junk)), (arg, junk, str(e))
        return
    assert q.dequantize().shape == x.shape  # accepted: then it is a working result


def test_the_block_reference_knows_a_scale_of_zero_encodes_by_zero():
    r = nvfp4_block([1e-6] * 16, Fraction(448 * 6))
    assert r.scale == 0 and r.elements == [0.0] * 16 and r.underflow == 16 and r.saturated == 0
    assert math.isclose(float(nvfp4_tensor_scale(Fraction(1))), 2688.0)
