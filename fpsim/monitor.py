"""Counting what rounding does, op by op: ``with fpsim.monitor() as m:``.

The engine rounds in one place (``tensor.round_result``) and calls every hook registered in
``fpsim.state`` with a :class:`~fpsim.state.RoundingEvent`: the exact float32 value it was
given, the value it stored, the op, direction, scope and format.  A :class:`Monitor` is such a
hook.  For each (direction, scope, op, target, format) it counts

- ``n``: values rounded,
- ``inexact``: values the rounding changed,
- ``underflow``: non-zero values that became 0 (flushed),
- ``subnormal``: results that are subnormal in the format,
- ``overflow``: finite values that became inf or NaN (or were clamped to max),
- ``inf``, ``nan``: results that are inf / NaN (whatever the cause), and
- ``nan_in``: NaNs already present in the exact value (the float32 computation made them).

The comparisons run on the backend's own arrays (numpy or cupy).  On a device the counts are
also added up there, and copied to the host once, when they are read (``counts``, ``totals``,
``table``, ``to_dict``): a monitored training step synchronises nothing per op.  With no
monitor active the engine pays one ``if HOOKS:`` per rounding.

``monitor(trace_nonfinite=True)`` also runs a :class:`~fpsim.trace.NonFiniteTracer`: then
``m.first_nonfinite()`` says which op first made an inf or NaN (``fpsim.trace``).
"""

from __future__ import annotations

import threading

import numpy as np

from . import state
from .backend import BACKENDS
from .formats import get_format
from .formats.kernels import widening_table
from .numerics import compiled
from .textable import percent, text_table
from .trace import NonFiniteTracer

__all__ = ["monitor", "Monitor", "COUNTERS", "DIRECTIONS"]

COUNTERS = ("n", "inexact", "underflow", "subnormal", "overflow", "inf", "nan", "nan_in")
DIRECTIONS = ("forward", "backward", "update")
_NUMPY = BACKENDS["numpy"]


def _count_rounding(fmt, exact32, stored, xp) -> list[int]:
    """The COUNTERS for one rounding of ``exact32`` (float32) into ``stored`` (fmt's storage),
    as Python ints (on a device: one device -> host copy)."""
    if xp is np:
        short_first = fmt.name in _SHORT_FIRST
        fast = None if short_first else _compiled_counts(fmt, exact32, stored)
        if fast is None:
            fast = _finite_counts(fmt, exact32, stored)
        if fast is None and short_first:
            fast = _compiled_counts(fmt, exact32, stored)
        if fast is not None:
            return fast
    n, events = _event_counts(fmt, exact32, stored, xp)
    return [n, *(int(v) for v in (events.tolist() if xp is np else events.get().tolist()))]


# Counted by numpy's short count first, the compiled count only where that steps aside: bfloat16's short
# count is a few passes of integer operations (its widening a shift), faster than the compiled loop
# (about 0.45 against 0.65 ns a value, timed interleaved; float16's compiled count takes half its time).
# float32 storage too (unscaling, updates): the compiled loop counts one- and two-byte storage only.
_SHORT_FIRST = frozenset({"bfloat16", "float32"})


def _compiled_counts(fmt, exact32, stored) -> list[int] | None:
    """The COUNTERS of a rounding of float32 values into a one- or two-byte format, by the compiled
    path's one loop over the values and the stored patterns (every case: the full count's tests,
    value by value); None where that path does not run (numba missing or off, a small array, other
    storage), and then numpy counts."""
    st = np.asarray(stored)
    if st.dtype.itemsize > 2 or st.dtype != fmt.dtype:  # float32 storage (most often) first: cheap
        return None
    x = np.asarray(exact32)
    if x.dtype != np.float32 or st.shape != x.shape or (count := compiled.count("rounding_counts", x)) is None:
        return None
    lim = _limits(fmt)
    return count(x, st, lim.table, lim.tiny, lim.max, lim.threshold, fmt.has_inf, lim.beyond)


def _finite_counts(fmt, exact32, stored) -> list[int] | None:
    """The COUNTERS in the common case, on numpy, in a few passes instead of ~25: every stored
    value finite and below the format's max.  Then nothing overflowed (a value beyond the overflow
    threshold stores inf or NaN, or max where the rounding saturates), no exact value was inf or
    NaN (they store inf, NaN or max), and no inf or NaN is there; a flushed value is a stored 0
    whose exact value was not 0 (an exact 0 always stores 0), a subnormal is below ``tiny`` and
    not 0.  None (count it all, :func:`_event_counts`) whenever the stored values reach max, inf
    or NaN.  float16 and bfloat16 storage is counted on its bit patterns (:func:`_counts16`)."""
    x = np.asarray(exact32)
    if x.dtype != np.float32 or x.size == 0:
        return None
    st = np.asarray(stored)
    if fmt.name == "float32" or st is x:
        if st is not x and x.ndim == 0 and st.dtype == x.dtype and st.shape == () and st.tobytes() == x.tobytes():
            st = x  # a 0-d float32 result, stored as it was: it arrives as a new numpy scalar
        return _unrounded_counts(fmt, x, st)
    if st.dtype.itemsize == 2 and st.dtype == fmt.dtype and x.shape == st.shape:
        return _counts16(fmt, x, st)
    lim = _limits(fmt)
    r = _NUMPY.to_f32(st)
    a = np.abs(r)
    if not np.maximum.reduce(a, axis=None) < lim.max:  # max, inf or NaN stored (a NaN wins the max)
        return None
    small = int(np.count_nonzero(a < lim.tiny))  # stored zeros and subnormals
    zero_r = int(np.count_nonzero(a == 0)) if small else 0
    zero_x = int(np.count_nonzero(x == 0)) if zero_r else 0  # (an exact 0 always stores 0: x's zeros are
    # among the stored ones, so none stored means none in x)
    inexact = int(np.count_nonzero(r != x))
    return [int(x.size), inexact, zero_r - zero_x, small - zero_r, 0, 0, 0, 0]


def _counts16(fmt, x, stored) -> list[int] | None:
    """:func:`_finite_counts` for float16 / bfloat16 storage, without widening it, in chunks that
    stay in L2 (preallocated scratch: no fresh large arrays).

    The stored patterns shifted left by one (the sign dropped) order as the magnitudes: their
    max below max's pattern means every stored value finite and below max; those at or below
    tiny's pattern are the only candidates for a zero, a subnormal, or an exact value below
    tiny (which rounds to at most tiny), and are widened alone.  A value was changed by the
    rounding exactly when x is not a value of the format (whatever the rounding mode: a value
    of the format stores itself): for x of magnitude tiny or more, when any of float32's
    ``23 - mantissa_bits`` low mantissa bits is set; below tiny (float16's subnormal range),
    bfloat16 still keeps every bit above those, float16 fewer, so there the candidates are
    compared with their stored values instead."""
    lim = _limits(fmt)
    u, xb = stored.reshape(-1).view(np.uint16), x.reshape(-1).view(np.uint32)
    buf16, buf32, bufb = _scratch16()
    inexact, cand = 0, []
    for i in range(0, u.size, _CHUNK):
        k = min(_CHUNK, u.size - i)
        s2 = np.left_shift(u[i : i + k], _ONE16, out=buf16[:k])
        if not np.maximum.reduce(s2) < lim.max2:  # max, inf or NaN stored
            return None
        if np.minimum.reduce(s2) <= lim.tiny2:
            cand.append(np.flatnonzero(np.less_equal(s2, lim.tiny2, out=bufb[:k])) + i)
        inexact += int(np.count_nonzero(np.left_shift(xb[i : i + k], lim.keep_shift, out=buf32[:k])))
    small = zero_r = zero_x = 0
    if cand:
        idx = cand[0] if len(cand) == 1 else np.concatenate(cand)
        r = _NUMPY.to_f32(u[idx].view(stored.dtype))
        xs = xb[idx].view(np.float32)
        a = np.abs(r)
        small = int(np.count_nonzero(a < lim.tiny))
        zero_r = int(np.count_nonzero(a == 0))
        zero_x = int(np.count_nonzero(xs == 0))
        if lim.below_tiny_inexact:  # the exact count on the candidates in place of the low-bit one
            inexact += int(np.count_nonzero(r != xs)) - int(np.count_nonzero(np.left_shift(xb[idx], lim.keep_shift)))
    return [int(x.size), inexact, zero_r - zero_x, small - zero_r, 0, 0, 0, 0]


def _exact16(fmt, stored) -> list[int] | None:
    """The COUNTERS of an exact result (relu: nothing rounded) in float16 / bfloat16 storage on
    numpy, every value finite: only its subnormals, counted on the patterns shifted left by one
    (``0 < p << 1 < tiny << 1``).  None for other storage, or where a value is inf or NaN."""
    st = np.asarray(stored)
    if st.dtype.itemsize != 2 or st.dtype != fmt.dtype or st.size == 0:
        return None
    lim = _limits(fmt)
    if (count := compiled.count("stored_subnormal_count", st)) is not None:  # one compiled pass
        return None if (sub := count(st, lim.tiny16, lim.exp16)) < 0 else [int(st.size), 0, 0, sub, 0, 0, 0, 0]
    s2 = np.left_shift(st.reshape(-1).view(np.uint16), np.uint16(1))
    if not np.maximum.reduce(s2) < lim.inf2:
        return None
    sub = 0
    if np.minimum.reduce(s2) < lim.tiny2:
        sub = int(np.count_nonzero(s2 < lim.tiny2)) - (s2.size - int(np.count_nonzero(s2)))
    return [int(st.size), 0, 0, sub, 0, 0, 0, 0]


# Values per pass in _counts16 and _unrounded_counts: 256 KB + 512 KB + 128 KB of scratch, about
# the L2 cache.  Larger than the cache alone would suggest: numpy's fixed cost per call (2-3 us for a
# reduction) outweighs the misses - timed interleaved in one process, a 200,704-value count took
# 17-25% less in chunks of 2**17 than of 2**15 (2**16 about the same as 2**17).
_CHUNK = 2**17
_ONE16 = np.uint16(1)
_SCRATCH = threading.local()  # per thread: a monitor may count in several threads


def _scratch16():
    bufs = getattr(_SCRATCH, "bufs", None)
    if bufs is None:
        bufs = _SCRATCH.bufs = (np.empty(_CHUNK, np.uint16), np.empty(_CHUNK, np.uint32), np.empty(_CHUNK, np.bool_))
    return bufs


class _Limits:
    """What :func:`_finite_counts` reads of a format as numpy scalars (made once: a comparison with
    a Python float costs numpy a conversion per call); for 16-bit formats also the patterns
    :func:`_counts16` compares."""

    def __init__(self, fmt):
        self.max = np.float32(fmt.max)
        self.tiny = np.float32(fmt.tiny)
        self.tiny32 = self.tiny.view(np.uint32)  # its float32 pattern (the compiled count of float32 values)
        with np.errstate(over="ignore"):  # float32's own threshold is past its max: inf, never reached
            self.threshold = np.float32(fmt.overflow_threshold)  # as _event_counts compares it: in float32
        if fmt.dtype.itemsize <= 2:
            self.table = widening_table(fmt)  # the compiled count's widening, and where max overflowed
            self.beyond = self.threshold if fmt.has_inf else np.nextafter(self.threshold, np.float32(np.inf))
        if fmt.dtype.itemsize == 2:
            self.tiny16, self.exp16 = _pattern16(fmt.tiny, fmt), ((1 << fmt.exponent_bits) - 1) << fmt.mantissa_bits
            self.max2 = np.uint16(_pattern16(fmt.max, fmt) << 1)
            self.tiny2 = np.uint16(_pattern16(fmt.tiny, fmt) << 1)
            self.inf2 = np.uint16(((1 << fmt.exponent_bits) - 1) << (fmt.mantissa_bits + 1))  # inf / NaN from here
            self.keep_shift = np.uint32(9 + fmt.mantissa_bits)  # x << this keeps the 23 - m dropped bits
            # below tiny float16 keeps fewer bits than above it; bfloat16 (float32's exponents) the same
            self.below_tiny_inexact = fmt.emin > -126


def _pattern16(v: float, fmt) -> int:
    return int(np.array(v, fmt.dtype).view(np.uint16))


_LIMITS: dict[str, _Limits] = {}


def _limits(fmt) -> _Limits:
    lim = _LIMITS.get(fmt.name)
    if lim is None:
        lim = _LIMITS[fmt.name] = _Limits(fmt)
    return lim


def _unrounded_counts(fmt, x, stored) -> list[int] | None:
    """:func:`_finite_counts` where nothing was rounded: a "rounding" into float32 of float32
    values (unscaling, an update), or an exact op's result (relu) given as ``stored`` alone.
    If every value is finite the only events are the subnormals of ``fmt``: the values below
    ``tiny`` that are not 0.  On the float32 patterns shifted left by one (the sign dropped,
    ordered as the magnitudes), in L2-sized chunks of scratch: one pass and two reductions when no
    value is below tiny."""
    if np.asarray(stored) is not x:  # an op that gave its stored result apart (relu): the general count
        return None
    if (count := compiled.count("subnormal_count", x)) is not None:  # one compiled pass
        return None if (sub := count(x, _limits(fmt).tiny32)) < 0 else [int(x.size), 0, 0, sub, 0, 0, 0, 0]
    xb = x.reshape(-1).view(np.uint32)
    tiny2 = _tiny2_32(fmt)
    buf = _scratch16()[1]
    sub = 0
    for i in range(0, xb.size, _CHUNK):
        b = np.left_shift(xb[i : i + _CHUNK], np.uint32(1), out=buf[: min(_CHUNK, xb.size - i)])
        if not np.maximum.reduce(b) < _INF2:  # inf or NaN
            return None
        if np.minimum.reduce(b) < tiny2:
            sub += int(np.count_nonzero(b < tiny2)) - (b.size - int(np.count_nonzero(b)))
    return [int(x.size), 0, 0, sub, 0, 0, 0, 0]


_INF2 = np.uint32(0xFF000000)  # float32 inf's pattern shifted left by one


def _tiny2_32(fmt) -> np.uint32:
    """fmt's tiny as a float32 pattern, shifted left by one."""
    lim = _limits(fmt)
    t = getattr(lim, "tiny2_32", None)
    if t is None:
        t = lim.tiny2_32 = np.uint32(int(np.float32(fmt.tiny).view(np.uint32)) << 1)
    return t


def _event_counts(fmt, exact32, stored, xp):
    """(n, events): the number of values rounded (a Python int) and the other COUNTERS as one
    int array on ``xp``'s device, computed there - nothing is copied to the host."""
    x = xp.asarray(exact32)
    # numpy's own float16 -> float32 cast is slow on subnormals; the backend's is not.
    r = _NUMPY.to_f32(np.asarray(stored)) if xp is np else xp.asarray(stored).astype(xp.float32, copy=False)
    a = xp.abs(r)
    nan_r = xp.isnan(r)
    masks_same = [(a > 0) & (a < fmt.tiny), xp.isinf(r), nan_r]
    if r is x or r.dtype == x.dtype and fmt.name == "float32":
        # Into float32 from float32: no underflow or overflow possible, and nothing changes unless
        # the value stored was computed apart (a tensor core's truncating sum against the exact one).
        sub, inf, nan = (xp.count_nonzero(m) for m in masks_same)
        zero = sub * 0
        ne = zero if r is x else xp.count_nonzero((r != x) & ~(nan_r & xp.isnan(x)))
        return int(x.size), xp.stack([ne, zero, sub, zero, inf, nan, nan])
    nan_x = xp.isnan(x)
    finite_x = xp.isfinite(x)
    zero_r = a == 0
    over = finite_x & ~xp.isfinite(r)
    if fmt.name != "float32":
        # A saturating rounding clamps instead of overflowing: max where the exact value was beyond it.
        # At the threshold itself IEEE formats round to inf (max is odd), e4m3fn to max (even).
        beyond = xp.abs(x) >= fmt.overflow_threshold if fmt.has_inf else xp.abs(x) > fmt.overflow_threshold
        over = over | (finite_x & (a == fmt.max) & beyond)
    masks = [
        r != x,  # NaN != NaN as well: corrected below by the NaNs that stayed NaN
        zero_r & (x != 0),
        masks_same[0],
        over,
        masks_same[1],
        nan_r,
        nan_x,
        nan_x & nan_r,
    ]
    ne, under, sub, over_n, inf, nan, nan_in, nan_kept = (xp.count_nonzero(m) for m in masks)
    return int(x.size), xp.stack([ne - nan_kept, under, sub, over_n, inf, nan, nan_in])


class Monitor:
    """Counts of rounding events per (direction, scope, op, target, format).

    ``direction`` is ``forward`` (an op's result), ``backward`` (a gradient rounded into an
    input's gradient format) or ``update`` (an optimizer writing a parameter or its state);
    ``scope`` the dotted module path (``"0"``, ``"2"`` in a Sequential; ``""`` outside any
    module); ``op`` the op that produced the value (in backward: the op whose backward ran);
    ``target`` the name of the tensor receiving a gradient or update (``"weight"``), else ``""``.

    ``capture``: keep a float32 numpy copy of the exact values of matching roundings in
    :attr:`captured` (a list of ``(key, array)``): ``None`` (nothing), a direction, a tuple of
    directions, or a callable ``(event: RoundingEvent) -> bool``.

    ``trace_nonfinite``: also find the op where the first inf / NaN was born
    (:meth:`first_nonfinite`; the tracer itself is :attr:`tracer`).
    """

    def __init__(self, capture=None, trace_nonfinite: bool = False):
        self._counts: dict[tuple, list[int]] = {}
        # On a device the counts stay there until read: key -> [n, events array] (see counts).
        self._pending: dict[tuple, list] = {}
        self._pending_xp = None
        self.captured: list[tuple[tuple, np.ndarray]] = []
        if capture is None or callable(capture):
            self._capture = capture
        else:
            dirs = (capture,) if isinstance(capture, str) else tuple(capture)
            bad = [d for d in dirs if d not in DIRECTIONS]
            if bad:
                raise ValueError(f"capture: unknown direction(s) {bad}; known: {', '.join(DIRECTIONS)}")
            self._capture = lambda ev: ev.direction in dirs
        self.tracer = NonFiniteTracer() if trace_nonfinite else None
        self._hook = self._record  # one bound method, so it can be found again by identity
        self._active = 0

    # -- the hook ------------------------------------------------------------------------

    def _record(self, ev: state.RoundingEvent) -> None:
        key = (ev.direction, ev.scope, ev.op, ev.target, ev.fmt.name)
        xp = ev.backend.xp
        exact32, stored = ev.exact32, ev.stored
        if exact32 is None and xp is np and self._capture is None:
            fast = _exact16(ev.fmt, stored)
            if fast is not None:
                self._add(key, fast)
                if self.tracer is not None:
                    self.tracer(ev)
                return
        if exact32 is None:  # an exact result: its float32 value is the exact one
            exact32 = stored = ev.backend.to_f32(stored) if xp is np else stored
        if xp is not np:  # add on the device: no host synchronisation per op
            n, events = _event_counts(ev.fmt, exact32, stored, xp)
            p = self._pending.get(key)
            self._pending[key] = [n, events] if p is None else [p[0] + n, p[1] + events]
            self._pending_xp = xp
        else:
            self._add(key, _count_rounding(ev.fmt, exact32, stored, xp))
        if self._capture is not None and self._capture(ev):
            arr = ev.backend.to_numpy(ev.backend.to_f32(exact32))
            self.captured.append((key, np.array(arr, dtype=np.float32, copy=True)))
        if self.tracer is not None:
            self.tracer(ev)

    def _add(self, key, c) -> None:
        acc = self._counts.get(key)
        if acc is None:
            self._counts[key] = list(c)
        else:
            for i, v in enumerate(c):
                acc[i] += v

    @property
    def counts(self) -> dict[tuple, list[int]]:
        """(direction, scope, op, target, format) -> the COUNTERS as Python ints.  Counts made
        on a device are copied to the host here, all in one copy, when first read."""
        if self._pending:
            keys = list(self._pending)
            host = self._pending_xp.stack([self._pending[k][1] for k in keys]).get().tolist()
            for k, ev in zip(keys, host):
                self._add(k, [self._pending[k][0], *(int(v) for v in ev)])
            self._pending.clear()
        return self._counts

    # -- context manager -----------------------------------------------------------------

    def start(self) -> Monitor:
        """Register the hook (``with`` does this)."""
        state.add_hook(self._hook)
        self._active += 1
        return self

    def stop(self) -> None:
        """Remove this monitor's hook (its most recent registration), leaving any others."""
        if self._hook in state.HOOKS:
            state.remove_hook(self._hook)
            self._active -= 1

    def __enter__(self) -> Monitor:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def active(self) -> bool:
        return self._active > 0

    def reset(self) -> None:
        """Forget every count, captured array and traced origin (the hook stays registered)."""
        self._counts.clear()
        self._pending.clear()
        self.captured.clear()
        if self.tracer is not None:
            self.tracer.reset()

    def first_nonfinite(self, kind=None, *, include_scaler: bool = True):
        """The first op that made an inf or NaN (a :class:`~fpsim.trace.NonFinite`; ``print`` it),
        or None; see :meth:`fpsim.trace.NonFiniteTracer.first_nonfinite`.  Needs
        ``monitor(trace_nonfinite=True)``."""
        if self.tracer is None:
            raise RuntimeError("first_nonfinite() needs a tracing monitor: fpsim.monitor(trace_nonfinite=True)")
        return self.tracer.first_nonfinite(kind, include_scaler=include_scaler)

    # -- reading the counts ----------------------------------------------------------------

    def totals(self, direction=None, op=None, scope=None, target=None, fmt=None) -> dict[str, int]:
        """COUNTERS summed over every key matching the given fields (None matches anything).

        ``scope`` matches a module and everything inside it (``"0"`` matches ``"0"`` and
        ``"0.1"``); ``fmt`` accepts any format name or alias.
        """
        fname = get_format(fmt).name if fmt is not None else None
        out = dict.fromkeys(COUNTERS, 0)
        for (d, s, o, t, f), c in self.counts.items():
            if direction is not None and d != direction:
                continue
            if op is not None and o != op:
                continue
            if scope is not None and not (s == scope or s.startswith(scope + ".") or scope == ""):
                continue
            if target is not None and t != target:
                continue
            if fname is not None and f != fname:
                continue
            for name, v in zip(COUNTERS, c):
                out[name] += v
        return out

    def to_dict(self) -> dict:
        """Plain nested data: ``{direction: {scope: {op: {target: {format: {counter: int}}}}}}``."""
        out: dict = {}
        for (d, s, o, t, f), c in sorted(self.counts.items(), key=_order):
            out.setdefault(d, {}).setdefault(s, {}).setdefault(o, {}).setdefault(t, {})[f] = dict(zip(COUNTERS, c))
        return out

    def table(self) -> str:
        """An aligned text table, one row per key, grouped by direction, scope, op, target.

        Percentages are of the values rounded in that row; overflow and NaN are counts.
        """
        cols = ["direction", "scope", "op", "target", "format", "n", "inexact", "underflow", "subnormal",
                "overflow", "nan"]
        rows = []
        prev = ("",) * 4
        for (d, s, o, t, f), c in sorted(self.counts.items(), key=_order):
            v = dict(zip(COUNTERS, c))
            n = v["n"]
            group = (d, s or "-", o, t)
            # Print a group field only where it (or a field left of it) changes.
            first = next((i for i in range(4) if group[i] != prev[i]), 4)
            shown = [g if i >= first else "" for i, g in enumerate(group)]
            prev = group
            rows.append(shown + [f, str(n), _pct(v["inexact"], n), _pct(v["underflow"], n),
                                 _pct(v["subnormal"], n), str(v["overflow"]), str(v["nan"])])
        if not rows:
            return "(no roundings recorded)"
        return "\n".join(text_table(cols, rows, right=range(5, len(cols))))

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        return f"<Monitor: {len(self.counts)} keys, {'active' if self.active else 'inactive'}>"


def _order(item):
    (d, s, o, t, f), _ = item
    return (DIRECTIONS.index(d) if d in DIRECTIONS else len(DIRECTIONS), d, s, o, t, f)


def _pct(k: int, n: int) -> str:
    return percent(k, n, zero="0", small=True)


def monitor(capture=None, trace_nonfinite: bool = False) -> Monitor:
    """A :class:`Monitor` to use as ``with fpsim.monitor() as m:``; monitors nest.
    ``trace_nonfinite=True``: also trace where the first inf / NaN came from."""
    return Monitor(capture=capture, trace_nonfinite=trace_nonfinite)
