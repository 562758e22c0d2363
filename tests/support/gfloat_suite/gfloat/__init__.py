"""A stand-in for gfloat whose rounding, encoding and decoding are fpsim's, so that gfloat's own
test suite runs against fpsim.  The format tables, FormatInfo and the block helpers are the real
installed gfloat's; ``RoundMode`` is the newest gfloat's (with ``ToOdd``).  Run it from a gfloat
checkout's ``test`` directory::

    PYTHONPATH=<fpsim>/tests/support/gfloat_suite:<fpsim> pytest -p no:cacheprovider \\
        test_round.py test_p3109_spec.py test_encode.py test_decode.py test_finfo.py test_block.py

Every format gfloat's tests use is one of fpsim's (binary64 and P3109 with k = 2 and k = 11 too),
so nothing is skipped (a format fpsim did not have would skip its test).  Against gfloat's main
(b142762) with gfloat 0.5.2 installed: 423 pass and 8 fail by one convention, NaN codes - fpsim's
encoder keeps a NaN's payload and sign as numpy and ml_dtypes store them (binary16, bfloat16,
binary32, binary64, e5m2, e4m3; e4m3's overflow is the NaN 0x7F) where gfloat writes its one code.
"""

import enum
import importlib.metadata
import importlib.util
import sys

import numpy as np
import pytest

import fpsim

_init = importlib.metadata.distribution("gfloat").locate_file("gfloat/__init__.py")
_spec = importlib.util.spec_from_file_location("_gfloat_real", _init, submodule_search_locations=[str(_init.parent)])
_real = importlib.util.module_from_spec(_spec)
sys.modules["_gfloat_real"] = _real
_spec.loader.exec_module(_real)

from _gfloat_real.types import Domain, FloatClass, FloatValue, FormatInfo, Signedness  # noqa: E402, F401

BlockFormatInfo, compute_scale_amax = _real.BlockFormatInfo, _real.compute_scale_amax
decode_block, encode_block, quantize_block = _real.decode_block, _real.encode_block, _real.quantize_block
float_pow2str, float_tilde_unless_roundtrip_str = _real.float_pow2str, _real.float_tilde_unless_roundtrip_str


class RoundMode(enum.Enum):
    TowardZero = enum.auto()
    TowardNegative = enum.auto()
    TowardPositive = enum.auto()
    TiesToEven = enum.auto()
    TiesToAway = enum.auto()
    ToOdd = enum.auto()
    Stochastic = enum.auto()
    StochasticOdd = enum.auto()
    StochasticFast = enum.auto()
    StochasticFastest = enum.auto()


_MODE = {"TowardZero": "toward_zero", "TowardNegative": "toward_negative", "TowardPositive": "toward_positive",
         "TiesToEven": "nearest", "TiesToAway": "nearest_away", "ToOdd": "to_odd"}
_SR = {"Stochastic": "rne", "StochasticOdd": "rto", "StochasticFast": "fast", "StochasticFastest": "fastest"}
_NAMES = {"binary32": "float32", "binary16": "float16", "bfloat16": "bfloat16", "ocp_e4m3": "float8_e4m3fn",
          "ocp_e5m2": "float8_e5m2", "ocp_e2m3": "float6_e2m3fn", "ocp_e3m2": "float6_e3m2fn",
          "ocp_e2m1": "float4_e2m1fn", "ocp_e8m0": "float8_e8m0fnu", "ocp_int8": "ocp_int8", "binary64": "float64"}


def _name(fi) -> str:
    name = _NAMES.get(fi.name, fi.name)
    try:
        fpsim.get_format(name)
    except ValueError:
        pytest.skip(f"fpsim has no format {fi.name}")
    return name


def _round_ndarray(fi, v, rnd=RoundMode.TiesToEven, sat=False, srbits=None, srnumbits=0):
    name, v = _name(fi), np.asarray(v)
    kw = {}
    if rnd.name in _SR:
        kw = {"sr_bits": int(srnumbits), "sr_random": np.asarray(srbits).astype(np.int64), "sr_variant": _SR[rnd.name]}
    out = fpsim.round_to(v.astype(np.float64), name, _MODE.get(rnd.name, "stochastic"), saturate=sat, **kw)
    return out.astype(v.dtype if v.dtype.kind == "f" else np.float64)


round_ndarray = _round_ndarray


def round_float(fi, v, rnd=RoundMode.TiesToEven, sat=False, srbits=-1, srnumbits=0):
    bits = None if srbits is None else np.array([srbits])
    return float(_round_ndarray(fi, np.array([float(v)]), rnd, sat, bits, srnumbits)[0])


def encode_ndarray(fi, v):
    """gfloat's encoder: toward zero, and beyond max the format's inf, else NaN, else max."""
    name = _name(fi)
    v = np.asarray(v, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        v = np.where(np.abs(v) > fpsim.get_format(name).max, np.copysign(np.inf, v), v)
    return fpsim.encode(v, name, "toward_zero").astype(np.uint64)


def encode_float(fi, v):
    return int(encode_ndarray(fi, np.array([v]))[0])


def decode_ndarray(fi, codes, np=np):
    return fpsim.decode(codes, _name(fi)).astype(np.float64)


def decode_float(fi, i):
    fv = _real.decode_float(fi, i)
    fv.fval = float(decode_ndarray(fi, np.array([i]))[0])
    return fv
