"""Outliers in activations over training: ``with fpsim.outliers.OutlierMonitor(model) as om:``.

Large language models grow a few activations far above the rest (up to 100,000x the median,
"Massive Activations", arXiv 2402.17762), and a rising excess kurtosis of the activations is
the early sign of a low-precision run about to diverge (FOG, arXiv 2505.20524).  Beside the
monitor (which counts what rounding does), this instrument watches the values themselves:

- every forward pass of each watched module, it reads the module's output (the stored values,
  widened to float64) and keeps one :class:`OutlierRow`: the excess kurtosis (Fisher's, the
  biased moment estimate ``m4 / m2^2 - 3`` over all the tensor's entries: 0 for a Gaussian,
  ``scipy.stats.kurtosis(x, axis=None)``), the largest |x|, the median |x| and their ratio, and
  the relative error of the same tensor quantized to fp8 with one per-tensor scale
  (:func:`fp8_error`);
- every attention that has a largest-logit probe (``CausalSelfAttention.record_logits``) has it
  on inside the block: ``attn_logits`` gives the largest |q.k * scale| of each forward pass.

The watched modules' ``forward`` is wrapped for the duration of the ``with`` block (PyTorch's
forward hooks, in effect) and given back on exit; the model's numbers are not touched.  Forward
passes are numbered from 0 in the order the ROOT model is called (``pass_`` of a row), so a
training loop that calls the model once per step numbers rows by step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .checks import check_integer
from .formats import f32_to_fp8, fp8_to_f32, get_format
from .lowp.recipes import compute_scale
from .numerics import fsum64, mean64
from .tensor import Tensor
from .textable import text_table

__all__ = ["OutlierMonitor", "OutlierRow", "STATISTICS", "excess_kurtosis", "fp8_error"]


def _values(x, dtype, owner: str) -> np.ndarray:
    """``x``'s entries as a flat array of ``dtype`` (one conversion: widened exactly, or rounded
    once): an fpsim Tensor's stored values, or numbers; text or other objects refused naming
    ``owner`` (numpy would parse '1.0', or say 'setting an array element with a sequence')."""
    if isinstance(x, Tensor):
        return np.asarray(x.backend.to_numpy(x.f32()), dtype=dtype).ravel()
    try:
        a = np.asarray(x)
    except ValueError:  # a ragged list
        a = np.asarray(None, dtype=object)
    if a.dtype.kind in "USOMm":
        raise TypeError(f"{owner}: x must be numbers (a numpy array, a list of numbers or an fpsim Tensor), got "
                        f"{type(x).__name__}" + (f" of dtype {a.dtype}" if isinstance(x, np.ndarray) else ""))
    return a.astype(dtype).ravel()


def excess_kurtosis(x) -> float:
    """Fisher's excess kurtosis of all entries of ``x`` in float64: ``m4 / m2^2 - 3`` with the
    biased central moments (scipy's default); NaN for a constant or empty array.  Every mean is
    the exact sum rounded once, divided by the count (:func:`fpsim.numerics.mean64`), and d^4 is
    (d * d) * (d * d) (numpy's ``d**4`` calls the C library's ``pow``): the same bits on every
    machine."""
    v = _values(x, np.float64, "excess_kurtosis")
    if v.size == 0:
        return float("nan")
    d = v - mean64(v)
    d2 = d * d
    m2 = float(mean64(d2))
    if not m2 > 0:
        return float("nan")
    return float(mean64(d2 * d2) / (m2 * m2) - 3.0)


def fp8_error(x, fmt="float8_e4m3fn") -> dict:
    """The error of quantizing ``x`` (widened or rounded to float32) to the fp8 format ``fmt``
    with one per-tensor scale, as fp8 recipes scale: ``s = 2^floor(log2(fmt.max / amax))``
    (``lowp.compute_scale``), ``x * s`` (exact in float32: s is a power of two) rounded once to
    ``fmt`` (nearest even, saturating at max), divided by ``s`` in float64.

    Returns ``rel_mse`` = sum (q - x)^2 / sum x^2 (float64, each sum exact and rounded once:
    :func:`fpsim.numerics.fsum64`), ``small``: the share of non-zero
    entries that land below ``fmt``'s smallest normal after scaling (subnormal or flushed: where
    the per-tensor scale costs the bulk its precision), and ``scale``.

    A tensor holding a NaN or an infinity has no relative error (the recipe's amax is not a number,
    and the energy is inf or NaN): ``rel_mse`` and ``small`` are NaN, never 0 - a NaN activation
    is not a perfect fp8 fit.  ``x`` may be an fpsim Tensor (its stored values); text, or a format
    that is no fp8 / fp6 / fp4 element format, is refused in one line naming fp8_error."""
    v = _values(x, np.float32, "fp8_error")
    f = get_format(fmt)
    try:  # the format check the rounding below makes, on no values: a NaN tensor returns before it
        f32_to_fp8(np.zeros(0, np.float32), f, saturate=True)
    except ValueError as e:
        raise ValueError(f"fp8_error: fmt {fmt!r}: {str(e).removeprefix('f32_to_fp8: ')}") from None
    amax = float(np.max(np.abs(v))) if v.size else 0.0
    s = float(compute_scale(amax, f))
    if not np.isfinite(amax):
        return {"rel_mse": float("nan"), "small": float("nan"), "scale": s}
    scaled = v * np.float32(s)  # exact: a power of two, and nothing reaches float32's limits
    q = fp8_to_f32(f32_to_fp8(scaled, f, saturate=True)).astype(np.float64) / s
    v64 = v.astype(np.float64)
    energy = float(fsum64(v64 * v64))  # the squares of float32 values are exact in float64
    nonzero = int(np.count_nonzero(v))
    small = (int(np.count_nonzero(np.abs(scaled) < f.tiny)) - (v.size - nonzero)) / nonzero if nonzero else 0.0
    d = q - v64
    rel = float(fsum64(d * d) / energy) if energy > 0 else 0.0
    return {"rel_mse": rel, "small": float(small), "scale": s}


@dataclass(frozen=True)
class OutlierRow:
    """One watched module's output at one forward pass: ``pass_`` (from 0), ``module`` (its
    path), ``n`` entries, ``kurtosis`` (excess), ``max_abs``, ``median_abs``, ``top_ratio``
    (max / median |x|; inf when the median is 0), ``fp8_rel_mse`` and ``fp8_small``
    (:func:`fp8_error` in e4m3)."""

    pass_: int
    module: str
    n: int
    kurtosis: float
    max_abs: float
    median_abs: float
    top_ratio: float
    fp8_rel_mse: float
    fp8_small: float


def _row(pass_: int, path: str, out: Tensor) -> OutlierRow:
    v = np.asarray(out.backend.to_numpy(out.f32()), dtype=np.float32)
    a = np.abs(v.astype(np.float64))
    med, top = float(np.median(a)), float(a.max())  # NaN when the output holds a NaN
    q = fp8_error(v)
    ratio = top / med if med > 0 else float("inf") if np.isfinite(top) else float("nan")
    return OutlierRow(pass_, path, int(v.size), excess_kurtosis(v), top, med, ratio, q["rel_mse"], q["small"])


# The OutlierRow fields that are statistics (series() reads them; pass_ and module are labels)
STATISTICS = ("n", "kurtosis", "max_abs", "median_abs", "top_ratio", "fp8_rel_mse", "fp8_small")


def _finite_row(r: OutlierRow) -> bool:
    """Whether the module's output held only finite values (its largest |x| is a finite number)."""
    return bool(np.isfinite(r.max_abs))


class OutlierMonitor:
    """Per-module outlier statistics of every forward pass inside the ``with`` block (module
    docstring).  ``modules``: which outputs to watch - None for every module below the root,
    or a list of paths (``"blocks.0"``; one path alone as a string), or a tuple of module classes
    (refused when no sub-module is one); the root is never
    watched (its output is the logits), but its calls number the passes.  ``every``: read the
    outputs of every n-th pass only (passes 0, n, 2n, ...; the statistics cost about as much as
    the forward pass of a small model).  ``rows`` holds :class:`OutlierRow` in the order the
    outputs were made."""

    def __init__(self, model, modules=None, *, every: int = 1):
        if not callable(getattr(model, "named_modules", None)) or not callable(getattr(model, "forward", None)):
            raise TypeError(f"OutlierMonitor: model must be an fpsim Module (fpsim.nn.Module), "
                            f"got {type(model).__name__}")
        self.every = check_integer(every, "OutlierMonitor: every", 1)
        named = dict(model.named_modules())
        if modules is None:
            paths = [p for p in named if p]
        elif isinstance(modules, tuple) and all(isinstance(c, type) for c in modules):
            paths = [p for p, m in named.items() if p and isinstance(m, modules)]
            if not paths:
                raise ValueError(f"OutlierMonitor: no sub-module of the model is a "
                                 f"{' or '.join(c.__name__ for c in modules)}; its modules are "
                                 f"{', '.join(sorted({type(m).__name__ for p, m in named.items() if p}))}")
        else:
            paths = [modules] if isinstance(modules, str) else list(modules)  # one path: not its letters
            unknown = [p for p in paths if p not in named or not p]
            if unknown:
                raise ValueError(f"OutlierMonitor: modules {unknown} are not sub-module paths of the model; "
                                 f"known: {', '.join(p for p in named if p)}")
        self.model, self.paths = model, paths
        self._named = named
        self.rows: list[OutlierRow] = []
        self._pass = -1
        self._saved: list = []
        self._attn = [(p, m) for p, m in named.items() if hasattr(m, "record_logits") and hasattr(m, "max_logits")]

    def _wrap(self, module, fn):
        """Give ``module`` an instance-level ``forward`` (saving whatever instance entry it had)."""
        self._saved.append((module, module.__dict__.get("forward")))
        object.__setattr__(module, "forward", fn)

    def __enter__(self):
        inner = self.model.forward

        def root(*args, **kwargs):
            self._pass += 1
            return inner(*args, **kwargs)

        self._wrap(self.model, root)
        for path in self.paths:
            m = self._named[path]
            self._wrap(m, self._watch(path, m.forward))
        self._logit_state = [(m, m.max_logits) for _, m in self._attn]
        for _, m in self._attn:
            m.record_logits()
        return self

    def _watch(self, path: str, fwd):
        def forward(*args, **kwargs):
            out = fwd(*args, **kwargs)
            n = max(self._pass, 0)
            if isinstance(out, Tensor) and n % self.every == 0:
                self.rows.append(_row(n, path, out))
            return out

        return forward

    def __exit__(self, *exc):
        self.attn_logits = self._logits()
        for module, entry in reversed(self._saved):
            if entry is None:
                del module.__dict__["forward"]
            else:
                object.__setattr__(module, "forward", entry)
        self._saved = []
        for m, rec in self._logit_state:
            object.__setattr__(m, "max_logits", rec)
        return False

    def _logits(self) -> dict:
        return {p: list(m.max_logits or []) for p, m in self._attn}

    def logits(self) -> dict:
        """{attention path: [largest |attention logit| of each forward pass]} (also after the block)."""
        return self._logits() if self._saved else getattr(self, "attn_logits", {})

    def series(self, module: str, field: str = "kurtosis") -> np.ndarray:
        """One watched module's ``field`` (a statistic of :class:`OutlierRow`: :data:`STATISTICS`)
        pass by pass.  A module that is not watched, or a field that is no statistic, is refused
        (an empty series would read as "nothing happened")."""
        if module not in self.paths:
            raise ValueError(f"OutlierMonitor.series: module {module!r} is not watched; "
                             f"watched: {', '.join(self.paths) or '(none)'}")
        if field not in STATISTICS:
            raise ValueError(f"OutlierMonitor.series: field {field!r} is not a statistic; known: {', '.join(STATISTICS)}")
        return np.array([getattr(r, field) for r in self.rows if r.module == module], dtype=np.float64)

    def report(self) -> str:
        """A text table, one row per watched module: passes seen, excess kurtosis at the first
        and last pass and its largest, max |x| and max / median at the last pass, the e4m3
        per-tensor relative MSE at the last pass ("non-finite" where that output held a NaN or an
        inf); then a line for each module whose output was ever non-finite, and each attention's
        largest logit."""
        cols = ["module", "passes", "kurt first", "kurt last", "kurt max", "max|x| last", "max/median",
                "e4m3 rel MSE"]
        rows, bad = [], []
        for path in self.paths:
            rs = [r for r in self.rows if r.module == path]
            if not rs:
                continue
            k = [r.kurtosis for r in rs]
            kmax = max((v for v in k if not np.isnan(v)), default=float("nan"))
            mse = f"{rs[-1].fp8_rel_mse:.2e}" if _finite_row(rs[-1]) else "non-finite"
            rows.append([path, str(len(rs)), f"{k[0]:.2f}", f"{k[-1]:.2f}", f"{kmax:.2f}",
                         f"{rs[-1].max_abs:.3g}", f"{rs[-1].top_ratio:.3g}", mse])
            nonfinite = [r.pass_ for r in rs if not _finite_row(r)]
            if nonfinite:
                bad.append(f"{path}: output non-finite (NaN or inf) in {len(nonfinite)} of {len(rs)} passes, "
                           f"first at pass {nonfinite[0]}")
        lines = text_table(cols, rows) + bad
        for path, vals in self.logits().items():
            if vals:
                lines.append(f"{path}: largest attention logit first {vals[0]:.3g}, last {vals[-1]:.3g}, "
                             f"max {max(vals):.3g} over {len(vals)} passes")
        return "\n".join(lines)
