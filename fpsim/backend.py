"""Array backends: the few functions that really differ between numpy and cupy.

A backend holds its array module (``xp``) and knows how to store a float32 result in a
format - the single rounding every op performs.  ``ops.py`` reaches arrays only through
``tensor.backend.xp`` and these functions, so the same engine runs on either.

On numpy, storage is the real low-precision dtype (``np.float16``, ``ml_dtypes.bfloat16``,
fp8), and rounding is numpy's / ml_dtypes' own float32 -> low cast, which is correct
round-to-nearest-even from float32 (the tests check every case against exact rationals).

On cupy, float16 is native (cuBLAS fp16 GEMMs accumulate in float32).  CuPy has no bfloat16
or fp8 dtype, so those formats are stored in float32 arrays holding exactly the format's
values, rounded on the device by one elementwise kernel: the same numbers either way.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod

import numpy as np

from .formats import Format, f16_to_f32, f32_to_f16, get_format

__all__ = ["Backend", "NumpyBackend", "CupyBackend", "get_backend", "available", "BACKENDS"]


class Backend(ABC):
    """Interface: ``name``, ``xp``, ``available()``, and the functions that differ."""

    name: str = "?"
    xp = None

    @abstractmethod
    def available(self) -> bool:
        """Whether this backend can run here."""

    @abstractmethod
    def storage_dtype(self, fmt: Format):
        """The array dtype that holds fmt's values on this backend."""

    @abstractmethod
    def round(self, x32, fmt: Format):
        """Round a float32 array once (to nearest, ties to even) into fmt's storage."""

    def to_f32(self, x):
        """The exact float32 values of a stored array (a no-op for float32)."""
        return x.astype(self.xp.float32, copy=False)

    def asarray(self, x, dtype=None):
        return self.xp.asarray(x, dtype=dtype)

    def to_numpy(self, x) -> np.ndarray:
        return np.asarray(x)

    def index_add(self, z, idx, g) -> None:
        """z[idx] += g, adding where an index repeats (numpy's ``add.at``)."""
        self.xp.add.at(z, idx, g)

    def matmul(self, a32, b32):
        """float32 x float32 -> float32, accumulating in float32 (BLAS sgemm)."""
        return self.xp.matmul(a32, b32)

    def __repr__(self) -> str:
        return f"<backend {self.name}>"


class NumpyBackend(Backend):
    name = "numpy"

    def __init__(self):
        self.xp = np

    def available(self) -> bool:
        return True

    def storage_dtype(self, fmt: Format):
        return fmt.dtype

    def round(self, x32, fmt: Format):
        if fmt.dtype == np.float32:
            return x32.astype(np.float32, copy=False)
        with np.errstate(over="ignore", invalid="ignore"):
            if fmt.name == "float16":
                return f32_to_f16(x32)
            return x32.astype(fmt.dtype)

    def to_f32(self, x):
        if x.dtype == np.float16:
            return f16_to_f32(x)
        return x.astype(np.float32, copy=False)


_RNE_KERNEL_SRC = r"""
// Round a float32 to nearest-even on a grid with `man` mantissa bits and smallest normal
// exponent `emin`; overflow to inf, or to NaN when the format has no inf.
float a = fabsf(x);
if (isnan(x)) { y = x; }
else if (isinf(x)) { y = has_inf ? x : NAN; }  // e4m3fn has no inf
else {                                         // every finite float32, up to FLT_MAX, is rounded
    int e; frexpf(a, &e);
    int k = max(e - 1, emin);
    float q = ldexpf(1.0f, k - man);
    float r = rintf(a / q) * q;                // a / q is exact: q is a power of two
    if (r > maxval) r = has_inf ? INFINITY : NAN;
    y = copysignf(r, x);
}
"""


class CupyBackend(Backend):
    """CuPy on an NVIDIA GPU.  ``CupyBackend(xp=numpy)`` runs the same code paths on the
    CPU, so a mistake in them is caught without a GPU (the tests do this)."""

    name = "cupy"

    def __init__(self, xp=None):
        self._xp = xp
        self._kernel = None

    @property
    def xp(self):
        if self._xp is None:
            self._xp = importlib.import_module("cupy")
        return self._xp

    @property
    def stand_in(self) -> bool:
        return self._xp is np

    def available(self) -> bool:
        if self._xp is np:
            return True
        try:
            cp = importlib.import_module("cupy")
            return cp.cuda.runtime.getDeviceCount() > 0
        except Exception:  # no cupy, no driver, no device: all mean "not available"
            return False

    def storage_dtype(self, fmt: Format):
        if fmt.name in ("float32", "float16"):
            return fmt.dtype
        return self.xp.float32  # bfloat16 / fp8: float32 holding exactly the format's values

    def round(self, x32, fmt: Format):
        xp = self.xp
        if fmt.name == "float32":
            return x32.astype(xp.float32, copy=False)
        if fmt.name == "float16":
            return x32.astype(xp.float16)  # hardware cvt.rn.f16.f32
        if self.stand_in:
            from .formats import round_to

            return round_to(x32.astype(np.float32, copy=False), fmt)
        if self._kernel is None:
            self._kernel = xp.ElementwiseKernel(
                "float32 x, int32 man, int32 emin, float32 maxval, bool has_inf", "float32 y",
                _RNE_KERNEL_SRC, "fpsim_round_rne")
        return self._kernel(x32.astype(xp.float32, copy=False), fmt.mantissa_bits, fmt.emin,
                            np.float32(fmt.max), fmt.has_inf)

    def to_numpy(self, x) -> np.ndarray:
        return np.asarray(x) if self.stand_in else self.xp.asnumpy(x)

    def index_add(self, z, idx, g) -> None:
        if self.stand_in:
            np.add.at(z, idx, g)
        else:
            importlib.import_module("cupyx").scatter_add(z, idx, g)


BACKENDS: dict[str, Backend] = {"numpy": NumpyBackend(), "cupy": CupyBackend()}


def get_backend(backend=None) -> Backend:
    """A backend by name (``numpy``, ``cupy``) or the object itself; None means numpy."""
    if backend is None:
        return BACKENDS["numpy"]
    if isinstance(backend, Backend):
        return backend
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")
    be = BACKENDS[backend]
    if not be.available():
        raise RuntimeError(f"backend {backend!r} is not available here (is CuPy installed, with a GPU?)")
    return be


def available() -> list[str]:
    """Names of the backends that work on this machine."""
    return [n for n, b in BACKENDS.items() if b.available()]


def storage_of(fmt, backend=None):
    return get_backend(backend).storage_dtype(get_format(fmt))
