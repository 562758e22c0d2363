"""Gradient audits: which formats, and which loss scales, keep a set of real gradients?

A practitioner dumps gradients (or any tensors) to ``.npz``, ``.npy``, ``.safetensors`` or a
PyTorch ``.pt``; :func:`audit` reads them ONE tensor at a time and, for each format, counts
how many non-zero values rounding to nearest would flush to zero, leave subnormal, or
overflow - and which power-of-two loss scales 2^k would keep at least 99.9 % of the non-zero
values (not flushed) with no overflow at all.

Multiplying by 2^k is exact (in float64, far from its limits), so scaling commutes with the
rounding thresholds: at scale 2^k a value flushes iff |x| <= flush_threshold * 2^-k and
overflows iff |x| reaches overflow_threshold * 2^-k.  One sort per tensor then answers every
k by binary search; the unscaled counts come from :func:`fpsim.classify`.

Files are read by :func:`fpsim.tools.audit.tensorfiles.read_tensors` (``allow_pickle=False``; PyTorch:
``weights_only=True``).
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass, field
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np

from ...formats import LOW_FORMATS, cast, classify, get_format
from ...formats.survival import float_values, is_float_dtype
from ...textable import percent, text_table
from ..jsonout import dumps, finite
from ..plots import HistogramData, format_bands, gradient_histogram
from .tensorfiles import read_tensors

__all__ = ["read_tensors", "audit", "audit_arrays", "AuditReport", "TensorAudit", "FormatAudit", "K_RANGE", "KEEP"]

K_RANGE = (-30, 40)
KEEP = 0.999
# Quarter-binade bins of log2|x| covering every float32 magnitude (2^-149 .. 2^128) and then some.
HIST_EDGES = np.arange(-160.0, 140.0 + 0.25, 0.25)


def _quarter_steps() -> np.ndarray:
    """The smallest float64 numbers >= 2^(1/4), 2^(1/2) and 2^(3/4) (from ``decimal`` at 60 digits:
    none of the three is within 1e-60 of a float64): t in [1, 2) lies in quarter j of its binade
    exactly when it has passed j of them."""
    out = []
    with localcontext() as ctx:
        ctx.prec = 60
        for j in (1, 2, 3):
            c = Decimal(2) ** (Decimal(j) / 4)
            f = float(c)
            out.append(f if Decimal(f) >= c else math.nextafter(f, math.inf))
    return np.array(out)


_QUARTERS = _quarter_steps()


def _quarter_bins(a: np.ndarray) -> np.ndarray:
    """The :data:`HIST_EDGES` bin of each magnitude ``a`` (float64, > 0): floor(4 log2 a) decided
    exactly from the binary exponent and the significand (numpy's log2 differs by CPU in the last
    bit, which can move a value lying at a bin edge), clipped to the edges' range."""
    m, e = np.frexp(a)  # a = m 2^e with m in [0.5, 1): log2 a in [e - 1, e)
    q = 4 * (e.astype(np.int64) - 1) + np.searchsorted(_QUARTERS, 2 * m, side="right")
    return np.clip(q - int(4 * HIST_EDGES[0]), 0, HIST_EDGES.size - 2)


# --------------------------------------------------------------------------------------------
# the audit


@dataclass
class FormatAudit:
    """One format's verdict on one tensor (or on all of them): counts at scale 1 and the
    range of safe loss-scale exponents ``(k_min, k_max)`` (None if no 2^k in the search
    range is safe)."""

    format: str
    nonzero: int
    flushed: int
    subnormal: int
    overflow: int
    scale_range: tuple[int, int] | None

    def _pct(self, count: int) -> float:
        return 100.0 * count / self.nonzero if self.nonzero else 0.0

    @property
    def pct_flushed(self) -> float:
        return self._pct(self.flushed)

    @property
    def pct_subnormal(self) -> float:
        return self._pct(self.subnormal)

    @property
    def pct_overflow(self) -> float:
        return self._pct(self.overflow)

    def cells(self) -> list[str]:
        """% flushed, subnormal and overflow as the report's table writes them."""
        return [percent(k, self.nonzero or 1) for k in (self.flushed, self.subnormal, self.overflow)]

    def to_dict(self) -> dict:
        return {"format": self.format, "nonzero": self.nonzero, "flushed": self.flushed,
                "subnormal": self.subnormal, "overflow": self.overflow, "pct_flushed": self.pct_flushed,
                "pct_subnormal": self.pct_subnormal, "pct_overflow": self.pct_overflow,
                "scale_exponents": list(self.scale_range) if self.scale_range else None}


@dataclass
class TensorAudit:
    name: str
    shape: tuple
    dtype: str
    n: int
    zeros: int
    nonfinite: int
    formats: dict[str, FormatAudit]

    def to_dict(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype, "n": self.n, "zeros": self.zeros,
                "nonfinite": self.nonfinite, "formats": {k: v.to_dict() for k, v in self.formats.items()}}


@dataclass
class AuditReport:
    """Per tensor and overall, per format: % flushed / subnormal / overflow of the non-zero
    values at scale 1, and the safe power-of-two loss scales.  ``edges``/``counts`` are a
    histogram of log2|x| over all non-zero finite values (quarter-binade bins)."""

    source: str
    formats: tuple[str, ...]
    k_range: tuple[int, int]
    keep: float
    tensors: list[TensorAudit]
    overall: TensorAudit
    skipped: list[tuple[str, str]] = field(default_factory=list)
    edges: np.ndarray = field(default_factory=lambda: HIST_EDGES.copy(), repr=False)
    counts: np.ndarray = field(default_factory=lambda: np.zeros(HIST_EDGES.size - 1, np.int64), repr=False)

    def to_dict(self) -> dict:
        return {"source": self.source, "formats": list(self.formats), "scale_exponents_searched": list(self.k_range),
                "keep": self.keep, "overall": self.overall.to_dict(), "tensors": [t.to_dict() for t in self.tensors],
                "skipped": [{"name": n, "reason": r} for n, r in self.skipped]}

    @property
    def judged(self) -> int:
        """How many finite non-zero values the verdicts rest on (0: nothing to judge)."""
        o = self.overall
        return o.n - o.zeros - o.nonfinite

    def nothing_to_judge(self) -> str:
        """Why no verdict is possible (no finite non-zero value anywhere), or "" when one is."""
        if self.judged:
            return ""
        return (f"{self.source}: nothing to judge - no finite non-zero value in {len(self.tensors)} tensor(s) "
                f"({self.overall.zeros:,} zero, {self.overall.nonfinite:,} inf/NaN, {len(self.skipped)} skipped)")

    def table(self) -> str:
        """The report as aligned text: overall first, then each tensor."""
        o = self.overall
        lo, hi = self.k_range
        lines = [f"audit of {self.source}: {len(self.tensors)} tensor(s), {o.n:,} values "
                 f"({self.judged:,} non-zero, {o.zeros:,} zero, {o.nonfinite:,} inf/NaN)",
                 f"a loss scale 2^k (k in {lo}..{hi}) is safe when the scaled values keep >= {100 * self.keep:g}% of",
                 "the non-zero values (not flushed to 0) and none overflow", ""]
        cols = ["tensor", "format", "flushed to 0", "subnormal", "overflow", "safe loss scales"]
        rows = []
        for t in [o, *self.tensors]:
            for i, (name, fa) in enumerate(t.formats.items()):
                rng = fa.scale_range
                safe = "none" if rng is None else (f"2^{rng[0]}" if rng[0] == rng[1] else f"2^{rng[0]} .. 2^{rng[1]}")
                safe = safe if fa.nonzero else "- (no finite non-zero value)"
                rows.append([t.name if i == 0 else "", name, *fa.cells(), safe])
        lines += text_table(cols, rows, right={2, 3, 4})
        if self.skipped:
            lines.append("")
            lines += [f"skipped {n}: {r}" for n, r in self.skipped]
        if not self.judged:
            lines += ["", self.nothing_to_judge()]
        return "\n".join(lines)

    def histogram(self):
        """The overall histogram as :class:`fpsim.tools.plots.HistogramData`, with this audit's
        exact percentages (empty bins at both ends trimmed)."""
        nz = np.flatnonzero(self.counts)
        if nz.size:
            a, b = max(nz[0] - 2, 0), min(nz[-1] + 3, self.counts.size)
        else:
            a, b = 0, 1
        o = self.overall
        pct = {n: {"flushed": fa.pct_flushed, "subnormal": fa.pct_subnormal, "overflow": fa.pct_overflow}
               for n, fa in o.formats.items()}
        return HistogramData(edges=self.edges[a:b + 1], counts=self.counts[a:b], n=o.n, zeros=o.zeros,
                             nonfinite=o.nonfinite, bands={n: format_bands(n) for n in self.formats},
                             percent=pct)

    def figure(self, path=None, title=None):
        """The gradient histogram with each format's bands; saved to ``path`` if given."""
        return gradient_histogram(self.histogram(), formats=self.formats, path=path,
                                  title=title or f"{os.path.basename(self.source)}: where the values lie")


def _keep_fraction(keep: float) -> Fraction:
    if not 0 < keep <= 1:
        raise ValueError(f"keep must be a fraction in (0, 1], got {keep}")
    return Fraction(keep).limit_denominator(10**9)


class _Acc:
    """Running per-format counts: at scale 1 and at every scale exponent k."""

    def __init__(self, nk: int):
        self.nonzero = 0
        self.flushed = self.subnormal = self.overflow = 0
        self.flush_k = np.zeros(nk, np.int64)
        self.over_k = np.zeros(nk, np.int64)

    def add(self, other: _Acc) -> None:
        self.nonzero += other.nonzero
        self.flushed += other.flushed
        self.subnormal += other.subnormal
        self.overflow += other.overflow
        self.flush_k += other.flush_k
        self.over_k += other.over_k

    def verdict(self, name, ks, keep: Fraction) -> FormatAudit:
        # kept >= keep * nonzero, in integers: (nonzero - flushed) * q >= p * nonzero
        ok = ((self.nonzero - self.flush_k) * keep.denominator >= keep.numerator * self.nonzero) & (self.over_k == 0)
        good = ks[ok] if self.nonzero else ks[:0]  # no finite non-zero value: nothing is safe or unsafe
        # flushing falls and overflow grows with k, so the safe exponents form one interval
        rng = (int(good[0]), int(good[-1])) if good.size else None
        return FormatAudit(name, self.nonzero, self.flushed, self.subnormal, self.overflow, rng)


def _thresholds(f):
    """(flush threshold, overflow threshold, whether the overflow threshold itself overflows)."""
    thr = f.overflow_threshold
    at = cast(np.float64(thr), f).astype(np.float64)
    return f.flush_threshold, thr, not np.isfinite(at)


def _audit_one(arr: np.ndarray, fnames, ks):
    """Counts for one tensor: (n, zeros, nonfinite, {format: _Acc}, histogram counts)."""
    v = float_values(arr)
    finite = np.isfinite(v)
    a = np.abs(v[finite & (v != 0)]).astype(np.float64)
    a.sort()
    n, nonfinite = int(v.size), int(v.size - np.count_nonzero(finite))
    zeros = n - nonfinite - int(a.size)
    scales = np.ldexp(1.0, -ks)  # 2^-k: the thresholds move down as the scale grows
    accs = {}
    for name in fnames:
        f = get_format(name)
        fthr, othr, over_at = _thresholds(f)
        acc = _Acc(ks.size)
        acc.nonzero = int(a.size)
        cat = np.bincount(classify(a, f).category, minlength=5)
        acc.flushed, acc.subnormal, acc.overflow = int(cat[0]), int(cat[1]), int(cat[3] + cat[4])
        acc.flush_k = np.searchsorted(a, fthr * scales, side="right").astype(np.int64)
        acc.over_k = (a.size - np.searchsorted(a, othr * scales, side="left" if over_at else "right")).astype(np.int64)
        accs[name] = acc
    hist = np.bincount(_quarter_bins(a), minlength=HIST_EDGES.size - 1).astype(np.int64)
    return n, zeros, nonfinite, accs, hist


def audit_arrays(arrays, formats=LOW_FORMATS, *, k_range=K_RANGE, keep=KEEP, source="(arrays)",
                 progress=None) -> AuditReport:
    """Audit ``(name, array)`` pairs (an iterable, consumed one at a time) or a dict of arrays.

    Non-float arrays (integers, booleans, objects, void) are skipped and listed with the
    reason.  ``progress(i, name)`` is called before each tensor if given.
    """
    fnames = tuple(get_format(f).name for f in formats)
    if not fnames:
        raise ValueError("audit needs at least one format")
    lo, hi = int(k_range[0]), int(k_range[1])
    if lo > hi:
        raise ValueError(f"k_range must be (low, high) with low <= high, got {k_range}")
    kf = _keep_fraction(keep)
    ks = np.arange(lo, hi + 1)
    items = arrays.items() if isinstance(arrays, dict) else arrays
    total = {n: _Acc(ks.size) for n in fnames}
    tensors, skipped = [], []
    n_all = zeros_all = nonfinite_all = 0
    counts = np.zeros(HIST_EDGES.size - 1, np.int64)
    for i, (name, arr) in enumerate(items):
        if progress is not None:
            progress(i, name)
        arr = np.asarray(arr)
        if not is_float_dtype(arr.dtype):
            if arr.dtype.kind == "O":
                why = "not a tensor"
            elif arr.dtype.kind == "V":
                why = f"dtype {arr.dtype} is raw bytes (bfloat16/fp8 lose their type in .npy/.npz: save as float32)"
            else:
                why = f"dtype {arr.dtype} is not floating point"
            skipped.append((name, why))
            continue
        n, zeros, nonfinite, accs, hist = _audit_one(arr, fnames, ks)
        tensors.append(TensorAudit(name, tuple(arr.shape), str(arr.dtype), n, zeros, nonfinite,
                                   {k: acc.verdict(k, ks, kf) for k, acc in accs.items()}))
        for k, acc in accs.items():
            total[k].add(acc)
        n_all, zeros_all, nonfinite_all = n_all + n, zeros_all + zeros, nonfinite_all + nonfinite
        counts += hist
    overall = TensorAudit("(all)", (n_all,), "", n_all, zeros_all, nonfinite_all,
                          {k: acc.verdict(k, ks, kf) for k, acc in total.items()})
    return AuditReport(source, fnames, (lo, hi), float(keep), tensors, overall, skipped, HIST_EDGES.copy(), counts)


def audit(path, formats=LOW_FORMATS, *, k_range=K_RANGE, keep=KEEP, progress=None) -> AuditReport:
    """Audit every tensor in a file (see :func:`read_tensors`), one tensor at a time."""
    return audit_arrays(read_tensors(path), formats, k_range=k_range, keep=keep, source=os.fspath(path),
                        progress=progress)


# --------------------------------------------------------------------------------------------
# the command


def add_arguments(p) -> None:
    """The ``fpsim audit`` arguments."""
    p.add_argument("file", help="gradients (or any tensors) in .npz, .npy, .safetensors or .pt/.pth")
    p.add_argument("--formats", nargs="+", default=list(LOW_FORMATS), metavar="FORMAT",
                   help="formats to check (names or aliases, space or comma separated; default: %(default)s)")
    p.add_argument("--out", help="where to write the histogram figure (default: FILE's name with _audit.png, "
                                 "next to FILE)")
    p.add_argument("--no-figure", action="store_true", help="do not draw the figure")
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of a table")


def default_figure_path(file) -> str:
    stem, _ = os.path.splitext(os.fspath(file))
    return stem + "_audit.png"


def main(args) -> int:
    """``fpsim audit``: print the report, then write the figure; errors surface as ValueError /
    OSError - a figure that cannot be written after the report, a file with nothing to judge
    (no finite non-zero value) after the report that says so."""
    fmts = [get_format(x).name for item in args.formats for x in item.split(",") if x.strip()]
    start = time.monotonic()

    def progress(i, name):
        # Say something only when the audit is slow enough to wonder about.
        if time.monotonic() - start > 2.0:
            print(f"fpsim audit: reading tensor {i + 1}: {name}", file=sys.stderr, flush=True)

    report = audit(args.file, fmts, progress=progress)
    empty = report.nothing_to_judge()
    fig_path = None if args.no_figure or empty else args.out or default_figure_path(args.file)
    if args.json:
        d = report.to_dict()
        d["figure"] = fig_path
        d["nothing_to_judge"] = empty or None
        print(dumps(finite(d), indent=2), flush=True)
    else:
        print(report.table(), flush=True)
    if empty:
        raise ValueError(empty)
    if fig_path:
        _write_figure(report, fig_path)
        if not args.json:
            print(f"\nfigure: {fig_path}")
    return 0


def _write_figure(report: AuditReport, path: str) -> None:
    """Draw into a temporary file beside ``path`` (same suffix, so matplotlib knows the format)
    and move it into place: a failure leaves neither a half-written figure nor the temporary."""
    import matplotlib.pyplot as plt

    root, ext = os.path.splitext(path)
    tmp = f"{root}.tmp{ext}"
    try:
        plt.close(report.figure(tmp))
        os.replace(tmp, path)
    except BaseException as e:
        plt.close("all")
        if os.path.exists(tmp):
            os.remove(tmp)
        if isinstance(e, OSError):
            raise OSError(f"the figure {path} could not be written ({e.strerror or e}); the report above stands") \
                from None
        raise
