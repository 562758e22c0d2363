"""``fpsim gpu-check``, part 1: every op of ``fpsim.ops`` in every format, numpy against the device.

Each op runs forward and backward (the gradient of every input) on both backends from the same
inputs - including subnormals, values near the overflow threshold, zeros, -0, inf and NaN - and
the same output gradients.  :func:`_compare` counts the values whose bits differ and the largest
difference in ulps of the output format; :class:`OpCheck` holds one comparison and judges it
against the bound of its kind (exact / libm / accumulate; see :mod:`fpsim.tools.gpu_check`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ... import backend as _backend
from ... import ops
from ...formats import FORMATS, bits_view, get_format, ulp
from ...tensor import tensor
from ...textable import text_table

__all__ = ["OpCheck", "MISMATCH_FRACTION", "op_sweep", "format_op_table"]


def _compare(got: np.ndarray, ref: np.ndarray, fmt) -> tuple[int, float]:
    """(mismatches, largest difference in ulps of fmt at max(|ref|, median of the non-zero
    |ref|)).  Both NaN counts as equal (payloads may differ); inf against a finite number, or
    a NaN against a number, is inf ulps; -0 against +0 is a mismatch of 0 ulps."""
    got, ref = np.asarray(got), np.asarray(ref)
    if got.shape != ref.shape:
        return int(max(got.size, ref.size)), math.inf
    if got.dtype != ref.dtype:
        got = got.astype(ref.dtype)
    uint = bits_view(ref)
    g = got.astype(np.float64)
    r = ref.astype(np.float64)
    same = (np.ascontiguousarray(got).view(uint) == np.ascontiguousarray(ref).view(uint)) | (np.isnan(g) & np.isnan(r))
    bad = int((~same).sum())
    if not bad:
        return 0, 0.0
    mag = np.abs(r[np.isfinite(r) & (r != 0)])
    typical = float(np.median(mag)) if mag.size else 0.0  # the median: robust to the huge edge-case values
    fin = np.isfinite(r)
    with np.errstate(invalid="ignore"):
        scale = np.maximum(np.abs(r), typical)
        d = np.where(np.isfinite(g) & fin, np.abs(g - r) / ulp(scale, fmt), np.inf)
    return bad, float(np.max(np.where(same, 0.0, d)))


@dataclass
class OpCheck:
    """One op in one format: its forward or one input's gradient, compared across backends."""

    op: str
    fmt: str
    part: str  # "forward" or "grad <input>"
    kind: str  # exact / libm / accumulate
    n: int
    mismatches: int
    max_ulp: float
    bound: float  # the stated bound on max_ulp (0 for exact)

    @property
    def ok(self) -> bool:
        if self.kind == "exact":
            return self.mismatches == 0
        if self.fmt != "float32" and self.mismatches > max(2, MISMATCH_FRACTION * self.n):
            return False  # a one-ulp step on many values is a rounding bug, not a different sum
        return self.max_ulp <= self.bound


MISMATCH_FRACTION = 0.02


def _bound(kind: str, fmt: str, k: int) -> float:
    if kind == "exact":
        return 0.0
    if fmt != "float32":
        return 1.0
    return 64.0 if kind == "libm" else 2.0 * k


def _special_values(rng, shape, f) -> np.ndarray:
    """N(0, 2) values with a sprinkling of the format's edge cases: subnormals and the
    subnormal/normal boundary, values near overflow, zeros, -0, +-inf and NaN."""
    x = rng.standard_normal(shape) * 2.0
    flat = x.reshape(-1)
    n = flat.size
    idx = rng.permutation(n)
    k = max(n // 10, 4)
    tiny = np.exp(rng.uniform(np.log(f.smallest_subnormal / 4), np.log(f.tiny * 4), k))
    flat[idx[:k]] = tiny * rng.choice([-1.0, 1.0], k)
    m = max(n // 50, 2)
    flat[idx[k:k + m]] = f.max * rng.uniform(0.5, 1.2, m) * rng.choice([-1.0, 1.0], m)
    flat[idx[k + m:k + m + 4]] = [0.0, -0.0, np.inf, np.nan][: min(4, n - k - m)]
    flat[idx[k + m + 4:k + m + 5]] = -np.inf
    return x


def _op_cases(quick: bool):
    """(name, kind, k, input kinds, shapes, fn).  Input kinds: "s" special values, "p" positive
    (|special|), "n" plain N(0,1) (for sums: no inf/NaN to wipe out a whole row)."""
    r, c = (16, 24) if quick else (96, 128)
    k = 32 if quick else 256
    cases = [
        ("add", "exact", 1, "ss", [(r, c)] * 2, lambda a, b: a + b),
        ("sub", "exact", 1, "ss", [(r, c)] * 2, lambda a, b: a - b),
        ("mul", "exact", 1, "ss", [(r, c)] * 2, lambda a, b: a * b),
        ("div", "exact", 1, "ss", [(r, c)] * 2, lambda a, b: a / b),
        ("neg", "exact", 1, "s", [(r, c)], lambda a: -a),
        ("abs", "exact", 1, "s", [(r, c)], lambda a: ops.abs(a)),
        ("relu", "exact", 1, "s", [(r, c)], lambda a: ops.relu(a)),
        ("sqrt", "exact", 1, "p", [(r, c)], lambda a: ops.sqrt(a)),
        ("max", "exact", 1, "s", [(r, c)], lambda a: ops.max(a, axis=1)),
        ("reshape+transpose", "exact", 1, "s", [(r, c)], lambda a: a.reshape(c, r).T),
        ("getitem", "exact", 1, "s", [(r, c)], lambda a: a[np.array([1, 0, 1, 3]), np.array([2, 2, 2, 0])]),
        ("concat", "exact", 1, "ss", [(r, c), (2, c)], lambda a, b: ops.concat([a, b])),
        *((f"cast to {g}", "exact", 1, "s", [(r, c)], lambda a, g=g: a.to(g)) for g in FORMATS),
        ("exp", "libm", 1, "s", [(r, c)], lambda a: ops.exp(a)),
        ("log", "libm", 1, "p", [(r, c)], lambda a: ops.log(a)),
        ("tanh", "libm", 1, "s", [(r, c)], lambda a: ops.tanh(a)),
        ("sigmoid", "libm", 1, "s", [(r, c)], lambda a: ops.sigmoid(a)),
        ("gelu", "libm", 1, "s", [(r, c)], lambda a: ops.gelu(a)),
        ("pow 2", "libm", 1, "s", [(r, c)], lambda a: a**2),
        ("pow 0.5", "libm", 1, "p", [(r, c)], lambda a: a**0.5),
        ("pow 3", "libm", 1, "s", [(r, c)], lambda a: a**3),
        ("softmax", "libm", c, "n", [(r, c)], lambda a: ops.softmax(a, axis=-1)),
        ("log_softmax", "libm", c, "n", [(r, c)], lambda a: ops.log_softmax(a, axis=-1)),
        ("matmul", "accumulate", k, "nn", [(r, k), (k, c)], lambda a, b: a @ b),
        ("linear", "accumulate", max(k, r), "nnn", [(r, k), (c, k), (c,)], lambda x, w, b: ops.linear(x, w, b)),
        ("sum axis 0", "accumulate", r, "n", [(r, c)], lambda a: ops.sum(a, axis=0)),
        ("mean", "accumulate", r * c, "n", [(r, c)], lambda a: ops.mean(a)),
        ("mse_loss", "accumulate", r * c, "nn", [(r, c)] * 2, lambda a, b: ops.mse_loss(a, b)),
    ]
    return cases


def _make_inputs(rng, kinds, shapes, f):
    out = []
    for kind, shape in zip(kinds, shapes):
        if kind == "n":
            out.append(rng.standard_normal(shape))
        else:
            x = _special_values(rng, shape, f)
            out.append(np.abs(x) if kind == "p" else x)
    return out


def _run_op(fn, arrays, fmt, be, seed_grad):
    ts = [tensor(a, fmt, requires_grad=True, backend=be) for a in arrays]
    with np.errstate(all="ignore"):
        out = fn(*ts)
        g = np.random.default_rng(seed_grad).standard_normal(out.shape)
        out.backward(tensor(g, out.fmt, backend=be))
    return out.numpy(), [t.grad.numpy() if t.grad is not None else None for t in ts]


def op_sweep(device, reference=None, *, quick: bool = False, formats=None, seed: int = 0) -> list[OpCheck]:
    """Run every op of :func:`_op_cases` in every format on ``device`` and ``reference``
    (default numpy) from the same inputs and output gradients; one :class:`OpCheck` per op,
    format and compared array."""
    ref_be = _backend.get_backend(reference)
    dev_be = _backend.get_backend(device)
    names = list(formats) if formats is not None else list(FORMATS)
    checks = []
    for ci, (name, kind, k, kinds, shapes, fn) in enumerate(_op_cases(quick)):
        for fi, fname in enumerate(names):
            f = get_format(fname)
            rng = np.random.default_rng([seed, ci, fi])
            arrays = _make_inputs(rng, kinds, shapes, f)
            ref_out, ref_grads = _run_op(fn, arrays, f, ref_be, [seed, ci, fi, 1])
            out, grads = _run_op(fn, arrays, f, dev_be, [seed, ci, fi, 1])
            bound = _bound(kind, f.name, k)
            bad, du = _compare(out, ref_out, get_format(ref_out.dtype))
            checks.append(OpCheck(name, f.name, "forward", kind, int(ref_out.size), bad, du, bound))
            for i, (g, rg) in enumerate(zip(grads, ref_grads)):
                if rg is None:
                    continue
                bad, du = _compare(g, rg, get_format(rg.dtype))
                checks.append(OpCheck(name, f.name, f"grad {'xyzw'[i]}", kind, int(rg.size), bad, du, bound))
    return checks


def format_op_table(checks: list[OpCheck]) -> str:
    """One row per op and format: values compared, mismatches, largest difference in ulps of the
    output format, the bound, and whether it held."""
    rows = {}
    for c in checks:
        key = (c.op, c.fmt)
        r = rows.setdefault(key, [c.op, c.fmt, c.kind, 0, 0, 0.0, c.bound, True])
        r[3] += c.n
        r[4] += c.mismatches
        r[5] = max(r[5], c.max_ulp)
        r[7] = r[7] and c.ok
    cols = ["op", "format", "kind", "values", "mismatches", "max ulps", "bound", "ok"]
    body = [[o, f, k, str(n), str(m), "inf" if u == math.inf else f"{u:.3g}",
             "bit-identical" if k == "exact" else f"{b:g} ulps", "yes" if ok else "NO"]
            for o, f, k, n, m, u, b, ok in rows.values()]
    return "\n".join(text_table(cols, body))
