"""fp8 scaling recipes: what decides each tensor's scale (Transformer Engine's ``DelayedScaling``
and ``Float8CurrentScaling``), and the scale computation itself.

**Delayed scaling**: the scale used at step t comes from the amax (max |x|) of that tensor at the
steps BEFORE t, so the cast needs no extra pass over the data.  Each tensor keeps an amax history
of the last ``amax_history_len`` steps; after every step::

    history <- history + [amax of this step]   (the oldest entry drops out beyond the length)
    amax    <- max(history)                    ("most_recent": history[-1])
    scale   <- 2 ** (floor(log2(fmt.max / amax)) - margin)

computed exactly (a power of two, so scaling and unscaling are exact in float32).  Transformer
Engine's delayed scaling uses ``fmt.max / amax / 2**margin`` itself, a float32 not rounded to a
power of two; ``DelayedScaling(power_2_scale=False)`` does the same.  An amax of 0 or a
non-finite amax keeps the previous scale.

**The first step** has no history.  Transformer Engine runs it at scale 1 (``amax_init=False``,
the default here too); ``amax_init=True`` takes each tensor's first scale from its own first
non-zero amax, as torchao's float8 delayed scaling does (``enable_amax_init``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..checks import check_integer, is_real
from ..formats import FP8_FORMATS, get_format
from ..tensorcore import instruction

__all__ = ["AMAX_ALGOS", "DelayedScaling", "CurrentScaling", "FixedScaling", "compute_scale"]

AMAX_ALGOS = ("max", "most_recent")
# The scale and its inverse stay normal float32 numbers: 2^-126 <= scale <= 2^126.
_MAX_EXP = 126


@dataclass(frozen=True)
class DelayedScaling:
    """The recipe: ``margin`` (the scale is divided by a further 2^margin), ``amax_history_len`` (steps of amax remembered), ``amax_compute_algo`` (``"max"``
    over the history or ``"most_recent"``), the fp8 formats for the forward pass (weights,
    activations) and the backward pass (gradients), and ``power_2_scale``: round the scale down
    to a power of two (True, fpsim's default: scaling is exact) or use ``fmt.max / amax /
    2**margin`` as a float32 (False, what Transformer Engine's delayed scaling does), and
    ``amax_init``: the first cast of each tensor that sees a non-zero finite amax takes its scale
    from that amax (True, as torchao's float8 delayed scaling does with ``enable_amax_init``)
    instead of running at scale 1 until the history says otherwise (False, as Transformer Engine
    does).  ``tensor_core``: None (the GEMMs accumulate in float32) or an architecture name
    (``"hopper"``, ``"ada"``, ``"blackwell"``: see :mod:`fpsim.tensorcore`) whose fp8 tensor core
    the three GEMMs run as, without promotion.  Transformer Engine's defaults are
    margin 0, history 1024, max, HYBRID (e4m3 forward, e5m2 backward), no amax init."""

    margin: int = 0
    amax_history_len: int = 1024
    amax_compute_algo: str = "max"
    fwd_format: str = "float8_e4m3fn"
    bwd_format: str = "float8_e5m2"
    power_2_scale: bool = True
    amax_init: bool = False
    tensor_core: str | None = None

    def __post_init__(self):
        check_integer(self.amax_history_len, "amax_history_len", 1)
        check_integer(self.margin, "margin", 0)  # the scale is divided by 2**margin
        if self.amax_compute_algo not in AMAX_ALGOS:
            raise ValueError(f"unknown amax_compute_algo {self.amax_compute_algo!r}; known: {', '.join(AMAX_ALGOS)}")
        for which in ("fwd_format", "bwd_format"):
            name = get_format(getattr(self, which)).name  # unknown names raise, listing the valid ones
            if name not in FP8_FORMATS:
                raise ValueError(f"{which} must be an fp8 format ({', '.join(FP8_FORMATS)}), got {name}")
            object.__setattr__(self, which, name)
        for flag in ("power_2_scale", "amax_init"):
            if not isinstance(getattr(self, flag), bool | np.bool_):
                raise ValueError(f"{flag} must be True or False, got {getattr(self, flag)!r}")
        if self.tensor_core is not None:
            for f in (self.fwd_format, self.bwd_format):
                instruction(self.tensor_core, f, f)  # an unknown architecture or one without fp8 raises
            object.__setattr__(self, "tensor_core", str(self.tensor_core).lower())

    def __str__(self) -> str:
        return (f"delayed scaling: {self.fwd_format} forward, {self.bwd_format} gradients, amax history "
                f"{self.amax_history_len} ({self.amax_compute_algo}), margin {self.margin}"
                + ("" if self.power_2_scale else ", scale fmt.max / amax (not a power of two)")
                + (", first scale from the first amax" if self.amax_init else ""))


@dataclass(frozen=True)
class CurrentScaling(DelayedScaling):
    """Per-tensor *current* scaling (Transformer Engine's ``Float8CurrentScaling``): every cast
    takes its scale from the amax of the very tensor it casts - one extra pass over the data,
    no delay, and nothing saturates.  The amax
    history is still recorded (length ``amax_history_len``, default 1) for the tables; the
    scale rule is :func:`compute_scale` as for delayed scaling (``power_2_scale``, ``margin``).
    The control experiment for delayed scaling: same formats, no stale scales."""

    amax_history_len: int = 1

    def __str__(self) -> str:
        return (f"current scaling: {self.fwd_format} forward, {self.bwd_format} gradients, margin {self.margin}"
                + ("" if self.power_2_scale else ", scale fmt.max / amax (not a power of two)"))


@dataclass(frozen=True)
class FixedScaling(DelayedScaling):
    """Every cast of every tensor at one fixed ``scale`` (default 1: the numbers go into fp8 as
    they are), never changed by an amax - what unit scaling (arXiv 2303.11257) makes safe.  The
    amax history is still recorded (length ``amax_history_len``, default 1) for the tables.
    ``scale``: a power of two in [2^-126, 2^126], so scaling and unscaling are exact."""

    amax_history_len: int = 1
    scale: float = 1.0

    def __post_init__(self):
        super().__post_init__()
        s = self.scale
        if not (is_real(s) and math.isfinite(s) and s > 0 and math.frexp(s)[0] == 0.5
                and -_MAX_EXP <= math.frexp(s)[1] - 1 <= _MAX_EXP):
            raise ValueError(f"FixedScaling: scale must be a power of two in [2^-126, 2^126], got {s!r}")
        if self.amax_init:
            raise ValueError("FixedScaling: amax_init must be False (the scale never comes from an amax)")
        object.__setattr__(self, "scale", float(s))

    def __str__(self) -> str:
        return (f"fixed scale {self.scale:g}: {self.fwd_format} forward, {self.bwd_format} gradients, "
                "no amax-driven scaling")


def compute_scale(amax: float, fmt, margin: int = 0, previous: float = 1.0, power_2: bool = True) -> np.float32:
    """``2 ** (floor(log2(fmt.max / amax)) - margin)`` as a float32, computed exactly; with
    ``power_2=False``, Transformer Engine's ``(fmt.max / amax) / 2**margin``, the division
    rounded once to float32 (``amax`` rounded to float32 first, as TE keeps it).

    ``amax`` 0 (nothing seen) or non-finite keeps ``previous``.  The scale is clamped to
    [2^-126, 2^126], so it and its inverse are normal float32 numbers.
    """
    f = get_format(fmt)
    a = float(amax)
    if not (math.isfinite(a) and a > 0):
        return np.float32(previous)
    if not power_2:
        with np.errstate(over="ignore"):
            r = float(np.float32(f.max) / np.float32(a))  # inf when amax is a tiny float32
        r = min(max(math.ldexp(r, -int(margin)), 2.0**-_MAX_EXP), 2.0**_MAX_EXP)
        return np.float32(r)
    # frexp gives floor(log2(r)) for the rounded float64 ratio; check it against the exact
    # products (powers of two times amax are exact) so a rounded ratio cannot move it.
    _, e = math.frexp(f.max / a)
    k = e - 1
    while math.ldexp(a, k) > f.max:
        k -= 1
    while math.ldexp(a, k + 1) <= f.max:
        k += 1
    k = min(max(k - int(margin), -_MAX_EXP), _MAX_EXP)
    return np.float32(math.ldexp(1.0, k))
