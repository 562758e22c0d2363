"""Where did the first inf / NaN come from?  ``with fpsim.trace_nonfinite() as t:`` (or
``fpsim.monitor(trace_nonfinite=True)``), then ``print(t.first_nonfinite().report())`` (or
``str()`` of it: the same in one line).

A :class:`NonFiniteTracer` is a rounding hook (see ``fpsim.state``).  Every rounding whose
stored result holds an inf or a NaN is checked against what it was computed from
(``RoundingEvent.inputs``): if its result holds a kind of non-finite value (NaN, +inf, -inf)
that none of those inputs held, this op MADE it - an origin - and the tracer records where
(module path, op, forward / backward / update, format), how many elements, the largest finite
|value| before rounding, and a frame of the last few roundings before it with their |x| min and
max (the idea of HF transformers' ``DebugUnderflowOverflow``, at op level and in both
directions).  An op that only passed on an inf it was given is not an origin, and neither is a
-inf written on purpose (an attention mask: ``masked_fill`` reports its fill value as an input)
or what follows from it; but exp overflowing to +inf next to masked -inf scores is, and so is a
softmax row that is all -inf turning into NaN.  Roundings that do not say what they were
computed from (optimizer updates, the scaler's unscale, fp8 casts) are origins when they store
an inf or NaN in a pass that had none before.

Each origin is one of four kinds:

- ``forward overflow``: an op's result in the forward pass.  Fatal: the loss and every
  gradient after it are inf/NaN, and loss scaling cannot help (a GradScaler skips the step,
  halves the scale, and meets the same overflow next step).
- ``loss-scaler overflow``: a gradient in the backward of a loss multiplied by a GradScaler
  (its multiply runs in module scope ``"loss_scale"``).  Normal: the scaler finds it, skips the
  optimizer step and halves the scale.
- ``backward overflow``: a gradient with no loss scaling in play: nothing will catch it.
- ``update``: an optimizer writing a parameter or its state.

Within one pass (a forward, its backward and its update) only the first origin counts: what
follows it is mostly its consequence.  The first origin of each kind is kept, with the number
of passes whose first origin was of that kind (``counts``);
:meth:`~NonFiniteTracer.first_nonfinite` returns the earliest (or the earliest of one kind).
Tracing costs one finiteness test of each result (on bit patterns) until the pass has its
origin; with no tracer the engine pays nothing more than its usual ``if HOOKS:``.
"""

from __future__ import annotations

import collections
import functools
import math
import textwrap
from dataclasses import dataclass

import numpy as np

from . import state
from .amp import LOSS_SCALE_SCOPE
from .formats import UINT_VIEWS, get_format

__all__ = ["NonFiniteTracer", "NonFinite", "FrameEntry", "trace_nonfinite", "KINDS"]

FORWARD, SCALER, BACKWARD, UPDATE = "forward overflow", "loss-scaler overflow", "backward overflow", "update"
KINDS = (FORWARD, SCALER, BACKWARD, UPDATE)
_WHY = {
    FORWARD: ("a forward overflow: the loss and every gradient after it will be inf/NaN, and loss scaling "
              "cannot cure it - a GradScaler would skip this step, halve the scale and meet the same overflow "
              "next step; run the op in float32 (autocast does this for softmax, layer_norm, exp, sums and the "
              "losses) or keep its inputs smaller"),
    SCALER: ("a loss-scaler overflow in the backward pass (loss scale {scale:g}): normal - the GradScaler finds "
             "the inf, skips this optimizer step and halves the scale; it needs fixing only if it happens every "
             "step"),
    BACKWARD: ("a backward overflow with no loss scaler in play: nothing will skip this step, so the update "
               "carries inf/NaN into the weights"),
    UPDATE: "an optimizer update that produced inf/NaN from finite gradients (e.g. a division by a flushed 0)",
}


@dataclass(frozen=True)
class FrameEntry:
    """One rounding before the origin: where, and the |x| min / max of what it stored
    (over finite values; NaN when it stored nothing finite)."""

    direction: str
    scope: str
    op: str
    target: str
    fmt: str
    abs_min: float
    abs_max: float

    def __str__(self) -> str:
        where = ".".join(filter(None, (self.scope, self.target))) or "-"
        return f"{self.direction} {self.op} in {where} ({self.fmt}) |x| {self.abs_min:.3g}..{self.abs_max:.3g}"


@dataclass(frozen=True)
class NonFinite:
    """The first op of one kind whose rounded result held inf or NaN while its inputs did not."""

    kind: str
    direction: str
    scope: str
    op: str
    target: str
    fmt: str
    fmt_max: float
    n: int  # elements the op rounded
    n_inf: int
    n_nan: int
    max_finite_before: float  # largest finite |value| before rounding (NaN if none)
    nonfinite_before: int  # elements already inf/NaN before rounding (the float32 computation made them)
    step: int  # the pass it happened in (counted by the tracer, or set with set_step)
    loss_scale: float | None
    frame: tuple
    inputs_known: bool = True  # False: the rounding did not say what it was computed from
    new: tuple = ()  # the kinds of non-finite value it made that no input held ("NaN", "+inf", "-inf")
    count: int = 1  # origins of this kind seen in all (filled in by first_nonfinite)

    @property
    def where(self) -> str:
        return ".".join(filter(None, (self.scope, self.target))) or "(outside any module)"

    def _sentences(self) -> tuple[list[str], list[str]]:
        """What happened, as sentences, and the frame's roundings (the text of both forms)."""
        bad = []
        if self.n_inf:
            bad.append(f"{self.n_inf} inf")
        if self.n_nan:
            bad.append(f"{self.n_nan} NaN")
        if self.nonfinite_before:
            cause = f"its float32 computation already held {self.nonfinite_before} inf/NaN before the final rounding"
            if self.direction == "forward":
                cause += " (inside the op: a low-precision accumulator past its max, exp past 88.7, inf - inf, 0/0)"
        elif math.isfinite(self.max_finite_before) and self.max_finite_before > self.fmt_max:
            cause = (f"the largest |value| before rounding was {self.max_finite_before:.4g}, past {self.fmt}'s "
                     f"max {self.fmt_max:.6g}, so rounding made it inf")
        else:
            cause = f"the largest |value| before rounding was {self.max_finite_before:.4g}"
        more = f" ({self.count} origins of this kind in all)" if self.count > 1 else ""
        kinds = " or ".join(self.new) or "inf or NaN"
        clean = (f"although none of its inputs held {kinds}" if self.inputs_known else
                 "although nothing non-finite had appeared in this step before it (its inputs are not reported)")
        return ([f"First non-finite value at step {self.step}: {self.direction} op '{self.op}' in {self.where}, "
                 f"rounding into {self.fmt}, made {' and '.join(bad)} of {self.n} values {clean}; {cause}.",
                 f"This is {_WHY[self.kind].format(scale=self.loss_scale or 0)}{more}."],
                [str(f) for f in self.frame])

    def __str__(self) -> str:
        """The whole account in one line (a table's cell, ``fpsim compare --json``'s text)."""
        sentences, frame = self._sentences()
        return "  ".join(sentences) + f"  The roundings just before it: {'; '.join(frame) or 'none recorded'}."

    def report(self, width: int = 100) -> str:
        """The same account for a person reading it: each sentence in lines of at most ``width``
        characters, broken between words only (a number or a name is never split), then the
        roundings just before it, one a line."""
        sentences, frame = self._sentences()
        fill = functools.partial(textwrap.fill, width=width, break_long_words=False, break_on_hyphens=False)
        lines = [fill(s) for s in sentences]
        lines.append("The roundings just before it:" + ("" if frame else " none recorded."))
        lines += [fill(f, initial_indent="  ", subsequent_indent="    ") for f in frame]
        return "\n".join(lines)


def _host_f32(arr, be) -> np.ndarray:
    return np.asarray(be.to_numpy(be.to_f32(arr)), dtype=np.float32)


_UINT = UINT_VIEWS  # bytes -> the unsigned view (fpsim.formats.bitviews)


@functools.cache
def _nonfinite_threshold(dtype_name: str) -> tuple[int, int]:
    """(mask without the sign bit, smallest bit pattern of +inf or NaN) for a 1- or 2-byte
    format: a value is inf/NaN exactly when its pattern without the sign reaches the threshold
    (exponent all ones; e4m3fn, which has no inf, only at its NaN 0x7f)."""
    fmt = get_format(dtype_name)
    sign_off = (1 << (fmt.bits - 1)) - 1
    thr = ((1 << fmt.exponent_bits) - 1) << fmt.mantissa_bits if fmt.has_inf else sign_off
    return sign_off, thr


def _all_finite(x, be) -> bool:
    """No inf or NaN in ``x`` (a Tensor, an array in a storage dtype, or a number).  16- and
    8-bit storage is tested on its bit patterns: numpy's float16 isfinite is ten times slower."""
    if x is None:
        return True
    data = x.data if hasattr(x, "fmt") and hasattr(x, "data") else x
    xp = be.xp
    size = getattr(getattr(data, "dtype", None), "itemsize", 4)
    if size >= 4:
        return bool(xp.isfinite(data).all())
    mask, thr = _nonfinite_threshold(data.dtype.name)
    bits = data.view(_UINT[size])
    return bits.size == 0 or int((bits & mask).max()) < thr


class NonFiniteTracer:
    """A rounding hook that finds the ops where inf / NaN are born (module docstring).

    ``frame``: how many roundings before an origin to describe.  ``set_step(i)`` labels what
    follows with training step ``i``; otherwise steps count forward passes (a forward rounding
    after a backward or update one starts a new pass).
    """

    def __init__(self, frame: int = 6):
        self._recent = collections.deque(maxlen=max(int(frame), 0))
        self.first: dict[str, NonFinite] = {}
        self.counts: dict[str, int] = dict.fromkeys(KINDS, 0)
        self._order: list[str] = []  # kinds in the order their first origin came
        self.step = 0
        self._explicit_step = False
        self._last_dir = "forward"
        self._scaled = None  # the loss scale seen in this pass, if any
        self._dirty = False  # an inf/NaN was made in this pass (not a -inf written on purpose)
        self._active = 0

    # -- the hook ------------------------------------------------------------------------

    def __call__(self, ev: state.RoundingEvent) -> None:
        if ev.direction == "forward" and self._last_dir != "forward":
            self._new_pass()
        self._last_dir = ev.direction
        if ev.direction == "forward" and _in_loss_scale(ev.scope) and len(ev.inputs) == 2:
            s = ev.inputs[1]
            if getattr(s, "size", 0) == 1:
                self._scaled = float(_host_f32(s.data, ev.backend).reshape(()))
        if not self._dirty and not _all_finite(ev.stored, ev.backend):  # one origin per pass at most
            new = self._new_kinds(ev)
            if new:
                self._record(ev, new)
            if new or not ev.inputs:
                self._dirty = True
        self._recent.append(ev)

    def _new_pass(self) -> None:
        if not self._explicit_step:
            self.step += 1
        self._scaled = None
        self._dirty = False

    def set_step(self, step: int) -> None:
        """Label the roundings that follow with training step ``step`` (a new pass begins)."""
        self.step = int(step)
        self._explicit_step = True
        self._scaled = None
        self._dirty = False
        self._last_dir = "forward"

    def _new_kinds(self, ev) -> tuple:
        """The kinds of non-finite value in the result that no input held (with the inputs not
        reported: every kind in the result, the pass having been clean so far)."""
        be = ev.backend
        made = _kinds(ev.stored, be)
        if ev.inputs:
            had = set()
            for x in ev.inputs:
                if not _all_finite(x, be):
                    had |= set(_kinds(x.data if hasattr(x, "fmt") else x, be))
            return tuple(k for k in made if k not in had)
        return made  # inputs not reported: the pass was clean until now (only clean passes are checked)

    def _kind(self, ev) -> str:
        if ev.direction == "forward":
            return FORWARD
        if ev.direction == "update":
            return UPDATE
        return SCALER if self._scaled is not None else BACKWARD

    def _record(self, ev, new: tuple) -> None:
        kind = self._kind(ev)
        self.counts[kind] += 1
        if kind in self.first:
            return
        be = ev.backend
        stored = _host_f32(ev.stored, be)
        exact = stored if ev.exact32 is None else _host_f32(ev.exact32, be)
        fin = np.isfinite(exact)
        self.first[kind] = NonFinite(
            kind, ev.direction, ev.scope, ev.op, ev.target, ev.fmt.name, float(ev.fmt.max), int(stored.size),
            int(np.isinf(stored).sum()), int(np.isnan(stored).sum()),
            float(np.abs(exact[fin]).max()) if fin.any() else math.nan, int((~fin).sum()), self.step,
            self._scaled, tuple(_frame_entry(e) for e in self._recent), bool(ev.inputs), new)
        self._order.append(kind)

    # -- reading -------------------------------------------------------------------------

    def first_nonfinite(self, kind: str | None = None, *, include_scaler: bool = True) -> NonFinite | None:
        """The earliest origin (or the earliest of ``kind``, one of :data:`KINDS`); with
        ``include_scaler=False`` the loss-scaler overflows (normal, skipped) are passed over.
        None if there was none."""
        if kind is not None and kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}; known: {', '.join(KINDS)}")
        for k in self._order:
            if (kind is None or k == kind) and (include_scaler or k != SCALER):
                rec = self.first[k]
                return NonFinite(**{**rec.__dict__, "count": self.counts[k]})
        return None

    def reset(self) -> None:
        """Forget every origin, the frame and the step count (the hook stays registered)."""
        active = self._active
        self.__init__(self._recent.maxlen)
        self._active = active

    # -- context manager -----------------------------------------------------------------

    def __enter__(self) -> NonFiniteTracer:
        state.add_hook(self)
        self._active += 1
        return self

    def __exit__(self, *exc) -> None:
        state.remove_hook(self)
        self._active -= 1

    def __repr__(self) -> str:
        found = ", ".join(f"{k}: {self.counts[k]}" for k in self._order) or "nothing non-finite yet"
        return f"<NonFiniteTracer: {found}>"


def _kinds(arr, be) -> tuple:
    """Which of NaN, +inf, -inf occur in ``arr`` (any storage dtype, or a number); 8- and
    16-bit storage on its bit patterns (exponent all ones: mantissa 0 is inf, else NaN)."""
    xp = be.xp
    size = getattr(getattr(arr, "dtype", None), "itemsize", 4)
    if size >= 4:
        hits = (xp.isnan(arr).any(), (arr == xp.inf).any(), (arr == -xp.inf).any())
    else:
        mask, thr = _nonfinite_threshold(arr.dtype.name)
        bits = arr.view(_UINT[size])
        mag = bits & mask
        inf = bool(get_format(arr.dtype.name).has_inf)
        hits = ((mag > thr).any() if inf else (mag == thr).any(),
                inf and (bits == thr).any(), inf and (bits == (thr | (mask + 1))).any())
    return tuple(k for k, hit in zip(("NaN", "+inf", "-inf"), hits) if bool(hit))


def _in_loss_scale(scope: str) -> bool:
    return scope == LOSS_SCALE_SCOPE or scope.endswith("." + LOSS_SCALE_SCOPE)


def _frame_entry(ev) -> FrameEntry:
    vals = np.abs(_host_f32(ev.stored, ev.backend))
    vals = vals[np.isfinite(vals)]
    lo, hi = (float(vals.min()), float(vals.max())) if vals.size else (math.nan, math.nan)
    return FrameEntry(ev.direction, ev.scope, ev.op, ev.target, ev.fmt.name, lo, hi)


def trace_nonfinite(frame: int = 6) -> NonFiniteTracer:
    """A :class:`NonFiniteTracer` to use as ``with fpsim.trace_nonfinite() as t:``."""
    return NonFiniteTracer(frame)
