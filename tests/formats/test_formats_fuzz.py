"""Property tests of the format API (``cast``, ``round_to``, ``classify``): random formats and
aliases, shapes, input dtypes, special values, rounding modes, saturation and seeds, against
gfloat's rounding (tests/support/cast_reference.py); junk names, inputs, modes and seeds are ONE
``ValueError`` / ``TypeError`` whose one-line message names what was wrong.

Adding a format API (a block-scaled ``quantize``, say) is one entry in ``FORMAT_APIS``: how to
call it and how to compute its reference from float64 values.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from support.cast_reference import arrays_of, check_cast, ref_cast

from fpsim import cast as fp_cast
from fpsim import classify, round_to
from fpsim.formats import FORMATS, ROUNDING_MODES, get_format
from fpsim.formats.table import _ALIASES

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

FUZZ = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


NAMES = sorted(FORMATS) + sorted(a for a, n in _ALIASES.items() if n in FORMATS)  # the block formats: test_element_formats


def named(exc: BaseException, *bad) -> bool:
    """The message names at least one of the bad things (its repr, its text or its name)."""
    msg = str(exc)
    return "\n" not in msg.strip() and any(str(b) in msg or repr(b) in msg for b in bad)


def check_classify(x64, c, name, rounding, saturate):
    f = FORMATS[name]
    (r,) = ref_cast(x64, name, "nearest" if rounding == "stochastic" else rounding, saturate)
    if rounding == "stochastic":
        r = c.rounded  # checked against both neighbours by check_cast; categories follow from it
    v = np.asarray(r).astype(np.float64)
    a = np.abs(v)
    want = np.select([a == 0, a < f.tiny, np.isinf(v), np.isnan(v)], [0, 1, 3, 4], default=2)
    assert np.array_equal(c.category, want)
    finite_in = np.isfinite(x64)
    assert np.array_equal(c.underflow, (a == 0) & (x64 != 0) & finite_in)
    if not saturate:
        assert np.array_equal(c.overflow, finite_in & ~np.isfinite(v))


def call_cast(x, name, rounding, saturate, seed):
    return fp_cast(x, name, rounding, saturate=saturate, seed=seed)


def call_round_to(x, name, rounding, saturate, seed):
    out = round_to(x, name, rounding, saturate=saturate, seed=seed)
    return np.asarray(out).astype(get_format(name).dtype)  # exact: the values are on the grid


def call_classify(x, name, rounding, saturate, seed):
    if rounding == "stochastic":
        return None  # classify takes no seed: its stochastic results are checked through cast
    return classify(x, name, rounding, saturate=saturate)


FORMAT_APIS = [
    ("cast", call_cast, check_cast),
    ("round_to", call_round_to, check_cast),
    ("classify", call_classify, check_classify),
]


float_arrays = st.sampled_from([np.float64, np.float32, np.float16]).flatmap(arrays_of)


rounding_modes = st.sampled_from(["nearest", "toward_zero", "stochastic"])


@FUZZ
@given(x=float_arrays, name=st.sampled_from(NAMES), rounding=rounding_modes, saturate=st.booleans(),
       seed=st.integers(0, 2**32))
def test_format_api_matches_gfloat(x, name, rounding, saturate, seed):
    canon = FORMATS[_ALIASES.get(name, name)].name
    if x.dtype == np.float16:
        x64 = x.astype(np.float64)
    else:
        with np.errstate(over="ignore"):
            x64 = x.astype(np.float64)
    for _api, call, check in FORMAT_APIS:
        got = call(x, name, rounding, saturate, seed)
        if got is not None:
            check(x64, got, canon, rounding, saturate)


@FUZZ
@given(x=float_arrays, rounding=rounding_modes, saturate=st.booleans())
def test_format_api_on_bfloat16_and_fp8_inputs(x, rounding, saturate):
    """Low-precision inputs widen exactly: the result is the reference's on the widened values."""
    for src in (ml_dtypes.bfloat16, ml_dtypes.float8_e5m2):
        with np.errstate(all="ignore"):
            lp = x.astype(src)
        for name in ("float8_e4m3fn", "float16"):
            check_cast(lp.astype(np.float64), fp_cast(lp, name, rounding, saturate=saturate, seed=1), name,
                       rounding, saturate)


junk_names = st.one_of(st.text(max_size=8), st.sampled_from(["fp17", "e4m3fnuz", "float128", "int8", "", "FP16 "]))
REFERENCE_ONLY = {"float64", "fp64", "double", "binary64"}  # formats too, held for reference (no tensor format)


junk_inputs = st.one_of(
    st.sampled_from([None, "1.0", b"ab", object(), {1: 2}, [1, "a"], [[1, 2], [3]], 1 + 2j, True]),
    hnp.arrays(st.sampled_from([np.complex64, np.bool_, np.dtype("U3"), np.dtype("O")]), st.integers(0, 3)),
    st.integers(0, 3).map(lambda n: np.zeros(n, "V2")),  # raw bytes
)


@FUZZ
@given(name=junk_names)
def test_unknown_format_names_are_one_value_error_naming_them(name):
    if name in FORMATS or name in _ALIASES or name.strip().lower() in {n.lower() for n in NAMES} | REFERENCE_ONLY:
        return
    for api, call, _ in FORMAT_APIS:
        with pytest.raises(ValueError) as e:
            call(np.float32([1.0]), name, "nearest", False, 0)
        assert named(e.value, repr(name)), (api, str(e.value))


@FUZZ
@given(x=junk_inputs, name=st.sampled_from(NAMES))
def test_non_numeric_inputs_are_one_type_error_naming_what_came(x, name):
    for api, call, _ in FORMAT_APIS:
        try:
            call(x, name, "nearest", False, 0)
        except TypeError as e:
            what = getattr(x, "dtype", None) if isinstance(x, np.ndarray) else type(x).__name__
            assert named(e, what, "non-numbers"), (api, str(e))
        except ValueError as e:  # ragged nested lists: numpy's own shape complaint
            assert isinstance(x, list) and named(e, "shape", "inhomogeneous", "sequence"), (api, str(e))
        else:  # a bool is not a number to fpsim, nor is a complex; everything here is refused
            raise AssertionError(f"{api} accepted {x!r}")


@FUZZ
@given(rounding=st.one_of(st.text(max_size=6), st.sampled_from(["Nearest", "stochastic ", "nearest_even", "up", None, 3])),
       seed=st.one_of(st.none(), st.integers(0, 5)))
def test_bad_rounding_modes_are_named(rounding, seed):
    if isinstance(rounding, str) and rounding.strip().lower() in ROUNDING_MODES:  # any case, as format names
        return
    for api, call, _ in FORMAT_APIS:
        with pytest.raises(ValueError) as e:
            call(np.float32([0.3]), "fp16", rounding, False, seed)
        assert named(e.value, repr(rounding)), (api, str(e.value))


@FUZZ
@given(seed=st.one_of(st.integers(-2**40, -1), st.floats(allow_nan=True), st.text(max_size=3), st.just(True)))
def test_bad_seeds_are_named(seed):
    for fn in (fp_cast, round_to):
        with pytest.raises(ValueError) as e:
            fn(np.float32([0.3]), "bf16", "stochastic", seed=seed)
        assert named(e.value, "seed") and named(e.value, repr(seed)), str(e.value)
    with pytest.raises(TypeError, match="rng must be a numpy Generator"):
        fp_cast(0.3, "bf16", "stochastic", rng=seed)


def test_the_fuzz_reference_itself_is_right():
    """gfloat and the helpers agree with hand-computed roundings (so the fuzz cannot pass by agreeing with nothing)."""
    x = np.array([1000.0, 0.3, 2.0**-10, 1.5 * 2.0**-10, -65520.0, np.inf])
    (e4,) = ref_cast(x, "float8_e4m3fn", "nearest", False)  # 2^-10: a tie between 0 and 2^-9, to even
    assert [float(v) if math.isfinite(v) else str(v) for v in e4.astype(np.float64)] == \
        ["nan", 0.3125, 0.0, 2.0**-9, "nan", "nan"]
    (h,) = ref_cast(x, "float16", "nearest", False)
    assert h.astype(np.float64).tolist()[:5] == [1000.0, 0.300048828125, 2.0**-10, 1.5 * 2.0**-10, -np.inf]
    up, down = ref_cast(np.array([0.3]), "float16", "stochastic", False)
    assert (float(up[0]), float(down[0])) == (0.300048828125, 0.2998046875)  # 1229 and 1228 x 2^-12
