"""Array backends: the few functions that really differ between numpy and cupy.

A backend holds its array module (``xp``) and knows how to store a float32 result in a
format - the single rounding every op performs.  ``fpsim.ops`` reaches arrays only through
``tensor.backend.xp`` and these functions, so the same engine runs on either.

On numpy, storage is the real low-precision dtype (``np.float16``, ``ml_dtypes.bfloat16``,
fp8), and rounding is numpy's / ml_dtypes' own float32 -> low cast, which is correct
round-to-nearest-even from float32 (the tests check every case against exact rationals).
``numpy-f32`` is the same arithmetic with the values held in float32 arrays (exactly the format's
values): the same numbers bit for bit, faster, at 2-4x the memory (:class:`NumpyF32Backend`).

On cupy, float16 is native (CuPy's float32 -> float16 cast rounds to nearest even).  bfloat16
and fp8 are rounded on the device by one elementwise kernel (``formats.kernels.rne_round``'s algorithm) and
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

from . import numerics
from .formats import Format, cast
from .formats.kernels import (
    F16_BITS_MIN_SIZE,
    RNE_KERNEL_SRC,
    f16_to_f32,
    f16_to_f32_scaled,
    f32_to_bf16,
    f32_to_f16,
    f32_to_fp8,
    fp8_to_f32,
    rne_round,
    snap_f16,
)
from .numerics import matmul_f32
from .numerics.sums import reduced_axes as _axes
from .state import ENGINE_ROUNDING, arithmetic_mode, blas_call, default_rng

__all__ = ["Backend", "NumpyBackend", "NumpyF32Backend", "CupyBackend", "get_backend", "available", "BACKENDS",
           "DEFAULT_ENV"]


def _grid(fmt: Format | None):
    """(mantissa bits, the power of two that divides every value) of ``fmt`` - float16: (10,
    2**-24) - or None where the format is not known (any float32 value)."""
    if fmt is None:
        return None
    return fmt.mantissa_bits, 2.0 ** (fmt.emin - fmt.mantissa_bits)


def _engine_aware(round_nearest):
    """``round`` from a backend's own round-to-nearest: inside ``fpsim.rounding_mode(...)`` the
    values are first rounded in that mode by ``fpsim.cast`` (on the host), and the exact results
    stored by ``round_nearest``; outside, one truth test and ``round_nearest`` itself."""

    def round(self, x32, fmt: Format):
        if ENGINE_ROUNDING and ENGINE_ROUNDING[-1].mode != "nearest":
            s = ENGINE_ROUNDING[-1]
            vals = cast(self.to_numpy(x32), fmt, s.mode, rng=s.rng if s.rng is not None else default_rng(),
                        sr_bits=s.sr_bits, sr_variant=s.sr_variant)
            x32 = self.asarray(vals.astype(np.float32))  # on fmt's grid: stored exactly
        return round_nearest(self, x32, fmt)

    round.__doc__ = round_nearest.__doc__
    return round


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
        """Round a float32 array once (to nearest, ties to even, or in the engine's mode inside
        ``fpsim.rounding_mode``) into fmt's storage."""

    def clip_to_max(self, x32, fmt: Format):
        """x32 clamped to [-fmt.max, fmt.max]: exact (max is a value of fmt); NaN stays NaN."""
        return self.xp.clip(x32, self.xp.float32(-fmt.max), self.xp.float32(fmt.max))

    def round_saturating(self, x32, fmt: Format):
        """Round to nearest even into fmt's storage, overflow (and +-inf) clamped to +-max, as
        fp8 hardware conversions do."""
        return self.round(self.clip_to_max(x32, fmt), fmt)

    def to_f32(self, x):
        """The exact float32 values of a stored array (a no-op for float32)."""
        return x.astype(self.xp.float32, copy=False)

    def scaled_f32(self, x, scale):
        """(float32 values of stored array x times float32 ``scale``, rounded once; whether x
        holds an inf or NaN) - GradScaler's unscaling."""
        x32 = self.to_f32(x)
        xp = self.xp
        bad = x32.size > 0 and not bool(xp.isfinite(x32.min()) & xp.isfinite(x32.max()))  # a NaN reaches both
        with np.errstate(over="ignore", invalid="ignore"):
            return x32 * xp.float32(scale), bad

    def asarray(self, x, dtype=None):
        return self.xp.asarray(x, dtype=dtype)

    def to_numpy(self, x) -> np.ndarray:
        return np.asarray(x)

    def index_add(self, z, idx, g) -> None:
        """z[idx] += g, adding where an index repeats (numpy's ``add.at``)."""
        self.xp.add.at(z, idx, g)

    def matmul(self, a32, b32, fa: Format | None = None, fb: Format | None = None):
        """float32 x float32 -> float32 (the GPU backend: cuBLAS sgemm, float32 accumulation in the
        library's order).  ``fa`` / ``fb``: the formats the values are in, where known."""
        return self.xp.matmul(a32, b32)

    # The reductions and elementary functions the ops compute in float32.  Here (the GPU
    # backend) they are the array library's own - its order, its implementation; the numpy
    # backends override them with fpsim's definitions (fpsim.numerics), the same on every machine.

    def sum(self, x32, axis=None, keepdims: bool = False):
        """float32 sum over ``axis`` of float32 values."""
        return self.xp.asarray(x32.sum(axis=axis, dtype=self.xp.float32, keepdims=keepdims))

    def mean(self, x32, axis=None, keepdims: bool = False):
        """float32 sum over ``axis`` divided in float32 by the number of values."""
        n = 1
        for a in _axes(axis, x32.ndim):
            n *= x32.shape[a]
        return self.sum(x32, axis, keepdims) / self.xp.float32(n)

    def exp(self, x32):
        return self.xp.exp(x32)

    def log(self, x32):
        return self.xp.log(x32)

    def tanh(self, x32):
        return self.xp.tanh(x32)

    def pow(self, x32, p):
        """x32 ** p for a scalar p."""
        return x32 ** self.xp.float32(p)

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

    def _round_nearest(self, x32, fmt: Format):
        if fmt.dtype == np.float32:  # float32, or a hand-built format held in float32: rounded onto its grid
            return x32.astype(np.float32, copy=False) if fmt.is_ml_dtype else cast(x32, fmt)
        if fmt.name == "float16" and x32.dtype == np.float32 and x32.size >= F16_BITS_MIN_SIZE:
            return f32_to_f16(x32)  # integer passes: no floating-point warnings to silence
        if x32.dtype == np.float32 and fmt.name != "float16":
            # ml_dtypes' cast (bfloat16: about 0.5 ns a value, one pass), which raises no floating-point
            # flags from float32; bfloat16 by f32_to_bf16: that cast, or the compiled path's
            return f32_to_bf16(x32) if fmt.name == "bfloat16" else x32.astype(fmt.dtype)
        with np.errstate(over="ignore", invalid="ignore"):
            if fmt.name == "float16":
                return f32_to_f16(x32)
            return x32.astype(fmt.dtype)

    round = _engine_aware(_round_nearest)

    def matmul(self, a32, b32, fa: Format | None = None, fb: Format | None = None):
        """The exact sums of the exact products, each rounded once to float32
        (:func:`fpsim.numerics.matmul_f32`): the same bits on every BLAS, kernel and thread count.
        ``fa`` / ``fb``, the operands' formats, let it skip the checks where every float64 sum is
        exact (float16 values are multiples of 2**-24, for instance).  Under
        ``fpsim.arithmetic("library")``: numpy's float32 product (BLAS sgemm), on fpsim's pinned
        BLAS thread count."""
        if arithmetic_mode() == "library":
            return blas_call(np.matmul, a32, b32)
        return matmul_f32(a32, b32, _grid(fa), _grid(fb))

    def sum(self, x32, axis=None, keepdims: bool = False):
        """The exact sum over ``axis``, rounded once to float32 (:func:`fpsim.numerics.sum_f32`)."""
        if arithmetic_mode() == "library":
            return super().sum(x32, axis, keepdims)
        return numerics.sum_f32(x32, axis, keepdims)

    def mean(self, x32, axis=None, keepdims: bool = False):
        """The exact sum rounded to float32, divided by the count in float32 (:func:`fpsim.numerics.mean_f32`)."""
        if arithmetic_mode() == "library":
            return super().mean(x32, axis, keepdims)
        return numerics.mean_f32(x32, axis, keepdims)

    def exp(self, x32):
        """Correctly rounded float32 (:mod:`fpsim.numerics.elementary`), as log, tanh and pow;
        numpy's float32 loops under ``fpsim.arithmetic("library")``."""
        return numerics.exp_f32(x32) if arithmetic_mode() == "exact" else super().exp(x32)

    def log(self, x32):
        return numerics.log_f32(x32) if arithmetic_mode() == "exact" else super().log(x32)

    def tanh(self, x32):
        return numerics.tanh_f32(x32) if arithmetic_mode() == "exact" else super().tanh(x32)

    def pow(self, x32, p):
        return numerics.pow_f32(x32, float(np.float32(p))) if arithmetic_mode() == "exact" else super().pow(x32, p)

    def round_saturating(self, x32, fmt: Format):
        if fmt.dtype.itemsize == 1 and x32.dtype == np.float32 and not ENGINE_ROUNDING:
            return f32_to_fp8(x32, fmt, saturate=True)  # a table look-up, 5-10x ml_dtypes' speed
        return super().round_saturating(x32, fmt)

    def scaled_f32(self, x, scale):
        """float16: widened with the scale folded into the widening's multiply, the inf / NaN
        test on the 16-bit patterns (``f16_to_f32_scaled``: the same bits in four passes, not
        seven); other storage as ``Backend.scaled_f32``."""
        if x.dtype == np.float16:
            return f16_to_f32_scaled(x, scale)
        return super().scaled_f32(x, scale)

    def to_f32(self, x):
        if x.dtype == np.float16:
            return f16_to_f32(x)
        if x.dtype.itemsize == 1:
            return fp8_to_f32(x)  # a table look-up: ml_dtypes' own cast costs ~20 ns a value
        return x.astype(np.float32, copy=False)  # bfloat16: ml_dtypes' cast, about 0.1 ns a value


class NumpyF32Backend(NumpyBackend):
    """numpy, with every format's values held in float32 arrays: ``backend="numpy-f32"``.

    The values are exactly the format's - each rounding is the same round-to-nearest-even into
    float16 / bfloat16 / fp8 as on ``numpy``, kept in float32 (float16: :func:`~fpsim.formats.kernels.snap_f16`,
    eight passes and no bit assembly; the others: the storage cast and back) - so every result is the same bit
    for bit; but reading a tensor costs nothing, where ``numpy`` widens its float16 / bfloat16 /
    fp8 storage to float32 for every op.  ``Tensor.nbytes`` still reports the format's size;
    ``Tensor.numpy()`` returns the real storage dtype.  What is given up: ``Tensor.data`` is a
    float32 array, and the process holds 2x (16-bit) or 4x (fp8) the memory.  The CuPy backend
    stores bfloat16 (older CuPy) and fp8 the same way.
    """

    name = "numpy-f32"

    def storage_dtype(self, fmt: Format):
        return np.dtype(np.float32)

    def _round_nearest(self, x32, fmt: Format):
        if fmt.name == "float32":
            return x32.astype(np.float32, copy=False)
        if fmt.name == "float16" and x32.dtype == np.float32:
            return snap_f16(x32)
        # bfloat16 / fp8: the storage cast and back.
        return NumpyBackend.to_f32(self, NumpyBackend._round_nearest(self, x32, fmt))  # storage dtype and back: exact

    round = _engine_aware(_round_nearest)

    def round_saturating(self, x32, fmt: Format):
        return NumpyBackend.to_f32(self, NumpyBackend.round_saturating(self, x32, fmt))

    def to_f32(self, x):
        return x.astype(np.float32, copy=False)


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

    ``CupyBackend(xp=numpy)`` (or another stand-in module: the tests' strict one is in
    ``tests/support/cupy_standin.py``) runs the
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

    def _round_nearest(self, x32, fmt: Format):
        xp = self.xp
        if fmt.name == "float32":
            return x32.astype(xp.float32, copy=False)
        if fmt.name == "float16":
            return x32.astype(xp.float16)  # hardware cvt.rn.f16.f32: nearest even, subnormals, overflow to inf
        r = self.rne_round(x32.astype(xp.float32, copy=False), fmt)
        if fmt.name == "bfloat16" and self.native_bfloat16:
            return r.astype(fmt.dtype)  # exact: r holds bfloat16 values
        return r

    round = _engine_aware(_round_nearest)

    def rne_round(self, x32, fmt: Format):
        """float32 -> float32 on fmt's grid: the CUDA kernel on a GPU, rne_round on a stand-in."""
        xp = self.xp
        if not hasattr(xp, "ElementwiseKernel"):
            return rne_round(x32, fmt, xp)
        if self._kernel is None:
            self._kernel = xp.ElementwiseKernel(
                "float32 x, int32 man, int32 emin, float32 maxval, bool has_inf", "float32 y",
                RNE_KERNEL_SRC, "fpsim_round_rne", options=("--ftz=false", "--fmad=false"))
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


BACKENDS: dict[str, Backend] = {"numpy": NumpyBackend(), "numpy-f32": NumpyF32Backend(), "cupy": CupyBackend()}
DEFAULT_ENV = "FPSIM_BACKEND"
_DEFAULT = os.environ.get(DEFAULT_ENV, "").strip() or "numpy"  # read once: get_backend is on the hot path


def get_backend(backend=None) -> Backend:
    """A backend by name (``numpy``, ``numpy-f32``, ``cupy``) or the object itself; None means
    the default: numpy, or the backend named by the environment variable ``FPSIM_BACKEND`` when
    the process started."""
    if backend is None:
        if _DEFAULT == "numpy":
            return BACKENDS["numpy"]
        if _DEFAULT not in BACKENDS:  # said here, not at import: `import fpsim` and `fpsim formats` still work
            raise ValueError(f"the environment variable {DEFAULT_ENV}={_DEFAULT!r} names no backend; "
                             f"known: {', '.join(BACKENDS)}")
        if not BACKENDS[_DEFAULT].available():  # a ValueError, as above: every `fpsim` command says it in one line
            raise ValueError(f"the environment variable {DEFAULT_ENV}={_DEFAULT!r} names a backend that is not "
                             f"available here (it needs CuPy and a CUDA GPU); unset it or set {DEFAULT_ENV}=numpy")
        backend = _DEFAULT
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
