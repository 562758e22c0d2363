"""A strict CPU stand-in for CuPy, for the tests: numpy arrays dressed as device arrays.

:class:`GuardBackend` is the cupy backend's own code (``fpsim.backend.CupyBackend``) with
:data:`GUARD` standing in for the ``cupy`` module.  Its arrays (:class:`GuardArray`) refuse to
mix with numpy arrays (:class:`HostArrayError`, where CuPy raises a TypeError or a hidden host
round trip would happen), refuse implicit conversion to numpy, and count every device -> host
copy (``GUARD.syncs``, with where each happened).  The tests run ops, training steps and the
monitor through it and require the numpy backend's numbers bit for bit.  For that, the stand-in's
"cuBLAS" and "CUDA math" - matmul, the reductions, exp, log, tanh, pow - compute fpsim's own
definitions (fpsim.numerics: exact sums, correctly rounded functions), where a real GPU uses its
libraries' orders and implementations (``fpsim gpu-check`` measures that difference).

The package itself does not ship this: ``fpsim gpu-check --stand-in`` runs against the plain
numpy stand-in ``CupyBackend(xp=numpy)``.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from fpsim import numerics
from fpsim.backend import CupyBackend, _grid
from fpsim.formats.kernels import f16_to_f32, f32_to_f16

__all__ = ["GuardArray", "GuardXP", "GUARD", "GuardBackend", "HostArrayError"]


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

    __name__ = "support.cupy_standin.GUARD"  # not "cupy": CupyBackend treats it as a stand-in

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

    # the stand-in's libraries compute fpsim's definitions (see the module docstring)

    def matmul(self, a32, b32, fa=None, fb=None):
        return _wrap(numerics.matmul_f32(_unwrap(a32, "matmul"), _unwrap(b32, "matmul"), _grid(fa), _grid(fb)))

    def sum(self, x32, axis=None, keepdims: bool = False):
        return _wrap(numerics.sum_f32(_unwrap(x32, "sum"), axis, keepdims))

    def mean(self, x32, axis=None, keepdims: bool = False):
        return _wrap(numerics.mean_f32(_unwrap(x32, "mean"), axis, keepdims))

    def exp(self, x32):
        return _wrap(numerics.exp_f32(_unwrap(x32, "exp")))

    def log(self, x32):
        return _wrap(numerics.log_f32(_unwrap(x32, "log")))

    def tanh(self, x32):
        return _wrap(numerics.tanh_f32(_unwrap(x32, "tanh")))

    def pow(self, x32, p):
        return _wrap(numerics.pow_f32(_unwrap(x32, "pow"), float(np.float32(p))))

    def __repr__(self) -> str:
        return "<backend cupy (CPU stand-in)>"
