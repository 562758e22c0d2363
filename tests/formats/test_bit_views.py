"""The one bit-pattern view table (fpsim.formats.bitviews): every format's storage viewed bit for bit,
code points and k random bits in the narrowest unsigned dtype, and no module with a table of its own."""

from __future__ import annotations

import pathlib
import re

import ml_dtypes
import numpy as np
import pytest

import fpsim
from fpsim.formats import ALL_FORMATS, OCP_INT8, P3109_FORMATS, UINT_VIEWS, bits_view, uint_for_bits
from fpsim.formats.codes import code_dtype

# dtype -> the unsigned dtype numpy itself says has its size (np.dtype(f"u{itemsize}"))
DTYPES = [np.float16, np.float32, np.float64, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float4_e2m1fn,
          ml_dtypes.float8_e3m4, np.int16, np.complex64]


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: np.dtype(d).name)
def test_bits_view_is_the_unsigned_dtype_of_the_same_size(dt):
    ref = np.dtype(f"u{np.dtype(dt).itemsize}")
    assert bits_view(dt) == ref == bits_view(np.dtype(dt)) == bits_view(np.zeros(3, dt)) == bits_view(np.dtype(dt).name)
    assert bits_view(np.zeros((), dt)[()]) == ref  # a numpy scalar


def test_every_format_is_viewed_through_its_storage_and_coded_in_its_width():
    for f in [*ALL_FORMATS.values(), OCP_INT8, *P3109_FORMATS.values()]:
        assert bits_view(f) == np.dtype(f"u{f.dtype.itemsize}"), f.name
        assert code_dtype(f) == uint_for_bits(f.bits) and 8 * code_dtype(f).itemsize >= f.bits, f.name
    x = np.array([1.0, -2.5, 65504.0], np.float16)
    assert x.view(bits_view(fpsim.get_format("fp16"))).tolist() == [0x3C00, 0xC100, 0x7BFF]


def test_uint_for_bits_picks_the_narrowest_that_holds_them():
    got = {b: uint_for_bits(b).itemsize for b in (1, 4, 8, 9, 12, 16, 17, 32, 33, 64)}
    assert got == {1: 1, 4: 1, 8: 1, 9: 2, 12: 2, 16: 2, 17: 4, 32: 4, 33: 8, 64: 8}
    assert uint_for_bits(np.int64(8)) == np.uint8 and list(UINT_VIEWS) == [1, 2, 4, 8]


def test_bad_arguments_name_what_was_wrong():
    with pytest.raises(ValueError, match=r"^uint_for_bits: bits must be an integer in \[1, 64\], got 0$"):
        uint_for_bits(0)
    with pytest.raises(ValueError, match="got True"):
        uint_for_bits(True)
    with pytest.raises(ValueError, match="no unsigned integer view of 16-byte dtype complex128"):
        bits_view(np.complex128)
    with pytest.raises(TypeError, match="bits_view: expected a dtype, an array or a Format, got object"):
        bits_view(object())


def test_no_module_keeps_a_view_table_of_its_own():
    """A width -> uint choice written out (``np.uint8 if ... else np.uint16``, ``{1: np.uint8, ...}``)
    anywhere in the package but bitviews.py is a second table.  fpsim.numerics lies beneath the formats
    (they import its compiled kernels), so it cannot read their table: it is not searched."""
    root = pathlib.Path(fpsim.__file__).parent
    pattern = re.compile(r"uint(8|16|32|64) if |\{ *\d+ *: *(np\.|xp\.|[\"'])uint")
    found = [f"{p.relative_to(root)}:{i}" for p in root.rglob("*.py")
             if p.name != "bitviews.py" and p.relative_to(root).parts[0] != "numerics"
             for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []
