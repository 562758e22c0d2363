"""Array backends: the few functions that really differ between numpy and cupy.

A backend holds its array module (``xp``) and knows how to store a float32 result in a
format - the single rounding every op performs.  ``ops.py`` reaches arrays only through
``tensor.backend.xp`` and these functions, so the same engine runs on either.

On numpy, storage is the real low-precision dtype (``np.float16``, ``ml_dtypes.bfloat16``,
fp8), and rounding is numpy's / ml_dtypes' own float32 -> low cast, which is correct
round-to-nearest-even from float32 (the tests check every case against exact rationals).

On cupy, float16 is native (CuPy's float32 -> float16 cast rounds to nearest even).  bfloat16
and fp8 are rounded on the device by one elementwise kernel (:func:`rne_round`'s algorithm) and
stored in float32 arrays holding exactly the format's values - or, for bfloat16, in
``ml_dtypes.bfloat16`` arrays where the installed CuPy supports them.  Matmul multiplies the
float32-widened inputs with cuBLAS sgemm (float32 products, float32 accumulation) and the
engine rounds once, as on numpy: the same numbers, up to the order of the float32 sums.
"""

from __future__ import annotations

import importlib
import os
from abc import ABC, abstractmethod

import ml_dtypes
import numpy as np

from .formats import F16_BITS_MIN_SIZE, Format, f16_to_f32, f32_to_f16, get_format

__all__ = ["Backend", "NumpyBackend", "CupyBackend", "get_backend", "available", "BACKENDS", "rne_round"]


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
        if fmt.name == "float16" and x32.dtype == np.float32 and x32.size >= F16_BITS_MIN_SIZE:
            return f32_to_f16(x32)  # integer passes: no floating-point warnings to silence
        with np.errstate(over="ignore", invalid="ignore"):
            if fmt.name == "float16":
                return f32_to_f16(x32)
            return x32.astype(fmt.dtype)

    def to_f32(self, x):
        if x.dtype == np.float16:
            return f16_to_f32(x)
        return x.astype(np.float32, copy=False)


def rne_round(x32, fmt: Format, xp=np):
    """Round float32 values to the nearest value of ``fmt`` (ties to even); float32 in, float32
    out, holding exactly the format's values.  The device kernel's algorithm, written with
    array operations that numpy and cupy both have, so the CPU tests check the algorithm
    itself (against ml_dtypes) and the stand-in backends run it.

    Line by line as ``formats._round_exact`` (which does it in float64): ``frexp`` finds the
    binade, clamped below at ``emin`` so subnormals share the smallest normal binade's ulp;
    ``ldexp`` scales one ulp to the units place, where ``rint`` rounds to nearest even; ``ldexp``
    scales back.  Both scalings are exact in float32: the scaled value is below 2**(man+1), and
    every format's smallest subnormal (>= 2**-133) is a float32 normal-or-subnormal number.
    Above ``max`` (the rounding with an unbounded exponent went past it) the result is inf, or
    NaN in a format without inf (e4m3fn: 464 ties to 448, 465 goes to NaN).  inf stays inf
    (NaN without inf), NaN stays NaN, -0 stays -0.
    """
    man, emin = fmt.mantissa_bits, fmt.emin
    with np.errstate(all="ignore"):  # overflow in the scaling back is an inf that the test below replaces
        a = xp.abs(x32)
        _, e = xp.frexp(a)  # a = m * 2**e, m in [0.5, 1); e = 0 for 0, inf, NaN (replaced below)
        k = xp.maximum(e - 1, emin)  # exponent of a's binade, clamped to the format's subnormal range
        r = xp.ldexp(xp.rint(xp.ldexp(a, man - k)), k - man)
        over = xp.float32(np.inf) if fmt.has_inf else xp.float32(np.nan)
        r = xp.where(r > xp.float32(fmt.max), over, r)
        r = xp.copysign(r, x32)
        r = xp.where(xp.isinf(x32), x32 if fmt.has_inf else xp.float32(np.nan), r)
        return xp.where(xp.isnan(x32), x32, r).astype(xp.float32, copy=False)


# The same algorithm as rne_round, as one CUDA elementwise kernel (one pass over memory).
# ldexpf / frexpf / rintf / copysignf are exact in CUDA (0 ulp); the kernel is compiled with
# --ftz=false so float32 subnormals (inputs such as 2**-140, results of e.g. bfloat16
# subnormals) are kept, and --fmad=false (there is no a*b+c here, but nothing may be fused).
_RNE_KERNEL_SRC = r"""
if (isnan(x)) {
    y = x;
} else if (isinf(x)) {
    y = has_inf ? x : __int_as_float(0x7fc00000);      // e4m3fn has no inf: NaN
} else {
    float a = fabsf(x);
    int e;
    frexpf(a, &e);                                        // a = m * 2^e, m in [0.5, 1); e = 0 for 0
    int k = (e - 1 > emin) ? e - 1 : emin;                // binade exponent, clamped to the subnormal range
    float r = ldexpf(rintf(ldexpf(a, man - k)), k - man); // exact scalings around one rintf (ties to even)
    if (r > maxval) r = has_inf ? __int_as_float(0x7f800000) : __int_as_float(0x7fc00000);
    y = copysignf(r, x);
}
"""


def _probe_native_bfloat16(cp) -> bool:
    """Whether this CuPy stores ml_dtypes.bfloat16 arrays (CuPy >= 14 with ml_dtypes): a few
    exact bfloat16 values must survive the casts and views the engine uses."""
    if os.environ.get("FPSIM_CUPY_BFLOAT16", "").strip() == "0":
        return False
    try:
        bf16 = np.dtype(ml_dtypes.bfloat16)
        vals = np.array([1.0, -2.5, 2.0**-133, 3.3895313892515355e38, 0.0, -0.0], np.float32)
        d = cp.asarray(vals).astype(bf16)
        back = d.astype(cp.float32)
        view = cp.broadcast_to(d[None], (2, vals.size)).transpose().reshape(-1).copy()
        picked = d[cp.asarray([1, 0, 1])].astype(cp.float32)
        ok = (bool((back == cp.asarray(vals)).all()) and view.dtype == bf16 and cp.asnumpy(d).dtype == bf16
              and int((d == 0).sum()) == 2 and cp.asnumpy(picked).tolist() == [-2.5, 1.0, -2.5])
        return ok and np.array_equal(cp.asnumpy(back).view(np.uint32), vals.view(np.uint32))
    except Exception:  # this CuPy has no usable bfloat16 (a type error, an unsupported op, a compile error)
        return False


class CupyBackend(Backend):
    """CuPy on an NVIDIA GPU.

    - float32: cupy float32 arrays.  float16: cupy float16 arrays; rounding is CuPy's
      float32 -> float16 ``astype`` (the hardware's round-to-nearest-even conversion).
    - bfloat16: ``ml_dtypes.bfloat16`` arrays where this CuPy supports them
      (``native_bfloat16``), else float32 arrays holding exactly bfloat16 values.  Either way
      the rounding is :func:`rne_round`'s algorithm, on the device (one kernel); the native
      cast afterwards is exact.  fp8: float32 arrays holding exactly fp8 values (CuPy has no
      fp8 dtype), rounded the same way.
    - matmul: ``cupy.matmul`` of the float32-widened inputs (cuBLAS sgemm, FP32 compute, no
      TF32 unless CUPY_TF32=1 is set - don't), then the engine's one rounding.  Not cuBLAS's
      float16 GEMM: that rounds inside the library, so a monitor could not see the exact
      float32 sum, the bias of ``linear`` would be added after a first rounding, and the
      products would be the same anyway (float16 x float16 is exact in float32).

    ``CupyBackend(xp=numpy)`` (or another stand-in module, see ``fpsim.gpu_check``) runs the
    same code paths on the CPU, so a mistake in them is caught without a GPU; there the
    rounding is :func:`rne_round` run by the stand-in instead of the kernel.
    """

    name = "cupy"

    def __init__(self, xp=None, *, native_bfloat16: bool | None = None):
        self._xp = xp
        self._kernel = None
        self._native_bf16 = native_bfloat16  # None: probe the real CuPy on first use

    @property
    def xp(self):
        if self._xp is None:
            self._xp = importlib.import_module("cupy")
        return self._xp

    @property
    def stand_in(self) -> bool:
        """True when ``xp`` is not the real cupy module (numpy or a test stand-in)."""
        return self._xp is not None and getattr(self._xp, "__name__", "") != "cupy"

    @property
    def native_bfloat16(self) -> bool:
        if self._native_bf16 is None:
            self._native_bf16 = False if self.stand_in else _probe_native_bfloat16(self.xp)
        return self._native_bf16

    def available(self) -> bool:
        if self.stand_in:
            return True
        try:
            cp = importlib.import_module("cupy")
            return cp.cuda.runtime.getDeviceCount() > 0
        except Exception:  # no cupy, no driver, no device: all mean "not available"
            return False

    def storage_dtype(self, fmt: Format):
        if fmt.name in ("float32", "float16"):
            return fmt.dtype
        if fmt.name == "bfloat16" and self.native_bfloat16:
            return fmt.dtype
        return np.dtype(np.float32)  # bfloat16 (older CuPy) / fp8: float32 holding exactly the format's values

    def round(self, x32, fmt: Format):
        xp = self.xp
        if fmt.name == "float32":
            return x32.astype(xp.float32, copy=False)
        if fmt.name == "float16":
            return x32.astype(xp.float16)  # hardware cvt.rn.f16.f32: nearest even, subnormals, overflow to inf
        r = self.round_rne(x32.astype(xp.float32, copy=False), fmt)
        if fmt.name == "bfloat16" and self.native_bfloat16:
            return r.astype(fmt.dtype)  # exact: r holds bfloat16 values
        return r

    def round_rne(self, x32, fmt: Format):
        """float32 -> float32 on fmt's grid: the CUDA kernel on a GPU, rne_round on a stand-in."""
        xp = self.xp
        if not hasattr(xp, "ElementwiseKernel"):
            return rne_round(x32, fmt, xp)
        if self._kernel is None:
            self._kernel = xp.ElementwiseKernel(
                "float32 x, int32 man, int32 emin, float32 maxval, bool has_inf", "float32 y",
                _RNE_KERNEL_SRC, "fpsim_round_rne", options=("--ftz=false", "--fmad=false"))
        return self._kernel(x32, np.int32(fmt.mantissa_bits), np.int32(fmt.emin), np.float32(fmt.max),
                            np.bool_(fmt.has_inf))

    def to_numpy(self, x) -> np.ndarray:
        return np.asarray(x) if self._xp is np else self.xp.asnumpy(x)

    def index_add(self, z, idx, g) -> None:
        if self._xp is np:
            np.add.at(z, idx, g)
            return
        # cupyx.scatter_add (atomic adds; numpy index arrays are copied over by CuPy), or
        # cupy.add.at where a newer CuPy has dropped it
        scatter = getattr(importlib.import_module("cupyx"), "scatter_add", None)
        if scatter is not None:
            scatter(z, idx, g)
        else:
            self.xp.add.at(z, idx, g)


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
