"""Promotion follows from the formats' fields (``Format.holds``): the narrowest format that holds
every input's values.  The table's pairs keep the results PyTorch gives (pinned below as literals,
the rule fpsim had as a rank table keyed by name); formats added by hand follow the same rule."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

from fpsim import Format
from fpsim.formats import FORMATS, get_format, promote, tensor_format

# The result of every pair of the table's tensor formats, as PyTorch promotes (fp8 pair: PyTorch
# refuses it; fpsim gives float16, which holds both).
PINNED = {
    ("float16", "bfloat16"): "float32",
    ("float8_e4m3fn", "float8_e5m2"): "float16",
    ("float8_e4m3fn", "float16"): "float16",
    ("float8_e5m2", "float16"): "float16",
    ("float8_e4m3fn", "bfloat16"): "bfloat16",
    ("float8_e5m2", "bfloat16"): "bfloat16",
    **{(f, "float32"): "float32" for f in FORMATS},
    **{(f, f): f for f in FORMATS},
}

E3M4 = Format("float8_e3m4", np.dtype(ml_dtypes.float8_e3m4), 3, 4)  # ml_dtypes' dtype, not in the table
E3M4_F32 = Format("e3m4", np.dtype(np.float32), 3, 4)  # the same layout, held in float32
E6M1 = Format("e6m1", np.dtype(np.float32), 6, 1)  # more range than float16, less precision than bfloat16


@pytest.mark.parametrize("pair", list(PINNED), ids="+".join)
def test_table_pairs_keep_their_results(pair):
    a, b = (get_format(n) for n in pair)
    want = PINNED[pair]
    assert promote(a, b).name == want and promote(b, a).name == want
    assert promote(a, b, a).name == want


def test_every_table_triple_is_the_pairs_combined():
    for fmts in itertools.combinations(FORMATS.values(), 3):
        want = promote(promote(fmts[0], fmts[1]), fmts[2])
        assert promote(*fmts) is want


@pytest.mark.parametrize("other,want", [
    ("float16", "float16"), ("bfloat16", "bfloat16"), ("float32", "float32"),
    ("float8_e4m3fn", "float16"), ("float8_e5m2", "float16"),
])
@pytest.mark.parametrize("hand", [E3M4, E3M4_F32], ids=["ml_dtypes", "float32-held"])
def test_a_hand_built_format_mixes_with_the_table(hand, other, want):
    """e3m4 (4 mantissa bits, max 15.5, smallest subnormal 2**-6): float16 and bfloat16 hold it,
    neither fp8 does, so with an fp8 the narrowest that holds both is float16."""
    o = get_format(other)
    assert promote(hand, o).name == want and promote(o, hand).name == want
    assert promote(hand, hand) is hand


def test_the_same_layout_twice_is_the_first():
    assert promote(E3M4, E3M4_F32) is E3M4 and promote(E3M4_F32, E3M4) is E3M4_F32


def test_wider_range_than_float16_goes_to_bfloat16_or_float32():
    assert promote(E6M1, get_format("bfloat16")).name == "bfloat16"  # bfloat16 holds e6m1
    assert promote(E6M1, get_format("float16")).name == "float32"  # float16's max 65504 < e6m1's 1.5 * 2**31
    assert E6M1.max == 1.5 * 2**31 and promote(E6M1, E3M4).name == "bfloat16"


def test_holds_is_every_value():
    """``holds`` against the values themselves: every value of b is a value of a."""
    fmts = [*FORMATS.values(), E3M4, E6M1]
    for a, b in itertools.product(fmts, fmts):
        if b.bits > 8:
            continue
        codes = np.arange(256, dtype=np.uint8).view(b.dtype) if b.dtype.itemsize == 1 else None
        vals = codes.astype(np.float32) if codes is not None else _values(b)
        vals = vals[np.isfinite(vals)]
        with np.errstate(over="ignore"):
            back = vals.astype(a.dtype).astype(np.float32) if a.is_ml_dtype else None
        if back is None:
            from fpsim import cast
            back = cast(vals, a)
        assert a.holds(b) == bool(np.array_equal(back, vals)), (a.name, b.name)


def _values(f: Format) -> np.ndarray:
    from fpsim import decode
    return decode(np.arange(2**f.bits), f)


def test_hand_built_tensor_formats_are_accepted_or_refused_by_name():
    assert tensor_format(E3M4) is E3M4 and tensor_format(E3M4_F32) is E3M4_F32
    bad = {
        Format("u3m4", np.dtype(np.float32), 3, 4, signed=False): "needs a sign",
        Format("e2m1x", np.dtype(np.float32), 2, 1, specials="none"): "specials='none'",
        Format("wide", np.dtype(np.float64), 11, 52): "not all float32 values",
        Format("float16", np.dtype(np.float32), 4, 3): "is a table format's",
    }
    for f, msg in bad.items():
        with pytest.raises(ValueError, match=f"{f.name} cannot be a tensor format: .*{msg}"):
            tensor_format(f)
