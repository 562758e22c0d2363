"""``fpsim gpu-check``: does the cupy backend compute the numbers the numpy backend computes?

Three parts, each run on both backends from the same inputs and initial weights:

1. **ops** - every op of ``fpsim.ops`` (forward and the gradient of every input) in every
   format, on inputs that include subnormals, values near the overflow threshold, zeros, -0,
   inf and NaN.  The results are compared bit for bit, and where they differ, in ulps of the
   output format at the larger of |reference| and the median non-zero |reference| (so that a
   difference next to a cancellation is judged against the size of the numbers around it).  Stated bounds:

   - ``exact`` ops (casts, + - * /, neg, abs, relu, sqrt, max, shape ops, concat, indexing):
     float32 IEEE arithmetic then one rounding, so a correct device gives the same bits:
     0 mismatches allowed.
   - ``libm`` ops (exp, log, tanh, sigmoid, gelu, pow, softmax, log_softmax): CUDA's float32
     math library and numpy's differ by a few float32 ulps (CUDA documents expf 2 ulp, tanhf
     2 ulp, logf 1 ulp, powf 4 ulp): at most 64 float32 ulps for float32 results, at most
     1 ulp of the format for 16- and 8-bit results (a float32 difference that small moves a
     rounding by one step at most).
   - ``accumulate`` ops (matmul, linear, sum, mean, mse_loss): cuBLAS and CUDA reductions sum
     in another order than OpenBLAS / numpy; each float32 sum is within k*2**-24*sum|terms|
     of the exact one, so at most 2k float32 ulps apart (k = the number of terms), and at most
     1 ulp of the format for 16- and 8-bit results.

   For libm and accumulate ops with 16- or 8-bit results at most 1% of the values (or 2) may
   differ at all: a float32 difference of a few ulps moves a rounding to the neighbouring
   value only for values next to a rounding boundary; a broken rounding moves half of them.

2. **task** - the reference task (autoencoder 64-32-8-32-64, tanh, Adam) under fp32,
   fp16-dynamic and bf16-master for a reduced number of steps: the loss curves (stated
   tolerance: relative difference at most 1e-3 for fp32, 2e-2 for the 16-bit recipes - the
   matmul's float32 sums differ in order, and a different sum occasionally rounds to the
   neighbouring 16-bit value, which training then carries along), the skipped steps and loss
   scales, the per-op rounding-event counts of ``fpsim.monitor`` over the first steps (``n``
   must be equal; each event counter within 0.1% of n, +1), and the time per step on each.

3. **torch** (``--torch``) - PyTorch with ``autocast`` + ``GradScaler`` on the same network,
   data and initial weights (copied from fpsim's model) against fpsim's matching recipe:
   final loss, the largest relative difference of the loss curves, time per step.

Without a GPU (CuPy missing, or no CUDA device) the command says so and exits with status 0.
``--stand-in`` runs every check against a CPU stand-in for cupy instead (:class:`GuardBackend`:
the cupy backend's own code, with numpy arrays dressed as device arrays that refuse to mix
with numpy arrays and count every device -> host copy), so the code paths are exercised by
the tests; there every comparison must come out exact.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from . import backend as _backend
from .backend import CupyBackend
from .formats import FORMATS, f16_to_f32, f32_to_f16, get_format, ulp
from .textable import text_table

__all__ = ["GuardArray", "GuardXP", "GUARD", "GuardBackend", "HostArrayError", "OpCheck", "op_sweep",
           "TaskCheck", "task_check", "torch_compare", "gpu_check", "add_arguments", "main"]


# ============================================================================ the guard stand-in


class HostArrayError(TypeError):
    """A numpy array met device arrays inside an op: on a GPU that is a TypeError from CuPy or a
    silent host round trip."""


_NOT_IN_CUPY = frozenset({"errstate", "seterr", "geterr", "broadcast_shapes"})  # numpy-only: the guard hides them


class GuardXP:
    """numpy dressed as cupy: every array it makes is a :class:`GuardArray`.

    Functions take GuardArrays, Python numbers and numpy scalars, and refuse numpy arrays
    (:class:`HostArrayError`), as CuPy does; ``asarray`` is the one explicit way in (counted in
    ``uploads``).  Every device -> host copy (``get``, ``asnumpy``, ``tolist``, ``item``,
    ``bool()``, ``int()``, ``float()``) is counted in ``syncs``, with where it happened.
    Functions numpy has and CuPy lacks (``errstate``, ...) are hidden.
    """

    __name__ = "fpsim.gpu_check.GUARD"  # not "cupy": CupyBackend treats it as a stand-in

    def __init__(self):
        self.syncs = 0
        self.uploads = 0
        self.sync_sites: list[str] = []

    def reset(self) -> None:
        self.syncs = self.uploads = 0
        self.sync_sites.clear()

    def _synced(self, what: str) -> None:
        self.syncs += 1
        if len(self.sync_sites) < 200:
            f = sys._getframe(2)
            while f is not None and f.f_code.co_filename == __file__:
                f = f.f_back
            where = f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno}" if f is not None else "?"
            self.sync_sites.append(f"{what} at {where}")

    def __getattr__(self, name):
        if name.startswith("__") or name in _NOT_IN_CUPY:
            raise AttributeError(f"the cupy stand-in has no attribute {name!r} (CuPy has none either)")
        attr = getattr(np, name)
        if isinstance(attr, type) or not callable(attr):  # dtypes (float32 ...), constants
            return attr

        def call(*args, **kwargs):
            a, k = _unwrap(args, name), _unwrap(kwargs, name)
            with np.errstate(all="ignore"):  # a GPU raises no floating-point warnings
                return _wrap(attr(*a, **k))

        call.__name__ = name
        return call

    def asarray(self, x, dtype=None):
        if isinstance(x, GuardArray):
            return x if dtype is None else x.astype(dtype, copy=False)
        self.uploads += 1
        return GuardArray(np.array(x, dtype=dtype, copy=True))

    array = asarray

    def asnumpy(self, x):
        if isinstance(x, GuardArray):
            return x.get()
        return np.asarray(x)


GUARD = GuardXP()


def _wrap(r):
    if isinstance(r, np.ndarray):
        return GuardArray(r)
    if isinstance(r, np.generic):
        return GuardArray(np.asarray(r))
    if isinstance(r, tuple | list):
        return type(r)(_wrap(v) for v in r)
    return r


def _unwrap(x, where: str, index: bool = False):
    if isinstance(x, GuardArray):
        return x._a
    if isinstance(x, np.ndarray):
        if index:  # CuPy copies numpy index arrays to the device itself
            return x
        raise HostArrayError(
            f"a numpy array (shape {x.shape}, dtype {x.dtype}) reached {where} together with device arrays: "
            "CuPy would refuse it (TypeError) or it is a hidden host round trip. Move it with backend.asarray().")
    if isinstance(x, tuple | list):
        return type(x)(_unwrap(v, where, index) for v in x)
    if isinstance(x, dict):
        return {k: _unwrap(v, where, index) for k, v in x.items()}
    return x


def _ufunc_method(ufunc):
    def op(self, other):
        return _guard_ufunc(ufunc, self, other)

    def rop(self, other):
        return _guard_ufunc(ufunc, other, self)

    def iop(self, other):
        with np.errstate(all="ignore"):
            ufunc(self._a, _unwrap(other, f"in-place {ufunc.__name__}"), out=self._a)
        return self

    return op, rop, iop


def _guard_ufunc(ufunc, *args):
    with np.errstate(all="ignore"):
        return _wrap(ufunc(*_unwrap(args, f"operator {ufunc.__name__}")))


class GuardArray:
    """A numpy array that behaves like a cupy array (see :class:`GuardXP`)."""

    __slots__ = ("_a",)
    __array_priority__ = 1000
    _fpsim_xp = GUARD  # fpsim.monitor finds the array module here
    __hash__ = None

    def __init__(self, a: np.ndarray):
        self._a = a

    # -- the numpy protocols: numpy functions on guard arrays stay on the "device" -------------

    def __array__(self, dtype=None, copy=None):
        raise HostArrayError("implicit conversion of a device array to numpy (CuPy refuses it too): "
                             "use backend.to_numpy(x) / x.get()")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        where = f"numpy.{ufunc.__name__}"
        with np.errstate(all="ignore"):
            return _wrap(getattr(ufunc, method)(*_unwrap(inputs, where), **_unwrap(kwargs, where)))

    def __array_function__(self, func, types, args, kwargs):
        where = f"numpy.{func.__name__}"
        with np.errstate(all="ignore"):
            return _wrap(func(*_unwrap(args, where), **_unwrap(kwargs, where)))

    # -- device -> host: counted ------------------------------------------------------------

    def get(self) -> np.ndarray:
        GUARD._synced("get()")
        return self._a.copy()

    def tolist(self):
        GUARD._synced("tolist()")
        return self._a.tolist()

    def item(self):
        GUARD._synced("item()")
        return self._a.item()

    def __bool__(self):
        GUARD._synced("bool()")
        return bool(self._a)

    def __int__(self):
        GUARD._synced("int()")
        return int(self._a)

    def __float__(self):
        GUARD._synced("float()")
        return float(self._a)

    # -- the rest behaves as numpy's ----------------------------------------------------------

    def astype(self, dtype, copy=True):
        dt = np.dtype(dtype)
        a = self._a
        # numpy's own float16 casts are correct but ~25x slower on subnormals; these are exact too
        with np.errstate(all="ignore"):
            if dt == np.float16 and a.dtype == np.float32:
                return _wrap(f32_to_f16(a))
            if dt == np.float32 and a.dtype == np.float16:
                return _wrap(f16_to_f32(a))
            return _wrap(a.astype(dt, copy=copy))

    def __getattr__(self, name):
        if name.startswith("__"):  # __array_interface__, __array_struct__ ...: no back doors to the host
            raise AttributeError(f"a device array has no {name}")
        attr = getattr(self._a, name)
        if not callable(attr):
            return _wrap(attr)  # .T, .real: arrays; .shape, .dtype, .size: as they are

        def method(*args, **kwargs):
            with np.errstate(all="ignore"):
                return _wrap(attr(*_unwrap(args, f".{name}()"), **_unwrap(kwargs, f".{name}()")))

        return method

    def __getitem__(self, idx):
        return _wrap(self._a[_unwrap(idx, "indexing", index=True)])

    def __setitem__(self, idx, value):
        self._a[_unwrap(idx, "indexing", index=True)] = _unwrap(value, "item assignment")

    def __len__(self):
        return len(self._a)

    def __iter__(self):
        return (_wrap(v) for v in self._a)

    def __repr__(self):
        return f"GuardArray({self._a!r})"

    __add__, __radd__, __iadd__ = _ufunc_method(np.add)
    __sub__, __rsub__, __isub__ = _ufunc_method(np.subtract)
    __mul__, __rmul__, __imul__ = _ufunc_method(np.multiply)
    __truediv__, __rtruediv__, __itruediv__ = _ufunc_method(np.true_divide)
    __pow__, __rpow__, __ipow__ = _ufunc_method(np.power)
    __matmul__, __rmatmul__ = _ufunc_method(np.matmul)[:2]
    __and__, __rand__, __iand__ = _ufunc_method(np.bitwise_and)
    __or__, __ror__, __ior__ = _ufunc_method(np.bitwise_or)
    __xor__, __rxor__, __ixor__ = _ufunc_method(np.bitwise_xor)
    __lt__ = _ufunc_method(np.less)[0]
    __le__ = _ufunc_method(np.less_equal)[0]
    __gt__ = _ufunc_method(np.greater)[0]
    __ge__ = _ufunc_method(np.greater_equal)[0]
    __eq__ = _ufunc_method(np.equal)[0]  # type: ignore[assignment]
    __ne__ = _ufunc_method(np.not_equal)[0]  # type: ignore[assignment]

    def __neg__(self):
        return _guard_ufunc(np.negative, self)

    def __pos__(self):
        return self

    def __abs__(self):
        return _guard_ufunc(np.absolute, self)

    def __invert__(self):
        return _guard_ufunc(np.invert, self)


class GuardBackend(CupyBackend):
    """The cupy backend's code with :data:`GUARD` standing in for cupy, plus one check: every
    array handed to ``round`` / ``to_f32`` (every op's result, every gradient) must be a device
    array - a backward that builds its result with ``np.zeros`` instead of ``xp.zeros`` fails
    here, at the op that did it."""

    def __init__(self, native_bfloat16: bool = False):
        super().__init__(xp=GUARD, native_bfloat16=native_bfloat16)

    @staticmethod
    def _check(x, what: str):
        if not isinstance(x, GuardArray):
            raise HostArrayError(f"{what} got a {type(x).__module__}.{type(x).__name__}, not a device array: an op "
                                 "on a cupy tensor computed on the host")

    def round(self, x32, fmt):
        self._check(x32, f"rounding into {fmt.name}")
        return super().round(x32, fmt)

    def to_f32(self, x):
        self._check(x, "to_f32")
        return super().to_f32(x)

    def index_add(self, z, idx, g) -> None:
        np.add.at(_unwrap(z, "index_add"), _unwrap(idx, "index_add", index=True), _unwrap(g, "index_add"))

    def __repr__(self) -> str:
        return "<backend cupy (CPU stand-in)>"


# ============================================================================ comparing numbers


def _compare(got: np.ndarray, ref: np.ndarray, fmt) -> tuple[int, float]:
    """(mismatches, largest difference in ulps of fmt at max(|ref|, median of the non-zero
    |ref|)).  Both NaN counts as equal (payloads may differ); inf against a finite number, or
    a NaN against a number, is inf ulps; -0 against +0 is a mismatch of 0 ulps."""
    got, ref = np.asarray(got), np.asarray(ref)
    if got.shape != ref.shape:
        return int(max(got.size, ref.size)), math.inf
    if got.dtype != ref.dtype:
        got = got.astype(ref.dtype)
    uint = {1: np.uint8, 2: np.uint16, 4: np.uint32}[ref.dtype.itemsize]
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


# ============================================================================ 1. op sweep


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


MISMATCH_FRACTION = 0.01


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
    from . import ops

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
    from .tensor import tensor

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


# ============================================================================ 2. reference task


LOSS_RTOL = {"fp32": 1e-3}
LOSS_RTOL_LOW = 2e-2
COUNT_RTOL = 1e-3


@dataclass
class TaskCheck:
    """One recipe of the reference task on both backends."""

    recipe: str
    steps: int
    ref_losses: list
    dev_losses: list
    max_rel_diff: float
    rtol: float
    ref_step_s: float
    dev_step_s: float
    skipped_equal: bool
    scales_equal: bool
    count_keys: int = 0
    count_n_mismatch: int = 0  # keys whose n differ (must be 0)
    count_worst: list = field(default_factory=list)  # [(key, counter, ref, dev)] the largest differences
    count_ok: bool = True
    failure: str = ""

    @property
    def ok(self) -> bool:
        return self.max_rel_diff <= self.rtol and self.count_ok and not self.failure


def _max_rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return math.inf
    with np.errstate(invalid="ignore", divide="ignore"):
        d = np.abs(a - b) / np.maximum(np.abs(a), np.finfo(np.float64).tiny)
    d = np.where(np.isnan(a) & np.isnan(b), 0.0, d)
    return float(np.nanmax(np.where(np.isnan(d), np.inf, d))) if d.size else 0.0


def _compare_counts(ref: dict, dev: dict):
    """(keys, keys whose n differ, worst differences, ok) for two Monitor.counts dicts."""
    from .monitor import COUNTERS

    worst = []
    n_bad = 0
    ok = set(ref) == set(dev)
    for key in sorted(set(ref) | set(dev)):
        a, b = ref.get(key), dev.get(key)
        if a is None or b is None:
            worst.append((key, "missing", a is not None, b is not None))
            continue
        if a[0] != b[0]:
            n_bad += 1
            ok = False
        for name, x, y in zip(COUNTERS[1:], a[1:], b[1:]):
            if x != y:
                worst.append((key, name, x, y))
                if abs(x - y) > COUNT_RTOL * a[0] + 1:
                    ok = False
    worst.sort(key=lambda w: -abs(w[2] - w[3]) if isinstance(w[2], int) else 0)
    return len(ref), n_bad, worst[:5], ok


def task_check(device, recipes=("fp32", "fp16-dynamic", "bf16-master"), task=None, *, steps: int = 50,
               monitor_steps: int = 3, seed: int = 0, reference=None, progress=None) -> list[TaskCheck]:
    """Train the reference task under each recipe on ``reference`` (numpy) and ``device`` from
    the same initial weights; compare loss curves, skipped steps, loss scales, rounding-event
    counts (``fpsim.monitor`` over ``monitor_steps`` steps) and time per step.  The device run
    is preceded by a one-step warm-up (CuPy compiles its kernels on first use)."""
    from .experiments import ReferenceTask, get_recipe, run_recipe
    from .monitor import monitor

    task = task or ReferenceTask()
    ref_be = _backend.get_backend(reference)
    dev_be = _backend.get_backend(device)
    out = []
    for name in recipes:
        r = get_recipe(name)
        if progress:
            progress(f"task {r.name}")
        run_recipe(r, task, steps=1, seed=seed, measure_at=(), backend=dev_be)  # warm-up
        a = run_recipe(r, task, steps=steps, seed=seed, measure_at=(), backend=ref_be)
        b = run_recipe(r, task, steps=steps, seed=seed, measure_at=(), backend=dev_be)
        with monitor() as ma:
            run_recipe(r, task, steps=monitor_steps, seed=seed, measure_at=(), backend=ref_be)
        with monitor() as mb:
            run_recipe(r, task, steps=monitor_steps, seed=seed, measure_at=(), backend=dev_be)
        keys, n_bad, worst, cok = _compare_counts(ma.counts, mb.counts)
        rtol = LOSS_RTOL.get(r.name, LOSS_RTOL_LOW)
        out.append(TaskCheck(
            recipe=r.name, steps=steps, ref_losses=a.losses, dev_losses=b.losses,
            max_rel_diff=_max_rel(a.losses, b.losses), rtol=rtol,
            ref_step_s=a.seconds / max(len(a.losses), 1), dev_step_s=b.seconds / max(len(b.losses), 1),
            skipped_equal=a.skipped == b.skipped, scales_equal=a.scales == b.scales,
            count_keys=keys, count_n_mismatch=n_bad, count_worst=worst, count_ok=cok,
            # diverging in the same way on both is agreement; diverging on one only is not
            failure="" if a.failure == b.failure else f"numpy: {a.failure or 'trained'}; device: {b.failure or 'trained'}"))
    return out


def format_task_table(checks: list[TaskCheck], ref_name: str, dev_name: str) -> str:
    cols = ["recipe", "steps", f"final loss {ref_name}", f"final loss {dev_name}", "max rel. diff", "tolerance",
            "skips/scales equal", "monitor keys (n differ)", f"step {ref_name}", f"step {dev_name}", "ok"]
    body = []
    for c in checks:
        body.append([c.recipe, str(c.steps), f"{c.ref_losses[-1]:.6e}" if c.ref_losses else "-",
                     f"{c.dev_losses[-1]:.6e}" if c.dev_losses else "-", f"{c.max_rel_diff:.2e}", f"{c.rtol:g}",
                     f"{'yes' if c.skipped_equal else 'NO'}/{'yes' if c.scales_equal else 'NO'}",
                     f"{c.count_keys} ({c.count_n_mismatch})", f"{1e3 * c.ref_step_s:.1f} ms",
                     f"{1e3 * c.dev_step_s:.1f} ms", "yes" if c.ok else "NO"])
    lines = text_table(cols, body)
    for c in checks:
        for key, counter, x, y in c.count_worst:
            lines.append(f"  {c.recipe}: monitor {'/'.join(s or '-' for s in key)} {counter}: {ref_name} {x}, "
                         f"{dev_name} {y}")
        if c.failure:
            lines.append(f"  {c.recipe}: {c.failure}")
    return "\n".join(lines)


# ============================================================================ 3. PyTorch


_TORCH_RECIPE = {"float32": "fp32", "float16": "fp16-amp"}


def _fpsim_recipe_for(dtype: str):
    from .experiments import Recipe, get_recipe

    if dtype == "bfloat16":  # PyTorch's bfloat16 AMP needs no scaler
        return Recipe("bf16-amp", "float32", autocast="bfloat16",
                      description="float32 params, autocast bfloat16 matmuls, no scaler")
    return get_recipe(_TORCH_RECIPE[dtype])


def torch_compare(task=None, *, steps: int | None = None, seed: int = 0, device: str = "cuda",
                  dtype: str = "float16", backend=None, lr: float | None = None) -> dict:
    """Train the reference task with PyTorch on ``device`` and with fpsim on ``backend``, from
    the same data and initial weights (copied from fpsim's float32 model), and compare.

    ``dtype``: ``"float16"`` - PyTorch ``autocast(device, float16)`` + ``GradScaler`` (2**16,
    growth interval 100) against fpsim's ``fp16-amp``; ``"bfloat16"`` - autocast bfloat16, no
    scaler, against the same recipe in bfloat16 (PyTorch's CPU autocast runs bfloat16);
    ``"float32"`` - plain float32 against ``fp32``.  Both compute the loss in float32 from the
    float32-cast prediction, outside autocast, and use Adam with the task's learning rate.
    Returns the two loss curves, their largest relative difference, final losses and the
    median time per step of each (PyTorch after 3 warm-up steps, synchronised every step by
    ``loss.item()``; fpsim after a one-step warm-up run).
    """
    import torch

    from .experiments import ReferenceTask, run_recipe

    if dtype not in ("float16", "bfloat16", "float32"):
        raise ValueError(f"dtype must be float16, bfloat16 or float32, got {dtype!r}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError("PyTorch sees no CUDA device here (torch.cuda.is_available() is False)")
    task = task or ReferenceTask()
    steps = task.steps if steps is None else int(steps)
    lr = task.lr if lr is None else lr
    x_np = task.data().astype(np.float32)
    fp_model = task.model(seed)
    sizes = [task.dim, *task.hidden, task.dim]
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(torch.nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(torch.nn.Tanh())
    model = torch.nn.Sequential(*layers)
    state = {k: torch.from_numpy(v.astype(np.float32)) for k, v in fp_model.state_dict().items()}
    model.load_state_dict(state)  # fpsim's Sequential names its layers 0, 2, 4, 6 as PyTorch does
    model = model.to(device)
    x = torch.from_numpy(x_np).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    amp_dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16}.get(dtype)
    dev_type = torch.device(device).type
    scaler = (torch.amp.GradScaler(dev_type, init_scale=2.0**16, growth_interval=100)
              if dtype == "float16" else None)
    losses, times = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev_type, dtype=amp_dtype, enabled=amp_dtype is not None):
            pred = model(x)
        loss = torch.nn.functional.mse_loss(pred.float(), x)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
    be = _backend.get_backend(backend)
    recipe = _fpsim_recipe_for(dtype)
    run_recipe(recipe, task, steps=1, seed=seed, lr=lr, measure_at=(), backend=be)  # warm-up
    res = run_recipe(recipe, task, steps=steps, seed=seed, lr=lr, measure_at=(), backend=be)
    rtol = LOSS_RTOL["fp32"] if dtype == "float32" else 5e-2
    rel = _max_rel(losses, res.losses)
    return {
        "device": device, "dtype": dtype, "torch": torch.__version__, "fpsim_backend": repr(be),
        "fpsim_recipe": recipe.name, "steps": steps, "torch_losses": losses, "fpsim_losses": res.losses,
        "max_rel_diff": rel, "rtol": rtol, "ok": rel <= rtol and not res.failure,
        "torch_final": losses[-1], "fpsim_final": res.final_loss, "fpsim_failure": res.failure,
        "torch_step_s": float(np.median(times[3:] if len(times) > 3 else times)),
        "fpsim_step_s": res.seconds / max(len(res.losses), 1),
    }


def format_torch(r: dict) -> str:
    return "\n".join([
        f"PyTorch {r['torch']} on {r['device']} ({'autocast ' + r['dtype'] if r['dtype'] != 'float32' else 'float32'}"
        f"{' + GradScaler' if r['dtype'] == 'float16' else ''}) vs fpsim {r['fpsim_recipe']} on {r['fpsim_backend']}, "
        f"{r['steps']} steps",
        f"  final loss: PyTorch {r['torch_final']:.6e}, fpsim {r['fpsim_final']:.6e}"
        + (f" ({r['fpsim_failure']})" if r["fpsim_failure"] else ""),
        f"  largest relative difference of the loss curves: {r['max_rel_diff']:.2e} (tolerance {r['rtol']:g}): "
        f"{'ok' if r['ok'] else 'NOT OK'}",
        f"  time per step: PyTorch {1e3 * r['torch_step_s']:.2f} ms, fpsim {1e3 * r['fpsim_step_s']:.2f} ms "
        f"({r['fpsim_step_s'] / r['torch_step_s']:.1f}x)",
    ])


# ============================================================================ the command


def device_description(be) -> str:
    """Which device the cupy backend runs on, in words (versions, GPU name, TF32, bfloat16)."""
    if be.stand_in:
        return f"CPU stand-in for cupy ({type(be).__name__}, numpy {np.__version__})"
    cp = be.xp
    try:
        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        gpu = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    except Exception as e:  # the description must not stop the check
        gpu = f"? ({e})"
    tf32 = os.environ.get("CUPY_TF32", "0")
    return (f"CuPy {cp.__version__} (CUDA runtime {cp.cuda.runtime.runtimeGetVersion()}) on {gpu}; "
            f"CUPY_TF32={tf32}{' - TF32 matmuls: float32 results will NOT match' if tf32 != '0' else ''}; "
            f"bfloat16 stored as {'ml_dtypes.bfloat16' if be.native_bfloat16 else 'float32'}")


def gpu_check(*, stand_in: bool = False, quick: bool = False, steps: int | None = None, recipes=None,
              ops: bool = True, task: bool = True, torch: bool = False, torch_device: str = "cuda",
              torch_dtype: str = "float16", seed: int = 0, out=None) -> tuple[int, dict]:
    """Run the checks and print the report to ``out`` (default stdout).  Returns (exit status,
    results): 0 when every check held or there is no GPU (said plainly), 1 when a check failed."""
    out = out or sys.stdout

    def say(*a):
        print(*a, file=out, flush=True)

    results: dict = {"python": platform.python_version(), "numpy": np.__version__}
    if stand_in:
        dev = GuardBackend()
    elif "cupy" not in _backend.available():
        why = ("CuPy is not installed" if not _importable("cupy") else "CuPy sees no CUDA device")
        say(f"fpsim gpu-check: NO GPU HERE - {why}; fpsim.backend.available() = {_backend.available()}.")
        say("Nothing was compared and nothing was run on a GPU.  `fpsim gpu-check --stand-in` runs the same checks "
            "against the CPU stand-in for cupy (the code paths, not the hardware).")
        results["skipped"] = why
        return 0, results
    else:
        dev = _backend.get_backend("cupy")
    results["device"] = device_description(dev)
    say(f"fpsim gpu-check: numpy backend vs {results['device']}")
    say(f"python {results['python']}, numpy {results['numpy']}")
    from .experiments import ReferenceTask

    ref_task = ReferenceTask(n=512) if quick else ReferenceTask()
    n_steps = steps if steps is not None else (3 if quick else 50)
    failed = []
    if ops:
        say("\n== ops: every op and format, forward and gradients, numpy vs device ==")
        checks = op_sweep(dev, quick=quick, seed=seed)
        say(format_op_table(checks))
        bad = [c for c in checks if not c.ok]
        exact = [c for c in checks if c.kind == "exact"]
        say(f"exact ops: {sum(c.mismatches for c in exact)} mismatching values of {sum(c.n for c in exact)}; "
            f"libm / accumulate ops: largest difference {max((c.max_ulp for c in checks if c.kind != 'exact'), default=0):.3g} "
            f"ulps of the output format")
        say("bounds: exact - bit-identical; libm - float32 results within 64 ulps, 16/8-bit results within 1 ulp; "
            "accumulate - float32 within 2k ulps (k terms), 16/8-bit within 1 ulp; for libm and accumulate at most "
            f"{MISMATCH_FRACTION:.0%} of 16/8-bit values may differ at all.  ulps of the output format at "
            "max(|numpy value|, median non-zero |numpy value|).")
        results["ops"] = [asdict(c) | {"ok": c.ok} for c in checks]
        if bad:
            failed.append(f"ops: {len(bad)} comparisons outside their bound, e.g. "
                          + ", ".join(f"{c.op} {c.fmt} {c.part}" for c in bad[:4]))
    if task:
        say(f"\n== reference task: {ref_task.n} x {ref_task.dim}, {n_steps} steps per recipe, numpy vs device ==")
        tc = task_check(dev, tuple(recipes or ("fp32", "fp16-dynamic", "bf16-master")), ref_task, steps=n_steps,
                        monitor_steps=2 if quick else 3, seed=seed)
        say(format_task_table(tc, "numpy", "device"))
        say(f"tolerance: the largest relative difference of the loss curves; monitor: rounding events of the first "
            f"{2 if quick else 3} steps per (direction, module, op, target, format) - n must be equal, every event "
            f"count within {COUNT_RTOL:.1%} of n (+1).  Step times include the loss.item() of every step.")
        results["task"] = [asdict(c) | {"ok": c.ok} for c in tc]
        failed += [f"task {c.recipe}" for c in tc if not c.ok]
    if torch:
        say(f"\n== PyTorch ({torch_device}, {torch_dtype}) vs fpsim on the reference task ==")
        if not _importable("torch"):
            say("PyTorch is not installed: skipped.")
        else:
            try:
                tr = torch_compare(ref_task, steps=n_steps, seed=seed, device=torch_device, dtype=torch_dtype,
                                   backend=dev)
            except RuntimeError as e:
                say(f"skipped: {e}")
            else:
                say(format_torch(tr))
                results["torch"] = tr
                if not tr["ok"]:
                    failed.append("torch")
    say("\n== summary ==")
    if failed:
        say("FAILED: " + "; ".join(failed))
    else:
        say("all checks held" + (" (CPU stand-in: the code paths, not a GPU)" if stand_in else ""))
    results["failed"] = failed
    return (1 if failed else 0), results


def _importable(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def add_arguments(p) -> None:
    p.add_argument("--stand-in", action="store_true",
                   help="compare against the CPU stand-in for cupy instead of a GPU (exercises the code paths)")
    p.add_argument("--quick", action="store_true", help="small sizes and 3 steps: seconds")
    p.add_argument("--steps", type=int, default=None, help="training steps per recipe (default 50; --quick 3)")
    p.add_argument("--recipes", nargs="+", default=None, metavar="RECIPE",
                   help="recipes of the task check (default fp32 fp16-dynamic bf16-master)")
    p.add_argument("--seed", type=int, default=0, help="seed of inputs and initial weights (default 0)")
    p.add_argument("--no-ops", action="store_true", help="skip the op-by-op sweep")
    p.add_argument("--no-task", action="store_true", help="skip the reference-task comparison")
    p.add_argument("--torch", action="store_true",
                   help="also train the task with PyTorch autocast (+ GradScaler for float16) and compare")
    p.add_argument("--torch-device", default="cuda", help="PyTorch device for --torch (default cuda)")
    p.add_argument("--torch-dtype", default="float16", choices=["float16", "bfloat16", "float32"],
                   help="autocast dtype for --torch (default float16: GradScaler; bfloat16: none)")
    p.add_argument("--json", default=None, metavar="PATH", help="also write every number to this JSON file")


def main(args) -> int:
    if args.steps is not None and args.steps < 1:
        raise ValueError(f"--steps must be >= 1, got {args.steps}")
    if args.recipes:
        from .experiments import get_recipe

        for r in args.recipes:
            get_recipe(r)  # unknown names: a clear ValueError before anything runs
    rc, results = gpu_check(stand_in=args.stand_in, quick=args.quick, steps=args.steps, recipes=args.recipes,
                            ops=not args.no_ops, task=not args.no_task, torch=args.torch,
                            torch_device=args.torch_device, torch_dtype=args.torch_dtype, seed=args.seed)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1, default=str, allow_nan=True)
    return rc
