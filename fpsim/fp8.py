"""fp8 training with per-tensor delayed scaling (Transformer Engine's ``DelayedScaling``).

fp8 has too little range for raw activations and gradients (e4m3fn: 2^-9 .. 448; e5m2:
2^-16 .. 57344), so every fp8 tensor carries a float32 **scale**: the stored fp8 numbers are
``x * scale``, rounded (to nearest even) with **saturation** - values beyond the format's max
become +-max, as the hardware's saturating conversions do - and the value they stand for is
``fp8 * (1 / scale)`` (:class:`Fp8Tensor`).  Following Micikevicius et al. (2022) and
Transformer Engine's HYBRID format, weights and forward activations use e4m3fn (more
precision), gradients e5m2 (more range).

**Delayed scaling**: the scale used at step t comes from the amax (max |x|) of that tensor
at the steps BEFORE t, so the cast needs no extra pass over the data.  Each tensor has a
:class:`ScalingState` with an amax history of the last ``amax_history_len`` steps; after every
step (``ScalingGroup.update()``)::

    history <- history + [amax of this step]   (the oldest entry drops out beyond the length)
    amax    <- max(history)                    ("most_recent": history[-1])
    scale   <- 2 ** (floor(log2(fmt.max / amax)) - margin)

computed exactly (a power of two, so scaling and unscaling are exact in float32).  Transformer
Engine's delayed scaling uses ``fmt.max / amax / 2**margin`` itself, a float32 not rounded to a
power of two (its current-scaling recipe has a ``force_pow_2_scales`` switch); with
``DelayedScaling(power_2_scale=False)`` fpsim does the same, and then ``x * scale`` and the
unscaling each round in float32 as they do on the GPU.  Rounding down to a power of two gives
up at most one binade of headroom at the top; on the reference task (scale-1 start, seeds 0-3)
the unrounded scale ends at 1.139x fp32 against 1.143x: no difference beyond seed noise.
An amax of 0 or a non-finite amax keeps the previous scale.

**The first step** has no history.  Transformer Engine runs it at scale 1 (``amax_init=False``,
the default here too).  With the reference task's gradients near 1e-8 that flushes every e5m2
gradient of step 0 at the last layer; the layers below then receive exact zeros, record an
amax of 0 - which keeps the scale at 1 - and flush again next step, so the gradient scales
wake up one layer per step: 99% of the weights stand still in step 0 and 43-55% in steps 1-3
(seed 0).  The loss overshoots (up to 1.7-1.9x fp32's, near step 12) and ends higher on 6 of
seeds 0-7, by 3 points on average: 1.130x fp32 against 1.099x.  ``amax_init=True`` takes each tensor's first scale
from its own amax, as torchao's float8 delayed scaling does (``enable_amax_init``); the recipes
in ``fpsim.experiments`` use it.

**The fp8 linear layer** (:func:`linear`, the module :class:`Linear`, :func:`convert` to swap
them into a model) follows Transformer Engine's ``te.Linear``:

- forward: ``x`` and ``W`` are cast to e4m3fn with their own scales; the matmul multiplies the
  fp8 numbers exactly in float32, accumulates in float32 and multiplies the sum by
  ``(1/s_x) * (1/s_W)`` (exact for power-of-two scales; otherwise that product is rounded once
  to float32, and the multiplication rounds); the bias is added in float32 and the sum
  rounded once into the output format (that of an ordinary ``linear`` on the unquantized
  inputs: float32 for a float32 model).
- backward: the incoming gradient ``g`` is cast to e5m2 with its own delayed scale; then
  ``dx = (g8 @ W8) / (s_g s_W)`` and ``dW = (g8.T @ x8) / (s_g s_x)``, float32 accumulation
  again; ``db`` is summed in float32 from the unquantized ``g`` (TE computes it in the same
  pass as the cast, from the high-precision gradient).
- the parameters stay in their own (float32) format: they are the master weights, and the
  optimizer updates them as usual.  The fp8 weight is a fresh cast each step.

Every cast goes through ``tensor.round_result`` (op ``"fp8.cast"``, target ``"input"``,
``"weight"`` or ``"grad_output"``), so ``fpsim.monitor()`` counts the saturations (as
overflows) and the flushes to zero per layer; each :class:`ScalingState` also counts them and
shows its scale and history (``ScalingGroup.table()``).

:func:`qdq` is the same cast as one differentiable "fake quantization" op on any tensor:
forward ``x -> fp8 -> float32``, backward straight through, with the incoming gradient cast
to e5m2 with its own delayed scale.
"""

from __future__ import annotations

import copy
import math
import numbers
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from . import nn
from .backend import Backend
from .formats import Format, cast, get_format
from .tensor import Tensor, promote, round_result
from .textable import text_table

__all__ = ["DelayedScaling", "CurrentScaling", "ScalingState", "ScalingGroup", "Fp8Tensor", "LinearScaling", "Linear",
           "compute_scale", "quantize", "qdq", "linear", "convert", "f32_to_fp8", "format_scaling_table",
           "FP8_FORMATS", "AMAX_ALGOS"]

FP8_FORMATS = ("float8_e4m3fn", "float8_e5m2")
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
    does).  Transformer Engine's defaults are
    margin 0, history 1024, max, HYBRID (e4m3 forward, e5m2 backward), no amax init."""

    margin: int = 0
    amax_history_len: int = 1024
    amax_compute_algo: str = "max"
    fwd_format: str = "float8_e4m3fn"
    bwd_format: str = "float8_e5m2"
    power_2_scale: bool = True
    amax_init: bool = False

    def __post_init__(self):
        h = self.amax_history_len
        if isinstance(h, bool) or not isinstance(h, numbers.Integral) or h < 1:
            raise ValueError(f"amax_history_len must be an integer >= 1, got {h!r}")
        m = self.margin
        if isinstance(m, bool) or not isinstance(m, numbers.Integral) or m < 0:
            raise ValueError(f"margin must be an integer >= 0 (the scale is divided by 2**margin), got {m!r}")
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


class ScalingState:
    """Delayed scaling of one tensor: its fp8 format, scale, amax history and counts.

    ``scale`` (float32; a power of two unless ``recipe.power_2_scale`` is False) is what the next
    cast multiplies by; ``amax_history``
    the amaxes of the last ``amax_history_len`` steps, oldest first; ``step_amax`` the amax seen
    so far in the current step (None before the first cast).  Counts: ``n`` values cast,
    ``saturated`` finite values whose scaled magnitude lay beyond what rounds to max (clamped
    to +-max instead of becoming inf / NaN), ``underflow`` non-zero values that became 0 -
    totals in ``counts``, the most recent finished step in ``last``.  ``init_scale`` is the
    scale before any amax is known; with ``recipe.amax_init`` the first non-zero finite amax
    replaces it.
    """

    def __init__(self, name: str, fmt, recipe: DelayedScaling | None = None, init_scale: float = 1.0):
        recipe = recipe if recipe is not None else DelayedScaling()
        f = get_format(fmt)
        if f.name not in FP8_FORMATS:
            raise ValueError(f"ScalingState {name!r}: format must be fp8 ({', '.join(FP8_FORMATS)}), got {f.name}")
        if not (isinstance(init_scale, numbers.Real) and init_scale > 0 and math.isfinite(init_scale)):
            raise ValueError(f"init_scale must be a finite number > 0, got {init_scale!r}")
        self.name = name
        self.fmt: Format = f
        self.recipe = recipe
        self.scale = np.float32(init_scale)
        # amax_init: pending until a non-zero finite amax is seen (current scaling needs none)
        self._init_pending = bool(recipe.amax_init) and not isinstance(recipe, CurrentScaling)
        self.amax_history: list[float] = []
        self.step_amax: float | None = None
        self.steps = 0
        self.counts = {"n": 0, "saturated": 0, "underflow": 0}
        self._current = dict.fromkeys(self.counts, 0)
        self.last = dict.fromkeys(self.counts, 0)

    @property
    def scale_inv(self) -> np.float32:
        """1 / scale as a float32 (exact when the scale is a power of two, else rounded once)."""
        return np.float32(1.0 / float(self.scale))

    @property
    def amax(self) -> float:
        """The amax the current scale came from (0.0 before the first update)."""
        if not self.amax_history:
            return 0.0
        if self.recipe.amax_compute_algo == "most_recent":
            return self.amax_history[-1]
        return float(np.max(self.amax_history))  # NaN-propagating, unlike max()

    def cast(self, x32, backend: Backend, op: str = "fp8.cast", direction: str = "forward", target: str = ""):
        """Round ``x32 * scale`` (float32) into the fp8 format with saturation - the one rounding
        - record this step's amax and counts, and return the stored fp8 array.  With
        ``recipe.amax_init`` the first cast with a non-zero finite amax first sets the scale from
        it (read ``scale`` after the call, or use :meth:`to_fp8`)."""
        if getattr(x32, "dtype", None) != np.float32:  # before any state changes
            raise TypeError(f"ScalingState {self.name!r}: cast() takes a float32 array, got "
                            f"{getattr(x32, 'dtype', type(x32).__name__)}")
        xp = backend.xp
        a = xp.abs(x32)
        amax = float(a.max()) if a.size else 0.0
        if isinstance(self.recipe, CurrentScaling):  # this tensor's own amax, every cast
            self.scale = compute_scale(amax, self.fmt, self.recipe.margin, self.scale, self.recipe.power_2_scale)
        elif self._init_pending and math.isfinite(amax) and amax > 0:
            # A tensor of zeros (the gradient below a layer whose gradients all flushed, a
            # zero-initialised layer) must not use the init up: it waits for real values.
            self.scale = compute_scale(amax, self.fmt, self.recipe.margin, self.scale, self.recipe.power_2_scale)
            self._init_pending = False
        self.step_amax = amax if self.step_amax is None else float(np.max([self.step_amax, amax]))
        s = xp.float32(self.scale)
        codes = round_result(x32 * s, self.fmt, backend, op, direction, target, saturate=True)
        sat = 0
        # The cast rounds x * scale in float32, so the early-out must too (an exact product just
        # below the threshold can round up onto it when the scale is not a power of two).
        with np.errstate(over="ignore", invalid="ignore"):
            top = float(np.float32(amax) * np.float32(self.scale))
        if not top < _beyond_threshold(self.fmt):
            a_s = a * s
            thr = self.fmt.overflow_threshold
            beyond = (a_s >= thr) if self.fmt.has_inf else (a_s > thr)  # e4m3fn rounds the tie itself to max
            sat = int(xp.count_nonzero(beyond & xp.isfinite(x32)))
        # To nearest, |v| <= half the smallest subnormal becomes 0 (the tie goes to 0, the even side).
        # A power-of-two scale: compared unscaled (dividing by it is exact), one pass fewer over the
        # data; any other scale: compared on the scaled products the cast rounded.
        if _is_power_of_two(self.scale):
            under = int(xp.count_nonzero(a <= xp.float32(self.fmt.flush_threshold / float(self.scale))))
        else:
            under = int(xp.count_nonzero(a * s <= xp.float32(self.fmt.flush_threshold)))
        under -= int(x32.size) - int(xp.count_nonzero(x32))
        for k, v in (("n", int(x32.size)), ("saturated", sat), ("underflow", under)):
            self.counts[k] += v
            self._current[k] += v
        return codes

    def to_fp8(self, x32, backend: Backend, direction: str = "forward", target: str = "") -> Fp8Tensor:
        """:meth:`cast`, wrapped with the scale it used."""
        codes = self.cast(x32, backend, direction=direction, target=target or self.name)
        return Fp8Tensor(codes, self.fmt, self.scale, backend)

    def update(self) -> None:
        """End of a step: push this step's amax into the history and recompute the scale.
        A tensor not cast during the step keeps its history and scale."""
        if self.step_amax is None:
            return
        self.amax_history.append(self.step_amax)
        del self.amax_history[:-self.recipe.amax_history_len]
        self.scale = compute_scale(self.amax, self.fmt, self.recipe.margin, self.scale, self.recipe.power_2_scale)
        self.step_amax = None
        self.steps += 1
        self.last = self._current
        self._current = dict.fromkeys(self.counts, 0)

    _COUNT_KEYS = ("n", "saturated", "underflow")

    def state_dict(self) -> dict:
        """What a resumed run needs, between steps: the format's name, the scale (float32), the
        amax history (float32 - every amax is the |max| of float32 data, so exact), the step
        count, whether ``amax_init`` is still pending, and the counts."""
        if self.step_amax is not None:
            raise RuntimeError(f"ScalingState {self.name!r}: state_dict() in the middle of a step; call update() "
                               "(ScalingGroup.update()) after the step first")
        out = {"format": self.fmt.name, "scale": np.float32(self.scale),
               "amax_history": np.asarray(self.amax_history, np.float32),
               "steps": int(self.steps), "init_pending": int(self._init_pending)}
        for k in self._COUNT_KEYS:
            out[f"counts.{k}"] = int(self.counts[k])
            out[f"last.{k}"] = int(self.last[k])
        return out

    def load_state_dict(self, sd: dict) -> None:
        """Restore :meth:`state_dict`'s output, between steps or in the middle of one (the
        unfinished step is dropped).  Everything is checked before anything changes."""
        who = f"ScalingState {self.name!r}"
        want = {"format", "scale", "amax_history", "steps", "init_pending",
                *(f"{p}.{k}" for p in ("counts", "last") for k in self._COUNT_KEYS)}
        missing, extra = sorted(want - set(sd)), sorted(set(sd) - want)
        if missing or extra:
            raise ValueError(f"{who}: missing {missing}, unexpected {extra} (left unchanged)")
        if str(sd["format"]) != self.fmt.name:
            raise ValueError(f"{who}: saved for {sd['format']}, this tensor is {self.fmt.name} (left unchanged)")
        try:
            scale = float(np.asarray(sd["scale"]))
            hist = np.asarray(sd["amax_history"], dtype=np.float64).reshape(-1)
            ints = {k: int(sd[k]) for k in want - {"format", "scale", "amax_history"}}
        except (TypeError, ValueError) as e:
            raise ValueError(f"{who}: unreadable entry ({e}) (left unchanged)") from None
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"{who}: scale must be a finite number > 0, got {scale!r} (left unchanged)")
        if hist.size > self.recipe.amax_history_len:
            raise ValueError(f"{who}: amax history of {hist.size} steps does not fit the recipe's "
                             f"amax_history_len={self.recipe.amax_history_len} (left unchanged)")
        if np.any(hist < 0):  # NaN / inf amaxes are possible (a step that overflowed); negative ones are not
            raise ValueError(f"{who}: negative amax in the history (left unchanged)")
        bad = [k for k, v in ints.items() if v < 0]
        if bad:
            raise ValueError(f"{who}: negative {', '.join(sorted(bad))} (left unchanged)")
        self._restore({"scale": np.float32(scale), "amax_history": [float(v) for v in hist], "steps": ints["steps"],
                       "_init_pending": bool(ints["init_pending"]) and self.recipe.amax_init
                       and not isinstance(self.recipe, CurrentScaling),
                       "step_amax": None, "counts": {k: ints[f"counts.{k}"] for k in self._COUNT_KEYS},
                       "last": {k: ints[f"last.{k}"] for k in self._COUNT_KEYS},
                       "_current": dict.fromkeys(self._COUNT_KEYS, 0)})

    _FIELDS = ("scale", "amax_history", "steps", "_init_pending", "step_amax", "counts", "last", "_current")

    def _snapshot(self) -> dict:
        """Every field, as it is now (also in the middle of a step): for rolling back a load."""
        return {k: copy.deepcopy(getattr(self, k)) for k in self._FIELDS}

    def _restore(self, snap: dict) -> None:
        for k in self._FIELDS:
            setattr(self, k, snap[k])

    def summary(self) -> dict:
        """Plain numbers: name, format, scale (and log2), the amax it came from, the history
        length, and the counts (totals and the last step's)."""
        return {"name": self.name, "format": self.fmt.name, "scale": float(self.scale),
                "log2_scale": _log2_scale(self.scale), "amax": self.amax,
                "history": len(self.amax_history), "steps": self.steps, **self.counts,
                "last_n": self.last["n"], "last_saturated": self.last["saturated"],
                "last_underflow": self.last["underflow"]}

    def __repr__(self) -> str:
        return (f"ScalingState({self.name!r}, {self.fmt.name}, scale={_scale_str(self.scale)}, "
                f"amax={self.amax:.4g}, history={len(self.amax_history)}/{self.recipe.amax_history_len}, "
                f"saturated={self.counts['saturated']}, underflow={self.counts['underflow']})")


_FP8_TABLES: dict = {}  # (format name, saturate) -> uint8 array indexed by a bfloat16 bit pattern


def f32_to_fp8(x: np.ndarray, fmt, saturate: bool = False) -> np.ndarray:
    """float32 -> float8_e4m3fn / float8_e5m2, rounded once to nearest even, by table look-up
    (numpy arrays; the engine's saturating fp8 casts on the numpy backend use it).

    ml_dtypes' own cast costs about 20 ns a value.  Here each float32 is first rounded *to odd*
    onto bfloat16's 8 significant bits (keep the top 16 bits; set the last kept bit if any
    dropped bit was 1).  bfloat16 has float32's exponent range and at least two more significant
    bits than either fp8 format has anywhere, so the second rounding is correct (Boldo &
    Melquiond, 2008); it is a 65536-entry table built once with ml_dtypes from exact bfloat16
    values.  ``saturate=True`` uses a table that clamps overflow and +-inf to +-max, as
    ``fpsim.cast(..., saturate=True)`` does.  NaN stays NaN.
    """
    f = get_format(fmt)
    x = np.asarray(x)
    if x.dtype != np.float32:
        raise TypeError(f"f32_to_fp8 takes a float32 array, got dtype {x.dtype}")
    key = (f.name, bool(saturate))
    table = _FP8_TABLES.get(key)
    if table is None:
        if f.name not in FP8_FORMATS:
            raise ValueError(f"f32_to_fp8: {f.name} is not an fp8 format ({', '.join(FP8_FORMATS)})")
        vals = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(ml_dtypes.bfloat16).astype(np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            out = vals.astype(f.dtype)
        if saturate:
            out = cast(vals, f, saturate=True)
        table = _FP8_TABLES[key] = out.view(np.uint8)
    bits = x.view(np.uint32)
    hi = bits >> 16
    hi |= (bits & 0xFFFF) != 0  # round to odd: the sticky bit
    return np.asarray(table.take(hi)).view(f.dtype)


# fp8 -> float32 by table look-up on the byte (exact; ml_dtypes' own cast costs ~20 ns a value).
_WIDEN = {name: np.arange(256, dtype=np.uint8).view(get_format(name).dtype).astype(np.float32)
          for name in FP8_FORMATS}


def _is_power_of_two(scale) -> bool:
    return math.frexp(float(scale))[0] == 0.5


def _log2_scale(scale):
    """log2 of a scale: an int for a power of two, else a float."""
    return math.frexp(float(scale))[1] - 1 if _is_power_of_two(scale) else math.log2(float(scale))


def _scale_str(scale) -> str:
    return f"2^{_log2_scale(scale)}" if _is_power_of_two(scale) else f"{float(scale):.6g}"


def _widen(codes, fmt: Format, backend: Backend):
    if isinstance(codes, np.ndarray) and codes.dtype == fmt.dtype:
        return _WIDEN[fmt.name].take(codes.view(np.uint8))
    return backend.to_f32(codes)


def _beyond_threshold(f: Format) -> float:
    """Scaled magnitudes below this cannot saturate."""
    return f.overflow_threshold if f.has_inf else math.nextafter(f.overflow_threshold, math.inf)


@dataclass(frozen=True)
class Fp8Tensor:
    """fp8 numbers and the float32 scale they were cast with: ``value = codes * (1 / scale)``.

    ``codes`` is in the format's storage dtype (``ml_dtypes.float8_e4m3fn`` / ``float8_e5m2``
    on numpy: one byte per value).
    """

    codes: object
    fmt: Format
    scale: np.float32
    backend: Backend

    @property
    def scale_inv(self) -> np.float32:
        return np.float32(1.0 / float(self.scale))

    @property
    def shape(self) -> tuple:
        return tuple(self.codes.shape)

    def codes_f32(self):
        """The fp8 numbers themselves (x * scale, rounded), widened exactly to float32."""
        return _widen(self.codes, self.fmt, self.backend)

    def f32(self):
        """The values they stand for, ``codes * (1/scale)`` in float32 (exact for a power-of-two
        scale, else rounded once)."""
        return self.codes_f32() * self.backend.xp.float32(self.scale_inv)

    def numpy(self) -> np.ndarray:
        """The stored fp8 numbers as a numpy array in the storage dtype."""
        out = self.backend.to_numpy(self.codes)
        return out if out.dtype == self.fmt.dtype else out.astype(self.fmt.dtype)


def quantize(x, state: ScalingState, *, direction: str = "forward", target: str = "") -> Fp8Tensor:
    """Cast ``x`` (a Tensor, or a float32 array on the numpy backend) to fp8 with ``state``'s
    current scale and saturation; records the amax and counts in ``state``.  Not differentiable
    (see :func:`qdq`)."""
    if isinstance(x, Tensor):
        be, x32 = x.backend, x.f32()
    else:
        from .backend import get_backend

        be = get_backend(None)
        x32 = np.asarray(x, dtype=np.float32)
    return state.to_fp8(x32, be, direction=direction, target=target)


def qdq(x: Tensor, state: ScalingState, grad_state: ScalingState | None = None) -> Tensor:
    """Fake quantization as one op: forward ``x -> fp8 (state) -> float32``, the result holding
    exactly the values the fp8 numbers stand for; backward straight through, the incoming
    float32 gradient cast to ``grad_state``'s format and scale (e5m2) and back, or passed
    unchanged when ``grad_state`` is None."""
    q = quantize(x, state, target=state.name)
    be = x.backend
    out32 = q.f32()

    def backward(g):
        if grad_state is None:
            return (g,)
        gq = grad_state.to_fp8(g, be, direction="backward")
        return (gq.f32(),)

    f32 = get_format("float32")
    return Tensor._from_op(round_result(out32, f32, be, "fp8.qdq", "forward"), f32, (x,), backward, "fp8.qdq", be)


class LinearScaling:
    """The three scaling states of one fp8 linear layer: ``input`` and ``weight`` (forward
    format) and ``grad_output`` (backward format), named ``<layer>.input`` etc."""

    def __init__(self, name: str, recipe: DelayedScaling):
        self.name = name
        self.recipe = recipe
        self.input = ScalingState(f"{name}.input" if name else "input", recipe.fwd_format, recipe)
        self.weight = ScalingState(f"{name}.weight" if name else "weight", recipe.fwd_format, recipe)
        self.grad_output = ScalingState(f"{name}.grad_output" if name else "grad_output", recipe.bwd_format, recipe)

    def states(self) -> tuple[ScalingState, ScalingState, ScalingState]:
        return (self.input, self.weight, self.grad_output)


def linear(x: Tensor, weight: Tensor, bias: Tensor | None, meta: LinearScaling) -> Tensor:
    """``x @ weight.T + bias`` with fp8 inputs (see the module docstring for every rounding).

    In: Tensors of any format (their exact float32 values are cast).  Out: rounded once into
    ``promote(x.fmt, weight.fmt[, bias.fmt])``.  Gradients for ``x``, ``weight``, ``bias``
    come back as float32 sums and are rounded into their gradient formats by the graph walk.
    """
    if not isinstance(x, Tensor):
        raise TypeError(f"fp8.linear: x must be a Tensor, got {type(x).__name__}")
    if weight.ndim != 2 or x.ndim < 1 or x.shape[-1] != weight.shape[1]:
        raise ValueError(f"fp8.linear: input shape {x.shape} does not fit weight shape {weight.shape}")
    if bias is not None and bias.shape != (weight.shape[0],):
        raise ValueError(f"fp8.linear: bias shape {bias.shape} does not fit weight shape {weight.shape}")
    be = x.backend
    xp = be.xp
    ins = (x, weight) if bias is None else (x, weight, bias)
    fmt = promote(*(t.fmt for t in ins))
    xq = quantize(x, meta.input, target="input")
    wq = quantize(weight, meta.weight, target="weight")
    # The fp8 numbers widened to float32 (exact).  The hardware keeps only xq and wq (one byte a
    # value) for the backward pass; the emulator keeps these widened copies too, to save time.
    x8, w8 = xq.codes_f32(), wq.codes_f32()
    with np.errstate(over="ignore", invalid="ignore"):
        out32 = be.matmul(x8, w8.T)  # fp8 x fp8 products are exact in float32
        out32 *= xp.float32(float(xq.scale_inv) * float(wq.scale_inv))
        if bias is not None:
            out32 += bias.f32()

    def backward(g):
        gq = meta.grad_output.to_fp8(g, be, direction="backward", target="grad_output")
        g8 = gq.codes_f32()
        g2 = g8.reshape(-1, g8.shape[-1])
        with np.errstate(over="ignore", invalid="ignore"):
            gx = None
            if x.requires_grad:
                gx = be.matmul(g8, w8) * xp.float32(float(gq.scale_inv) * float(wq.scale_inv))
            gw = be.matmul(g2.T, x8.reshape(-1, x8.shape[-1])) * xp.float32(float(gq.scale_inv) * float(xq.scale_inv))
            gb = g.reshape(-1, g.shape[-1]).sum(axis=0, dtype=xp.float32) if bias is not None else None
        return (gx, gw) if bias is None else (gx, gw, gb)

    return Tensor._from_op(round_result(out32, fmt, be, "fp8.linear", "forward"), fmt, ins, backward,
                           "fp8.linear", be)


class Linear(nn.Module):
    """An ``nn.Linear`` whose matmuls run in fp8 with delayed scaling.  It shares the weight and
    bias tensors of the layer it was made from, so an optimizer holding them keeps working."""

    def __init__(self, layer: nn.Linear, recipe: DelayedScaling | None = None, name: str = ""):
        super().__init__()
        if not isinstance(layer, nn.Linear):
            raise TypeError(f"fp8.Linear wraps an nn.Linear, got {type(layer).__name__}")
        self.in_features, self.out_features = layer.in_features, layer.out_features
        self.weight = layer.weight
        if layer.bias is not None:
            self.bias = layer.bias
        else:
            object.__setattr__(self, "bias", None)
        object.__setattr__(self, "meta", LinearScaling(name, recipe if recipe is not None else DelayedScaling()))

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias, self.meta)

    def __repr__(self) -> str:
        return (f"fp8.Linear({self.in_features}, {self.out_features}, {self.meta.recipe.fwd_format}/"
                f"{self.meta.recipe.bwd_format})")


class ScalingGroup:
    """Every :class:`ScalingState` of a converted model, by name (``"0.input"``,
    ``"0.weight"``, ``"0.grad_output"``, ...).  Call :meth:`update` once after every step."""

    def __init__(self, recipe: DelayedScaling, states: dict[str, ScalingState]):
        self.recipe = recipe
        self.states = states

    def update(self) -> None:
        for s in self.states.values():
            s.update()

    def __getitem__(self, name: str) -> ScalingState:
        if name not in self.states:
            raise KeyError(f"no scaling state {name!r}; known: {', '.join(self.states)}")
        return self.states[name]

    def __iter__(self):
        return iter(self.states.values())

    def __len__(self) -> int:
        return len(self.states)

    def summary(self) -> dict[str, dict]:
        return {n: s.summary() for n, s in self.states.items()}

    def state_dict(self) -> dict:
        """Every state's :meth:`ScalingState.state_dict`, flat: ``"<tensor>/<key>"`` (what
        ``fpsim.checkpoint.save(..., fp8=group)`` writes)."""
        return {f"{n}/{k}": v for n, st in self.states.items() for k, v in st.state_dict().items()}

    def load_state_dict(self, sd: dict) -> None:
        """Restore :meth:`state_dict`'s output.  Every tensor's entries are checked first (the
        names must match this model's fp8 tensors); on any error nothing is changed."""
        per: dict[str, dict] = {}
        for key, v in sd.items():
            name, sep, k = key.rpartition("/")
            if not sep or name not in self.states:
                raise ValueError(f"fp8 state: unexpected entry {key!r}; this model's fp8 tensors: "
                                 f"{', '.join(self.states)} (left unchanged)")
            per.setdefault(name, {})[k] = v
        missing = [n for n in self.states if n not in per]
        if missing:
            raise ValueError(f"fp8 state: no entries for {', '.join(missing)} (left unchanged)")
        snapshot = self._snapshot()
        try:
            for n, st in self.states.items():
                st.load_state_dict(per[n])
        except Exception:
            self._restore(snapshot)
            raise

    def _snapshot(self) -> dict:
        """Every state as it is now, also in the middle of a step (``checkpoint.load`` rolls back with it)."""
        return {n: st._snapshot() for n, st in self.states.items()}

    def _restore(self, snap: dict) -> None:
        for n, st in self.states.items():
            st._restore(snap[n])

    def table(self) -> str:
        """One row per tensor: format, scale, the amax it came from, and saturated / flushed
        counts (the most recent step, then the totals)."""
        return format_scaling_table(self.summary(), str(self.recipe))

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        return f"<ScalingGroup: {len(self.states)} tensors, {self.recipe}>"


def format_scaling_table(summary: dict[str, dict], title: str = "") -> str:
    """The text table of :meth:`ScalingGroup.table`, from its ``summary()`` dicts."""
    cols = ["tensor", "format", "scale", "amax", "saturated (last step)", "flushed to 0 (last step)",
            "saturated (all)", "flushed (all)"]
    rows = []
    for name, s in summary.items():
        rows.append([name, s["format"], _scale_str(s["scale"]), f"{s['amax']:.4g}",
                     _count_pct(s["last_saturated"], s["last_n"]), _count_pct(s["last_underflow"], s["last_n"]),
                     _count_pct(s["saturated"], s["n"]), _count_pct(s["underflow"], s["n"])])
    out = [title] if title else []
    out += text_table(cols, rows, right=range(2, len(cols)))
    return "\n".join(out)


def _count_pct(k: int, n: int) -> str:
    if n == 0:
        return "-"
    return f"{k} ({100.0 * k / n:.2f}%)" if k else "0"


def convert(model: nn.Module, recipe: DelayedScaling | None = None, skip=()) -> ScalingGroup:
    """Swap every ``nn.Linear`` inside ``model`` for an :class:`fp8.Linear <Linear>` (in place,
    sharing the parameters) and return the :class:`ScalingGroup` of their scaling states.

    ``skip`` names Linear layers to leave in the model's own format: module names as
    ``model.named_modules()`` gives them (``"0"``, ``"6"``, ``"encoder.1"``), or ``"first"`` /
    ``"last"`` for the first and last Linear in module order (unless a Linear has that name) - the layers fp8 recipes commonly
    keep in higher precision (Megatron-LM's ``--first-last-layers-bf16``; DeepSeek-V3 keeps its
    embedding and output head out of fp8).  A name that is not a Linear of ``model`` raises
    ValueError and the model is left as it was.
    """
    recipe = recipe if recipe is not None else DelayedScaling()
    if not isinstance(recipe, DelayedScaling):
        raise TypeError(f"recipe must be an fp8.DelayedScaling, got {type(recipe).__name__}")
    if isinstance(model, nn.Linear):
        raise ValueError("convert() swaps the Linear layers inside a model; wrap a lone Linear in nn.Sequential")
    if isinstance(skip, str):
        skip = (skip,)
    linears = []  # (parent, child name, full name) of every nn.Linear, in module order
    for mname, parent in list(model.named_modules()):
        for cname, child in list(parent._modules.items()):
            if type(child) is nn.Linear:
                linears.append((parent, cname, f"{mname}.{cname}" if mname else cname))
    if not linears:
        raise ValueError(f"convert(): {type(model).__name__} has no nn.Linear layers to run in fp8")
    names = [n for _, _, n in linears]
    alias = {k: v for k, v in (("first", names[0]), ("last", names[-1])) if k not in names}  # a real name wins
    unknown = [str(k) for k in skip if alias.get(k, k) not in names]
    if unknown:
        raise ValueError(f"convert(skip=...): {', '.join(map(repr, unknown))} not a Linear of "
                         f"{type(model).__name__}; its Linear layers: {', '.join(names)} (or 'first', 'last')")
    keep = {alias.get(k, k) for k in skip}
    if keep >= set(names):
        raise ValueError(f"convert(skip=...) leaves no Linear to run in fp8 (Linear layers: {', '.join(names)})")
    states: dict[str, ScalingState] = {}
    for parent, cname, name in linears:
        if name in keep:
            continue
        layer = Linear(getattr(parent, cname), recipe, name)
        setattr(parent, cname, layer)
        for s in layer.meta.states():
            states[s.name] = s
    return ScalingGroup(recipe, states)
