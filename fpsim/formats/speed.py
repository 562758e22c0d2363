"""What the rounding modes cost: each new mode against ``nearest`` into the same format, timed in
the same process, interleaved, as ratios (the numbers behind the bench rows of the P3109 and
few-bit SR families).  float32 input, 10**6 values of mixed magnitude by default."""

from __future__ import annotations

import time

import numpy as np

from .round import cast

__all__ = ["SPEED_CASES", "rounding_speed"]

# (family, format, mode, extra cast arguments, the peer: format and mode of the same call)
SPEED_CASES = (
    ("P3109", "p3109_k8p4se", "nearest", {}, ("float8_e4m3fn", "nearest")),
    *(("P3109", "p3109_k8p4se", m, {}, ("p3109_k8p4se", "nearest"))
      for m in ("nearest_away", "toward_zero", "toward_positive", "toward_negative", "to_odd")),
    ("P3109", "p3109_k8p3ue", "toward_zero", {}, ("p3109_k8p3ue", "nearest")),
    *(("few-bit SR", fmt, "stochastic", {"sr_bits": k, "sr_variant": v, "given": True}, (fmt, "nearest"))
      for fmt in ("float16", "float8_e4m3fn", "p3109_k8p4se") for k, v in ((4, "rne"), (8, "fastest"), (12, "fast"))),
    *(("few-bit SR", fmt, "stochastic", {"sr_bits": 8, "sr_variant": "rne"}, (fmt, "nearest"))
      for fmt in ("float16", "float8_e4m3fn")),
    ("modes", "float16", "toward_zero", {}, ("float16", "nearest")),
    ("modes", "float16", "to_odd", {}, ("float16", "nearest")),
    ("modes", "float8_e4m3fn", "toward_positive", {}, ("float8_e4m3fn", "nearest")),
)


def _data(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n) * np.exp2(rng.integers(-12, 4, n))).astype(np.float32)  # |x| < 224: no overflow


def rounding_speed(n: int = 10**6, repeats: int = 15, cases=SPEED_CASES, seed: int = 0) -> list[dict]:
    """Time each case and its peer, alternately, ``repeats`` times each on the same float32 array;
    report the best time of each (ns a value) and their ratio (case / peer).  The times are the
    process's CPU time (``time.process_time``), the best of many: on a shared machine the wall
    time of a 10**6-value pass swings by 10x with the other processes' load.  ``given=True`` in a
    case's arguments hands ``cast`` the random bits (``sr_random``, drawn once beforehand): the
    rounding's cost alone; without it the bits are drawn from the generator inside the call."""
    x = _data(n, seed)
    bits = {k: np.random.default_rng(seed).integers(0, 2**k, n, dtype=np.uint32) for k in (4, 8, 12)}
    rows = []
    for family, fmt, mode, extra, (pfmt, pmode) in cases:
        kw = dict(extra)
        if kw.pop("given", False):
            kw["sr_random"] = bits[kw["sr_bits"]]
        if mode == "stochastic" and "sr_random" not in kw:
            kw["seed"] = seed
        best, peer = np.inf, np.inf
        for _ in range(repeats):
            t0 = time.process_time()
            cast(x, pfmt, pmode)
            t1 = time.process_time()
            cast(x, fmt, mode, **kw)
            t2 = time.process_time()
            peer, best = min(peer, t1 - t0), min(best, t2 - t1)
        label = mode if not extra else f"{mode} k={extra['sr_bits']} {extra['sr_variant']}" + (
            " (bits given)" if extra.get("given") else " (bits drawn)")
        rows.append({"family": family, "case": f"{fmt} {label}", "peer": f"{pfmt} {pmode}",
                     "ns_per_value": best / n * 1e9, "peer_ns_per_value": peer / n * 1e9, "ratio": best / peer})
    return rows
