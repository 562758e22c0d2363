"""Per-tensor scaling state: one :class:`ScalingState` per fp8 tensor (its scale, amax history and
counts of saturated and flushed values), and the :class:`ScalingGroup` of a converted model.

Every cast goes through the engine's one rounding point (op ``"fp8.cast"``), so
``fpsim.monitor()`` counts the saturations (as overflows) and the flushes to zero per layer;
each state also counts them itself and shows its scale and history (``ScalingGroup.table()``).
"""

from __future__ import annotations

import copy
import math

import numpy as np

from ..backend import Backend, NumpyBackend, NumpyF32Backend
from ..checks import is_real
from ..formats import FP8_FORMATS, Format, get_format
from ..formats.fp8kernels import scaled_fp8
from ..numerics.scalars import log2_64
from ..state import ENGINE_ROUNDING, HOOKS
from ..statedict import Problems, all_or_nothing
from ..tensor import round_result
from ..textable import percent, text_table
from .quant import Fp8Tensor, _widen
from .recipes import CurrentScaling, DelayedScaling, FixedScaling, compute_scale

__all__ = ["ScalingState", "ScalingGroup", "format_scaling_table"]


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
        if not (is_real(init_scale) and init_scale > 0 and math.isfinite(init_scale)):
            raise ValueError(f"init_scale must be a finite number > 0, got {init_scale!r}")
        self.name = name
        self.fmt: Format = f
        self.recipe = recipe
        self.scale = np.float32(recipe.scale if isinstance(recipe, FixedScaling) else init_scale)
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
        h = self.amax_history
        if not h:
            return 0.0
        if self.recipe.amax_compute_algo == "most_recent":
            return h[-1]
        m = max(h)
        if m > 0 and not any(map(math.isnan, h)):  # then ties are the same number: np.max's
            return m
        return float(np.max(h))  # NaN-propagating, unlike max(); the sign of a zero as numpy picks it

    def round_scaled(self, x32, backend: Backend, op: str = "fp8.cast", direction: str = "forward",
                     target: str = ""):
        """Round ``x32 * scale`` (float32) into the fp8 format with saturation - the one rounding
        - record this step's amax and counts, and return the stored fp8 array.  With
        ``recipe.amax_init`` the first cast with a non-zero finite amax first sets the scale from
        it (read ``scale`` after the call, or use :meth:`to_fp8`)."""
        codes, codes32 = self._cast(x32, backend, op, direction, target)
        return Fp8Tensor(codes, self.fmt, self.scale, backend, widened=codes32).codes

    def to_fp8(self, x32, backend: Backend, direction: str = "forward", target: str = "") -> Fp8Tensor:
        """:meth:`round_scaled`, wrapped with the scale it used (and the fp8 numbers widened to
        float32, which the cast computed to count the flushes)."""
        codes, codes32 = self._cast(x32, backend, "fp8.cast", direction, target or self.name)
        return Fp8Tensor(codes, self.fmt, self.scale, backend, widened=codes32)

    @np.errstate(over="ignore", invalid="ignore")  # x * scale overflowing is a result: it saturates (counted)
    def _cast(self, x32, backend: Backend, op: str, direction: str, target: str):
        """round_scaled's work: (the stored fp8 array, or None where only its values were made
        (see :class:`Fp8Tensor`); its exact float32 values)."""
        if getattr(x32, "dtype", None) != np.float32:  # before any state changes
            raise TypeError(f"ScalingState {self.name!r}: round_scaled() takes a float32 array, got "
                            f"{getattr(x32, 'dtype', type(x32).__name__)}")
        xp = backend.xp
        amax = _amax(x32)
        if isinstance(self.recipe, CurrentScaling):  # this tensor's own amax, every cast
            self.scale = compute_scale(amax, self.fmt, self.recipe.margin, self.scale, self.recipe.power_2_scale)
        elif self._init_pending and math.isfinite(amax) and amax > 0:
            # A tensor of zeros (the gradient below a layer whose gradients all flushed, a
            # zero-initialised layer) must not use the init up: it waits for real values.
            self.scale = compute_scale(amax, self.fmt, self.recipe.margin, self.scale, self.recipe.power_2_scale)
            self._init_pending = False
        self.step_amax = amax if self.step_amax is None else _max_nan(self.step_amax, amax)
        s = xp.float32(self.scale)
        # The cast rounds x * scale in float32, so the early-out must too (an exact product just
        # below the threshold can round up onto it when the scale is not a power of two).
        top = float(np.float32(amax) * s)  # max |x * scale|: the rounding is monotonic (errstate: the decorator's)
        codes, codes32, under = self._round(x32, s, top, backend, op, direction, target)
        sat = 0
        if not top < _beyond_threshold(self.fmt):
            a_s = xp.abs(x32) * s
            thr = self.fmt.overflow_threshold
            beyond = (a_s >= thr) if self.fmt.has_inf else (a_s > thr)  # e4m3fn rounds the tie itself to max
            sat = int(xp.count_nonzero(beyond & xp.isfinite(x32)))
        for k, v in (("n", int(x32.size)), ("saturated", sat), ("underflow", under)):
            self.counts[k] += v
            self._current[k] += v
        return codes, codes32

    def _round(self, x32, s, top: float, backend: Backend, op: str, direction: str, target: str):
        """(the stored fp8 array of ``x32 * s`` rounded with saturation, its exact float32
        values, how many non-zero inputs it flushed to zero: NaN stays NaN, overflow saturates,
        -0.0 counts as zero on both sides).  On the numpy backends, for NaN-free input in the
        engine's default rounding, one chunked kernel (:func:`~fpsim.formats.fp8kernels.scaled_fp8`,
        the same bits), which makes the bytes only for the hooks (else None: :class:`Fp8Tensor`
        narrows the values when asked); the hooks, if any, still see ``x32 * s`` and the stored
        result."""
        if type(backend) in _FAST_BACKENDS and not ENGINE_ROUNDING and isinstance(x32, np.ndarray) \
                and not math.isnan(top):
            bytes_now = bool(HOOKS) and type(backend) is NumpyBackend
            codes, codes32, under = scaled_fp8(x32, s, self.fmt, saturate=not top <= self.fmt.max,
                                               codes=bytes_now)
            if type(backend) is NumpyF32Backend:  # its storage is the float32 values
                codes = codes32
            if HOOKS:
                round_result(x32 * s, self.fmt, backend, op, direction, target, stored=codes)
            return codes, codes32, under
        codes = round_result(x32 * s, self.fmt, backend, op, direction, target, saturate=True)
        codes32 = _widen(codes, self.fmt, backend)
        # (Counting the zeros by a comparison: numpy's count_nonzero of a float32 array is not
        # vectorised and costs 4x the comparison and the count of its booleans together.)
        xp = backend.xp
        return codes, codes32, int(xp.count_nonzero(codes32 == 0)) - int(xp.count_nonzero(x32 == 0))

    def update(self) -> None:
        """End of a step: push this step's amax into the history and recompute the scale.
        A tensor not cast during the step keeps its history and scale."""
        if self.step_amax is None:
            return
        self.amax_history.append(self.step_amax)
        del self.amax_history[:-self.recipe.amax_history_len]
        if not isinstance(self.recipe, FixedScaling):  # a fixed scale never follows the amax
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
        problems = Problems(who, "state")
        problems.check_keys(sd, required=sorted(want))
        problems.raise_if_any()
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


def _amax(x32) -> float:
    """max |x32| as a float (0.0 for an empty array, NaN when x32 holds one): the largest and the
    smallest value, two reductions and no array of magnitudes."""
    if not x32.size:
        return 0.0
    hi, lo = float(x32.max()), float(x32.min())
    return hi if math.isnan(hi) else max(hi, -lo)


_FAST_BACKENDS = (NumpyBackend, NumpyF32Backend)


def _is_power_of_two(scale) -> bool:
    return math.frexp(float(scale))[0] == 0.5


def _log2_scale(scale):
    """log2 of a scale: an int for a power of two, else a float."""
    return math.frexp(float(scale))[1] - 1 if _is_power_of_two(scale) else log2_64(float(scale))


def _scale_str(scale) -> str:
    return f"2^{_log2_scale(scale)}" if _is_power_of_two(scale) else f"{float(scale):.6g}"


def _beyond_threshold(f: Format) -> float:
    """Scaled magnitudes below this cannot saturate."""
    return f.overflow_threshold if f.has_inf else math.nextafter(f.overflow_threshold, math.inf)


def _max_nan(a: float, b: float) -> float:
    """float(np.max([a, b])), building no array unless one is NaN: b when they are equal (the
    sign of a zero amax included); the NaN numpy gives (its sign included) otherwise."""
    if math.isnan(a) or math.isnan(b):
        return float(np.max([a, b]))
    return a if a > b else b


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
        with all_or_nothing((self._snapshot, self._restore)):
            for n, st in self.states.items():
                st.load_state_dict(per[n])

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
    return f"{k} ({percent(k, n)})" if k else "0"
