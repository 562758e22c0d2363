"""Tensor cores as they really add: NVIDIA's matrix instructions, bit for bit.

A tensor core does not accumulate in IEEE float32.  One instruction step takes a slice of L
consecutive elements of K and the accumulator c, and for every output element (MMA-Sim's T-FDPA,
Xie et al., arXiv 2511.10909):

1. forms every product a_k * b_k exactly; its exponent is e_a + e_b, each input's exponent
   being floor(log2 |x|), or the format's smallest normal exponent for a subnormal; a zero
   product (and a zero c) takes the architecture's fixed *zero exponent* instead;
2. aligns the L products and c to the largest of those exponents, e_max;
3. TRUNCATES each aligned term toward zero to F fraction bits below 2^e_max;
4. adds the truncated terms exactly;
5. rounds the sum once: toward zero into float32 (``rz-float32``) or into e8m13 (13 fraction
   bits with float32's exponent range; ``rz-e8m13``, FP8 on Ada and Hopper), or to nearest
   even into float16 when the accumulator is float16 (``rne-float16``).  A zero result is +0;
   a NaN is the canonical one (0x7FFFFFFF, 0x7FFF); an inf or NaN input gives IEEE's answer.

A long K is a chain of such steps, c <- step(a[k:k+L], b[k:k+L], c), as a GEMM kernel issues
its MMA instructions along K.  The architectures differ only in four numbers (F, the bytes one
step reads per row, the output rounding and the zero exponent), which :data:`ARCHITECTURES`
holds; :func:`matmul` runs the one algorithm with them.  ``promote_every=N`` is DeepSeek-V3's
remedy: every N elements of K the chain's partial sum is added into a float32 total by an
ordinary float32 add (nearest even) and the chain restarts from zero.

The arithmetic is exact: a product of two inputs has at most 22 significant bits, and its
alignment is a multiplication by a power of two, both exact in float32 where the exponents allow
(else in float64); a truncated term is an integer below 2^(F+2) in units of 2^(e_max-F), so L of
them and c add exactly in float64 (in float32 when F = 13).  The work is vectorized over the
output and the slice, and loops only over the K slices.  Where the compiled path is on (numba
installed, ``FPSIM_NUMBA`` not ``0``; :mod:`fpsim.numerics.compiled`), a product of
:data:`COMPILED_MIN_PRODUCTS` multiply-adds or more runs the same steps as compiled loops
(``fpsim/numerics/compiled/_tensorcore.py``), with the same bits.

:func:`emulate` makes the engine's matmul and linear accumulate this way (``fpsim.ops``); the fp8
and block-scaled Linears take ``tensor_core=`` in their recipes (``fpsim.lowp``).
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from . import state, tensorcore_fp8
from .formats.bitviews import bits_view
from .numerics import compiled
from .tensorcore_compiled import canonical as _canonical
from .tensorcore_compiled import chain_compiled as _chain_compiled
from .tensorcore_compiled import work_dtype as _work_dtype

# ``matmul`` is called by its module's name, fpsim.tensorcore.matmul, beside fpsim.ops.matmul: the
# one name is shared on purpose (both are a @ b; this one accumulates as a tensor core), so it
# stays out of __all__, whose names are one thing each across the package.
__all__ = ["Architecture", "Instruction", "ARCHITECTURES", "INPUT_FORMATS", "instruction", "round_rz", "emulate",
           "takes", "matmul_values"]


@dataclass(frozen=True)
class Architecture:
    """One GPU generation's matrix instructions: ``fraction_bits`` F kept below the largest
    exponent for 16-bit and tf32 inputs; ``step_bytes`` one step reads per row of A (the slice
    length L is step_bytes / input size); ``zero_exponent`` for a float32 and a float16
    accumulator; ``inputs`` the formats it multiplies; ``fp8_fraction_bits`` and ``fp8_rounding``
    for its FP8 instructions (None where it has none)."""

    name: str
    fraction_bits: int
    step_bytes: int
    zero_exponent_f32: int
    zero_exponent_f16: int
    inputs: tuple
    fp8_fraction_bits: int | None = None
    fp8_rounding: str | None = None


@dataclass(frozen=True)
class Instruction:
    """What one step does for a given pair of input formats and accumulator: F, L, the output
    rounding (``rz-float32``, ``rz-e8m13`` or ``rne-float16``) and the zero exponent."""

    fraction_bits: int
    slice_length: int
    rounding: str
    zero_exponent: int


_16 = ("float16", "bfloat16", "tf32")
_FP8 = ("float8_e4m3fn", "float8_e5m2")
# MMA-Sim's parameters (mmasim/nv_ptx/sim.py).  Hopper is wgmma (its mma takes the same 16-bit
# parameters and no fp8); Blackwell is tcgen05.mma, whose fp8 keeps F = 25 and rounds into float32
# (its mma: the same 16-bit parameters).  Turing is its m16n8k8 (its m8n8k4 runs as Volta's).
ARCHITECTURES = {
    "volta": Architecture("volta", 23, 8, -131, -19, ("float16",)),
    "turing": Architecture("turing", 24, 16, -132, -20, ("float16",)),
    "ampere": Architecture("ampere", 24, 16, -132, -20, _16),
    "ada": Architecture("ada", 24, 16, -132, -20, _16 + _FP8, 13, "rz-e8m13"),
    "hopper": Architecture("hopper", 25, 32, -133, -21, _16 + _FP8, 13, "rz-e8m13"),
    "blackwell": Architecture("blackwell", 25, 32, -133, -21, _16 + _FP8, 25, "rz-float32"),
}

# storage dtype -> (format name, bytes per value, exponent of the smallest normal)
_DTYPES = {
    np.dtype(np.float16): ("float16", 2, -14),
    np.dtype(ml_dtypes.bfloat16): ("bfloat16", 2, -126),
    np.dtype(np.float32): ("tf32", 4, -126),
    np.dtype(ml_dtypes.float8_e4m3fn): ("float8_e4m3fn", 1, -6),
    np.dtype(ml_dtypes.float8_e5m2): ("float8_e5m2", 1, -14),
}
INPUT_FORMATS = tuple(v[0] for v in _DTYPES.values())


def _architecture(arch) -> Architecture:
    if isinstance(arch, Architecture):
        return arch
    key = str(arch).lower()
    if key not in ARCHITECTURES:
        raise ValueError(f"unknown tensor-core architecture {arch!r}; known: {', '.join(ARCHITECTURES)}")
    return ARCHITECTURES[key]


def _input(x, name: str):
    dt = getattr(x, "dtype", None)
    if dt is None or np.dtype(dt) not in _DTYPES:
        raise ValueError(f"tensorcore.matmul: {name} must be a float16, bfloat16, float32 (tf32) or fp8 "
                         f"(float8_e4m3fn, float8_e5m2) array, got {getattr(dt, 'name', type(x).__name__)}")
    return _DTYPES[np.dtype(dt)]


def instruction(arch, a_format: str, b_format: str, out: str = "float32") -> Instruction:
    """The step of ``arch`` that multiplies ``a_format`` by ``b_format`` into an ``out``
    (``"float32"`` or ``"float16"``; bfloat16 and tf32 instructions have only float32)
    accumulator.  fp8 inputs may mix e4m3 and e5m2; other formats must match.  Raises
    ValueError naming what the architecture does not take."""
    at = _architecture(arch)
    if out not in ("float32", "float16"):
        raise ValueError(f"out must be 'float32' or 'float16', got {out!r}")
    for name, f in (("a", a_format), ("b", b_format)):
        if f not in at.inputs:
            raise ValueError(f"{at.name} tensor cores do not take {f} inputs (argument {name}); "
                             f"they take: {', '.join(at.inputs)}")
    fp8 = a_format in _FP8
    if fp8 != (b_format in _FP8) or (not fp8 and a_format != b_format):
        raise ValueError(f"a ({a_format}) and b ({b_format}) must be the same format (fp8 may mix e4m3 and e5m2)")
    if out == "float16" and a_format in ("bfloat16", "tf32"):
        raise ValueError(f"{a_format} instructions accumulate in float32 only: c must be float32 (or None)")
    size = 4 if a_format == "tf32" else 1 if fp8 else 2
    zero = at.zero_exponent_f16 if out == "float16" else at.zero_exponent_f32
    if fp8:
        rnd = "rne-float16" if out == "float16" else at.fp8_rounding
        return Instruction(at.fp8_fraction_bits, at.step_bytes // size, rnd, zero)
    return Instruction(at.fraction_bits, at.step_bytes // size, "rne-float16" if out == "float16" else "rz-float32",
                       zero)


# ------------------------------------------------------------------------------ the operands


def _split(x: np.ndarray, e_sub: int, tf32: bool, sentinel: int, edt):
    """Values (float64) and MMA-Sim exponents (``edt``; zeros and non-finite values get
    ``sentinel``, far below any real exponent) of one operand."""
    if tf32:  # the tensor core reads the top 19 bits of a float32
        x = (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
    v = x.astype(np.float64)
    _, e = np.frexp(v)
    e = np.maximum(e - 1, e_sub)
    e[(v == 0) | ~np.isfinite(v)] = sentinel
    return v, e.astype(edt)


def _prepare(a, b, ins: Instruction, fa, fb):
    """Both operands as (batch, K_padded, rows|cols) values and exponents, K padded with zeros
    to a whole number of slices (a kernel's loads fill the tail of the last step with zeros)."""
    small = max(fa[2], fb[2]) > -100 and ins.rounding != "rz-e8m13"  # exponents (and their sums) fit int8
    edt, sentinel = (np.int8, -64) if small else (np.int16, -4000)
    va, ea = _split(a, fa[2], fa[0] == "tf32", sentinel, edt)
    vb, eb = _split(b, fb[2], fb[0] == "tf32", sentinel, edt)
    k = a.shape[-1]
    pad = -k % ins.slice_length
    if pad:
        va, ea = (np.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, pad)]) for x in (va, ea))
        vb, eb = (np.pad(x, [(0, 0)] * (x.ndim - 2) + [(0, pad), (0, 0)]) for x in (vb, eb))
        ea[..., k:] = sentinel
        eb[..., k:, :] = sentinel
    vdt, pmin = _work_dtype(_exponent_range(ea, sentinel), _exponent_range(eb, sentinel), fa, fb, ins.fraction_bits)
    return np.swapaxes(va, -1, -2).astype(vdt), np.swapaxes(ea, -1, -2), vb.astype(vdt), eb, pmin, vdt


def _exponent_range(e: np.ndarray, sentinel: int):
    """(smallest, largest) exponent of an operand's nonzero finite values, or None for none."""
    real = e[e != sentinel]
    return (int(real.min()), int(real.max())) if real.size else None


# ------------------------------------------------------------------------------ rounding


def _pow2(n, dt) -> np.ndarray:
    """Exactly 2^n (integer array n in dt's normal range), built from the exponent bits."""
    if dt == np.float32:
        return ((np.asarray(n, np.int32) + 127) << 23).view(np.float32)
    return ((np.asarray(n, np.int64) + 1023) << 52).view(np.float64)


def round_rz(v: np.ndarray, fraction_bits: int = 23) -> np.ndarray:
    """float64 ``v`` rounded toward zero to ``fraction_bits`` bits (23: float32; 13: e8m13) with
    float32's exponent range: subnormals on the grid 2^(-126-fraction_bits), and +-inf at or
    beyond 2^128 (what MMA-Sim's RZ gives).  Returns float32."""
    r = v.astype(np.float32)  # to nearest even; where that went away from zero, step back one ulp
    away = (r.astype(np.float64) - v) * v > 0
    bits = r.view(np.int32)
    bits -= away  # one ulp toward zero: the magnitude bits less one (inf -> the largest float32)
    if np.any(np.abs(v) >= 2.0**128):
        r[np.abs(v) >= 2.0**128] = np.copysign(np.float32(np.inf), v[np.abs(v) >= 2.0**128])
    if fraction_bits < 23:  # truncating float32's magnitude bits truncates toward zero
        r.view(np.uint32)[...] &= np.uint32((0xFFFFFFFF << (23 - fraction_bits)) & 0xFFFFFFFF)
    return r


def _finish(v: np.ndarray, rounding: str) -> np.ndarray:
    """The step's output rounding of the exact float64 sum ``v`` (a zero's sign and a NaN's
    payload are settled once, at the end of the chain: :func:`_canonical`)."""
    if rounding == "rne-float16":
        return v.astype(np.float16)  # float64 -> float16 rounds once, to nearest even
    return round_rz(v, 23 if rounding == "rz-float32" else 13)


# ------------------------------------------------------------------------------ the chain


def _c_exponent(c: np.ndarray, zero: int, zeros: bool = True) -> np.ndarray:
    """The accumulator's exponent (int32) from its bits: a subnormal takes the smallest normal
    one; a zero the zero exponent (with ``zeros``; else the smallest normal one too); inf and
    NaN the exponent field's all-ones value less the bias (the sum is non-finite anyway)."""
    half = c.dtype == np.float16
    bits = c.view(bits_view(c)).astype(np.int32)
    mbits, top, bias = (10, 0x1F, 15) if half else (23, 0xFF, 127)
    field = (bits >> mbits) & top
    e = np.maximum(field, 1) - bias
    if zeros:
        e[(bits & ((top << mbits) | ((1 << mbits) - 1))) == 0] = zero
    return e


def _block(aT, ea, b, eb, c, ins: Instruction, pmin: int, vdt):
    """The chain over all K slices for one block of rows: aT (B, K, r), b (B, K, N), c (B, r, N).
    Where no product can be smaller than 2^-126 and the output is float32, the zero exponent
    never wins the alignment (c's exponent is at least -126) and is left out."""
    F, L = ins.fraction_bits, ins.slice_length
    B, K, r = aT.shape
    n = b.shape[-1]
    E = np.empty((B, L, r, n), ea.dtype)
    T = np.empty((B, L, r, n), vdt)
    zeros = ins.rounding == "rne-float16" or pmin < -126
    if zeros:
        za = (aT == 0).reshape(B, K // L, L, r).any(axis=2)  # a zero product in the slice: row or column
        zb = (b == 0).reshape(B, K // L, L, n).any(axis=2)
    for j, k0 in enumerate(range(0, K, L)):
        sl = slice(k0, k0 + L)
        np.add(ea[:, sl, :, None], eb[:, sl, None, :], out=E)
        emax = np.maximum(E.max(axis=1), _c_exponent(c, ins.zero_exponent, zeros))
        if zeros:
            emax = np.maximum(emax, np.where(za[:, j, :, None] | zb[:, j, None, :], ins.zero_exponent, -300))
        scale = _pow2(F - np.maximum(emax, pmin), vdt)
        np.multiply(aT[:, sl, :, None], b[:, sl, None, :], out=T)  # the products, exact
        T *= scale[:, None]  # aligned: the grid 2^(e_max - F) at 1
        np.trunc(T, out=T)
        s = T.sum(axis=1, dtype=np.float64)  # exact: at most L + 1 integers below 2^(F + 2)
        s += np.trunc(c * _pow2(F - emax, np.float64))
        c = _finish(s * _pow2(emax - F, np.float64), ins.rounding)
    return c


def _row_block(r: int, n: int, L: int, batch: int) -> int:
    """Rows per block: the (batch, L, rows, N) work arrays near 2^19 elements (few numpy calls
    per slice, arrays that still fit a large cache)."""
    return max(1, min(r, (1 << 19) // max(1, batch * L * n)))


# products (M N K) from which the compiled chain runs where it is on: below, the numpy steps cost
# less than importing numba (about 0.3 s, once), so a lab's or a docstring's small product never does
COMPILED_MIN_PRODUCTS = 1 << 18


def _chain(a, b, c, ins: Instruction, fa, fb) -> np.ndarray:
    if a.size and b.size and a.shape[-2] * a.shape[-1] * b.shape[-1] * a.shape[0] >= COMPILED_MIN_PRODUCTS:
        k = compiled.kernels()
        if k is not None:
            return _chain_compiled(k.tensorcore, a, b, c, ins, fa, fb)
    if ins.rounding == "rz-e8m13" and ins.fraction_bits == 13 and tensorcore_fp8.accumulator_fits(c):
        return _canonical(tensorcore_fp8.chain(a, b, c, ins.slice_length, fa[2], fb[2]))
    return _chain_any(a, b, c, ins, fa, fb)


def _chain_any(a, b, c, ins: Instruction, fa, fb) -> np.ndarray:
    aT, ea, bv, eb, pmin, vdt = _prepare(a, b, ins, fa, fb)
    out = np.empty(c.shape, c.dtype)
    m = aT.shape[-1]
    step = _row_block(m, bv.shape[-1], ins.slice_length, aT.shape[0])
    for r0 in range(0, m, step):
        rows = slice(r0, r0 + step)
        out[:, rows] = _block(aT[..., rows], ea[..., rows], bv, eb, c[:, rows], ins, pmin, vdt)
    return _canonical(out)


def _stored(x):
    """An fpsim Tensor (told by its ``fmt`` and ``numpy``: this ground layer imports no Tensor) as its
    stored values, in its format's dtype (float32 is taken as tf32); anything else as it is."""
    return x.numpy() if hasattr(x, "fmt") and callable(getattr(x, "numpy", None)) else x


def _operands(a, b, c, formats=None):
    a, b, c = _stored(a), _stored(b), _stored(c)
    fa, fb = formats or (_input(a, "a"), _input(b, "b"))
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
        raise ValueError(f"tensorcore.matmul: shapes {a.shape} and {b.shape} do not fit "
                         "(need (..., M, K) @ (..., K, N))")
    try:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise ValueError(f"tensorcore.matmul: batch shapes of {a.shape} and {b.shape} do not broadcast") from None
    shape = batch + (a.shape[-2], b.shape[-1])
    if c is None:
        c = np.zeros(shape, np.float32)
    else:
        c = np.asarray(c)
        if c.dtype not in (np.float32, np.float16):
            raise ValueError(f"tensorcore.matmul: c must be a float32 or float16 accumulator, got {c.dtype}")
        try:
            c = np.broadcast_to(c, shape)
        except ValueError:
            raise ValueError(f"tensorcore.matmul: c of shape {c.shape} does not fit the result {shape}") from None
    nb = int(np.prod(batch, dtype=np.int64))
    a = np.broadcast_to(a, batch + a.shape[-2:]).reshape(nb, *a.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:]).reshape(nb, *b.shape[-2:])
    return a, b, np.array(c).reshape(nb, *shape[-2:]), fa, fb, shape


def matmul(a, b, c=None, *, arch="hopper", promote_every=None) -> np.ndarray:
    """``a @ b + c`` as a chain of ``arch``'s tensor-core instructions along K returns it.

    ``a`` (..., M, K) and ``b`` (..., K, N): numpy arrays (or fpsim Tensors: their stored values) in
    float16, bfloat16, float8_e4m3fn or float8_e5m2 (ml_dtypes), or float32 for tf32 (the low 13 mantissa bits are ignored, as the
    hardware does), in a format ``arch`` takes (:data:`ARCHITECTURES`); leading batch axes
    broadcast.  ``c``: the accumulator, float32 (the default, zeros) or float16, which also sets
    the output format and rounding (see the module docstring).  K is taken in steps of L
    elements; a last, shorter step is padded with zeros, as a kernel's loads pad it.

    ``promote_every=N`` (a multiple of L): every N elements of K the chain's float32 partial sum,
    started from zero, is added into a float32 total (starting at ``c``) with one float32 add,
    rounded to nearest even - DeepSeek-V3's promotion to CUDA-core registers.

    Returns the (..., M, N) result in c's dtype: float32 holding e8m13 values for Ada's and
    Hopper's fp8 instructions, float32 otherwise, float16 for a float16 accumulator.
    """
    a, b, c, fa, fb, shape = _operands(a, b, c)
    return _matmul(a, b, c, fa, fb, shape, arch, promote_every)


def _matmul(a, b, c, fa, fb, shape, arch, promote_every) -> np.ndarray:
    out = "float16" if c.dtype == np.float16 else "float32"
    ins = instruction(arch, fa[0], fb[0], out)
    if promote_every is None:
        with np.errstate(all="ignore"):
            return _chain(a, b, c, ins, fa, fb).reshape(shape)
    if isinstance(promote_every, bool) or not isinstance(promote_every, int | np.integer) or promote_every < 1 \
            or promote_every % ins.slice_length:
        raise ValueError(f"promote_every must be a positive multiple of the step's K slice ({ins.slice_length} "
                         f"for {fa[0]} on {_architecture(arch).name}), got {promote_every!r}")
    if out == "float16":
        raise ValueError("promote_every adds into a float32 total: c must be float32 (or None)")
    total = c.copy()
    zeros = np.zeros_like(c)
    with np.errstate(all="ignore"):
        for k0 in range(0, a.shape[-1], promote_every):
            part = _chain(a[..., k0:k0 + promote_every], b[..., k0:k0 + promote_every, :], zeros, ins, fa, fb)
            total += part  # float32 + float32, rounded to nearest even
    return total.reshape(shape)


# ------------------------------------------------------------------------------ the engine's door


def _check_promote(promote_every) -> None:
    if promote_every is not None and (isinstance(promote_every, bool) or not isinstance(promote_every, int)
                                      or promote_every < 1):
        raise ValueError(f"promote_every must be a positive integer or None, got {promote_every!r}")


# the emulate blocks open in this context (thread, task): (the emulate object, its entered block), innermost last
_OPEN = contextvars.ContextVar("fpsim_tensorcore_emulate_open", default=())


class emulate:  # noqa: N801 - a context manager named as a function, as rounding_mode and no_grad are
    """Inside, ``fpsim.ops.matmul`` / ``linear`` (autocast's too) run their GEMMs, forward and
    backward, as ``arch``'s tensor core wherever both operands are in a format it takes (float16,
    bfloat16, fp8; float32 operands stay float32 BLAS); ``promote_every`` as in :func:`matmul`.
    Both are checked here, before anything runs.  In this thread / context only; one object may be
    entered again, nested or one block after another (as ``fpsim.rounding_mode``'s), and from
    several threads."""

    __slots__ = ("setting",)

    def __init__(self, arch="hopper", promote_every=None):
        at = _architecture(arch)
        _check_promote(promote_every)
        self.setting = (at.name, promote_every)

    def __enter__(self) -> emulate:
        block = state.tensor_core_as(self.setting)
        block.__enter__()
        _OPEN.set((*_OPEN.get(), (self, block)))
        return self

    def __exit__(self, *exc) -> bool:
        open_ = _OPEN.get()
        i = max((j for j, (obj, _) in enumerate(open_) if obj is self), default=None)
        if i is None:
            raise RuntimeError("tensorcore.emulate: exited a block that was not entered in this thread / context")
        _OPEN.set(open_[:i] + open_[i + 1:])
        return bool(open_[i][1].__exit__(*exc))

    def __repr__(self) -> str:
        return f"tensorcore.emulate({self.setting[0]!r}, promote_every={self.setting[1]!r})"


def takes(arch, a_format: str, b_format: str) -> bool:
    """Whether ``arch`` has an instruction multiplying these two formats (float32 accumulator)."""
    try:
        instruction(arch, a_format, b_format)
    except ValueError:
        return False
    return True


_STORAGE = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
            "float8_e5m2": ml_dtypes.float8_e5m2}


def matmul_values(a32: np.ndarray, b32: np.ndarray, a_format: str, b_format: str, arch="hopper",
                  promote_every=None) -> np.ndarray:
    """:func:`matmul` of float32 arrays whose values are exactly in ``a_format`` / ``b_format``
    (float16, bfloat16, fp8; not checked), multiplied as ``arch`` does into a zero float32
    accumulator.  The model reads only the values, so they are not cast to the formats' storage.
    Returns float32."""
    for name, f in (("a_format", a_format), ("b_format", b_format)):
        if f not in _STORAGE:
            raise ValueError(f"tensorcore.matmul_values: {name} must be one of {', '.join(_STORAGE)}, got {f!r}")
    formats = tuple(_DTYPES[np.dtype(_STORAGE[f])] for f in (a_format, b_format))
    a, b, c, fa, fb, shape = _operands(np.asarray(a32, np.float32), np.asarray(b32, np.float32), None, formats)
    return _matmul(a, b, c, fa, fb, shape, arch, promote_every)
