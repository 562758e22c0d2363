"""gfloat as the reference for every format, mode and saturation: the FormatInfo of each fpsim
format, the RoundMode of each fpsim mode, probe values built from gfloat's own decoding (every
code point of a small format, a sample of a 16-bit one: the values, the midpoints between
neighbours, points just either side of those, binade edges, beyond max, zeros, infinities and
NaN), and a comparison that also looks at the sign of zero.  Nothing here calls fpsim."""

from __future__ import annotations

import re

import numpy as np
import pytest

gfloat = pytest.importorskip("gfloat")
gformats = pytest.importorskip("gfloat.formats")
RoundMode, Domain, Signedness = gfloat.RoundMode, gfloat.Domain, gfloat.Signedness

INFO = {
    "float32": gformats.format_info_binary32,
    "float16": gformats.format_info_binary16,
    "bfloat16": gformats.format_info_bfloat16,
    "float8_e4m3fn": gformats.format_info_ocp_e4m3,
    "float8_e5m2": gformats.format_info_ocp_e5m2,
    "float6_e2m3fn": gformats.format_info_ocp_e2m3,
    "float6_e3m2fn": gformats.format_info_ocp_e3m2,
    "float4_e2m1fn": gformats.format_info_ocp_e2m1,
    "ocp_int8": gformats.format_info_ocp_int8,
    "float8_e8m0fnu": gformats.format_info_ocp_e8m0,
    "float64": gformats.format_info_binary64,
}
GMODE = {"nearest": RoundMode.TiesToEven, "nearest_away": RoundMode.TiesToAway,
         "toward_zero": RoundMode.TowardZero, "toward_positive": RoundMode.TowardPositive,
         "toward_negative": RoundMode.TowardNegative}
GSR = {"rne": RoundMode.Stochastic, "rto": RoundMode.StochasticOdd, "fast": RoundMode.StochasticFast,
       "fastest": RoundMode.StochasticFastest}


def info(name: str):
    """gfloat's FormatInfo for an fpsim format name (P3109 names are gfloat's own)."""
    m = re.fullmatch(r"p3109_k(\d+)p(\d+)([su])([ef])", name)
    if m:
        return gformats.format_info_p3109(int(m[1]), int(m[2]), Signedness.Signed if m[3] == "s" else Signedness.Unsigned,
                                          Domain.Extended if m[4] == "e" else Domain.Finite)
    return INFO[name]


def values_of(fi) -> np.ndarray:
    """Every finite value of a format of <= 12 bits, or a sample of a wider one (every 97th code point
    and its neighbour for 13..16 bits; gfloat decoding), sorted, without duplicates (float64)."""
    n = 2**fi.k
    step = 1 if fi.k <= 12 else 97 if fi.k <= 16 else 2**fi.k // 20000 + 1
    codes = np.arange(0, n, step, dtype=np.uint64)  # binary64's 2**64 codes: unsigned
    codes = np.unique(np.r_[codes, codes[:-1] + np.uint64(1)])
    v = gfloat.decode_ndarray(fi, codes)
    return np.unique(v[np.isfinite(v)])


def probes(fi, rng, n_random: int = 2000) -> np.ndarray:
    """Values that test a rounding (float64): see the module docstring."""
    with np.errstate(over="ignore"):  # binary64's and the wide P3109 formats' sums, beyond float64 or float32
        return _probes(fi, rng, n_random)


def _probes(fi, rng, n_random: int) -> np.ndarray:
    v = values_of(fi)
    pos = v[v > 0]
    if pos.size == 0:  # no finite value but 0 (P3109 k = 2, signed, extended): probe around 1
        pos = np.array([1.0])
    mids = (v[:-1] + v[1:]) / 2
    quarter = v[:-1] + (v[1:] - v[:-1]) / 4
    top = pos.max()
    near = np.r_[np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf),
                 np.nextafter(mids.astype(np.float32), np.float32(np.inf)).astype(np.float64)]
    beyond = top * np.array([1.0 + 2.0**-12, 1.01, 1.2, 1.5, 2.0, 4.0, 1e3])
    lo, hi = np.log2(pos.min()) - 3, np.log2(top) + 2
    rand = np.exp2(rng.uniform(lo, hi, n_random)) * rng.choice([-1.0, 1.0], n_random)
    small = pos.min() * np.array([0.25, 0.5, 0.75, 1.0 - 2.0**-20, 1.5])
    out = np.r_[v, mids, quarter, near, beyond, -beyond, small, -small, rand, 0.0, -0.0, np.inf, -np.inf]
    return out


def as_float32_exact(v: np.ndarray) -> np.ndarray:
    """The probes float32 holds exactly (infinities and zeros included)."""
    with np.errstate(over="ignore"):
        f = v.astype(np.float32)
    return f[(f.astype(np.float64) == v) | np.isinf(v)]


def round_ref(fi, v64: np.ndarray, mode, sat: bool, srbits=None, srnumbits: int = 0) -> np.ndarray:
    """gfloat.round_ndarray, saturating where the format has neither inf nor NaN (fpsim always
    saturates those: gfloat raises instead)."""
    no_special = fi.num_nans == 0 and fi.domain == Domain.Finite
    with np.errstate(over="ignore"):  # its ldexp past float64's range: inf, which it then handles
        return gfloat.round_ndarray(fi, v64, mode, sat or no_special, srbits, srnumbits)


def assert_same(got, want, v=None) -> None:
    """Equal values, NaN where NaN, and the same sign of zero."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    same &= (np.signbit(got) == np.signbit(want)) | np.isnan(want)
    if not same.all():
        i = np.flatnonzero(~same)[:6]
        where = f" at inputs {v[i].tolist()}" if v is not None else ""
        raise AssertionError(f"{(~same).sum()} of {same.size} differ{where}: got {got[i].tolist()}, "
                             f"gfloat {want[i].tolist()}")


def to_odd_ref(fi, v64: np.ndarray) -> np.ndarray:
    """Round to odd for in-range values (|v| <= max), from gfloat's directed roundings and its
    encoder: v if representable, else whichever neighbour's code point is odd."""
    tz = round_ref(fi, v64, RoundMode.TowardZero, False)
    up = round_ref(fi, v64, RoundMode.TowardPositive, True)
    down = round_ref(fi, v64, RoundMode.TowardNegative, True)
    away = np.where(v64 < 0, down, up)
    odd_tz = (gfloat.encode_ndarray(fi, tz) & 1) == 1
    return np.where((tz == v64) | odd_tz, tz, away)
