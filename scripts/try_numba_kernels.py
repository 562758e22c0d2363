"""Experiment (docs/performance.md, "A compiled path: tried, not kept"): single-pass numba kernels on integer views
for float32 -> float16 (round to nearest even), float32 -> bfloat16 and float16 -> float32, against
fpsim's numpy kernels.  Not part of the package: fpsim does not import numba.

    OPENBLAS_NUM_THREADS=1 nice -n 5 python scripts/try_numba_kernels.py [check] [kernels] [steps]

  check    every float32 pattern (2**32, in chunks of 2**24) through each narrowing kernel against
           numpy's float16 cast / ml_dtypes' bfloat16 cast, and every float16 pattern through the
           widening one against numpy's: prints the number of differing results (a few minutes)
  kernels  ns per value of each kernel, fpsim's kernels, numpy's / ml_dtypes' astype and a plain
           float32 copy on 10**6 and 65536 values, timed interleaved in one process: the median over
           rounds of each round's best, and the median of the per-round ratios to the copy
  steps    the MLP fp16-dynamic and bf16-master training steps (fpsim.tools.bench.steps.fpsim_step)
           with the numpy backend's f32_to_f16 / f16_to_f32 replaced by the numba kernels (the
           vectorised one for float32 -> float16, the table gather for float16 -> float32) and its
           round-to-nearest into bfloat16 (ml_dtypes' astype) by the numba kernel, against the
           unpatched steps and the fp32 step, interleaved; per-round ratios, median and range
With no argument it does all three.  The kernels are compiled with parallel=False: one thread,
the same bits at any thread count.

The reference NaN behaviour (numpy 2.4): float32 -> float16 keeps the sign and the top 10 payload
bits without quieting (0x7F802000 -> 0x7C01); a NaN whose kept bits are all zero becomes 0x7C01 or
0xFC01.  float16 -> float32 keeps the payload (shifted left 13).  ml_dtypes' float32 -> bfloat16
gives the quiet NaN 0x7FC0 with the input's sign.
"""

from __future__ import annotations

import sys
import time

import ml_dtypes
import numpy as np

try:
    import numba
    from numba import njit
except ImportError:
    sys.exit("try_numba_kernels.py needs numba: pip install numba (it is not a dependency of fpsim)")

import fpsim.backend
from fpsim.formats import kernels

U32 = np.uint32


@njit(cache=False, parallel=False, nogil=True)
def _f32_to_f16_bits(src, dst):
    """uint32 float32 patterns -> uint16 float16 patterns, nearest even, numpy's NaN rule."""
    for i in range(src.size):
        f = src[i]
        sign = (f >> U32(16)) & U32(0x8000)
        a = f & U32(0x7FFFFFFF)
        if a >= U32(0x38800000):  # |x| >= 2**-14: normal, inf or NaN
            if a < U32(0x477FF000):  # below 65520: a normal float16
                # round the 13 dropped bits to nearest even, rebias the exponent (127 -> 15)
                r = a + U32(0x0FFF) + ((a >> U32(13)) & U32(1))
                h = (r - U32(0x38000000)) >> U32(13)
            elif a <= U32(0x7F800000):  # overflow to inf, or inf
                h = U32(0x7C00)
            else:  # NaN: the top 10 payload bits, never all zero
                h = U32(0x7C00) | ((a >> U32(13)) & U32(0x3FF))
                if h == U32(0x7C00):
                    h = U32(0x7C01)
        elif a > U32(0x33000000):  # 2**-25 < |x| < 2**-14: a subnormal (or 2**-14 by carry)
            e = a >> U32(23)
            m = (a & U32(0x7FFFFF)) | U32(0x800000)
            shift = U32(126) - e  # in units of 2**-24: m * 2**(e - 126)
            q = m >> shift
            rem = m & ((U32(1) << shift) - U32(1))
            half = U32(1) << (shift - U32(1))
            if rem > half or (rem == half and (q & U32(1)) == U32(1)):
                q += U32(1)
            h = q
        else:  # |x| <= 2**-25: rounds to zero (2**-25 is a tie to even zero)
            h = U32(0)
        dst[i] = np.uint16(sign | h)


@njit(cache=False, parallel=False, nogil=True)
def _f32_to_f16_bits_select(src, dst):
    """The same rounding as ``_f32_to_f16_bits`` with every case computed and one picked by
    selects (no branches in the loop body, so LLVM vectorises it).  numba types uint32 arithmetic
    as uint64; each intermediate is cut back to uint32 so that LLVM narrows the vector lanes."""
    for i in range(src.size):
        f = src[i]
        sign = U32((f >> 16) & 0x8000)
        a = U32(f & 0x7FFFFFFF)
        # normal: add 0xFFF + the last kept bit (ties to even), rebias, cut 13 bits
        nrm = U32(U32(a + U32(0x0FFF + ((a >> 13) & 1)) - U32(0x38000000)) >> 13)
        # subnormal: the significand with its hidden bit, shifted right by 126 - e (at most 25:
        # anything smaller than 2**-25 rounds to 0), rounded the same way
        e = U32(a >> 23)
        sh = U32(U32(126) - e) if e >= U32(101) else U32(25)
        sh = sh if sh >= U32(14) else U32(14)  # normal inputs: any valid shift, the result is unused
        m = U32((a & 0x7FFFFF) | 0x800000)
        sub = U32(U32(m + U32(U32(U32(1) << U32(sh - U32(1))) - U32(1)) + U32((m >> sh) & 1)) >> sh)
        pay = U32((a >> 13) & 0x3FF)
        nan = U32(0x7C00 | (pay if pay != U32(0) else U32(1)))
        h = sub if a < U32(0x38800000) else nrm
        h = U32(0x7C00) if a >= U32(0x477FF000) else h
        h = nan if a > U32(0x7F800000) else h
        dst[i] = np.uint16(sign | h)


@njit(cache=False, parallel=False, nogil=True)
def _f32_to_bf16_bits(src, dst):
    """uint32 float32 patterns -> uint16 bfloat16 patterns, nearest even, NaN -> +-0x7FC0."""
    for i in range(src.size):
        f = src[i]
        if (f & U32(0x7FFFFFFF)) > U32(0x7F800000):
            dst[i] = np.uint16(((f >> U32(16)) & U32(0x8000)) | U32(0x7FC0))
        else:
            dst[i] = np.uint16((f + U32(0x7FFF) + ((f >> U32(16)) & U32(1))) >> U32(16))


@njit(cache=False, parallel=False, nogil=True)
def _f16_to_f32_bits(src, dst):
    """uint16 float16 patterns -> uint32 float32 patterns, exact, NaN payload kept."""
    for i in range(src.size):
        h = U32(src[i])
        sign = (h & U32(0x8000)) << U32(16)
        e = (h >> U32(10)) & U32(0x1F)
        m = h & U32(0x3FF)
        if e == U32(31):
            dst[i] = sign | U32(0x7F800000) | (m << U32(13))
        elif e != U32(0):
            dst[i] = sign | ((e + U32(112)) << U32(23)) | (m << U32(13))
        elif m == U32(0):
            dst[i] = sign
        else:  # subnormal: normalise m * 2**-24
            ex = U32(113)
            while (m & U32(0x400)) == U32(0):
                m <<= U32(1)
                ex -= U32(1)
            dst[i] = sign | (ex << U32(23)) | ((m & U32(0x3FF)) << U32(13))


@njit(cache=False, parallel=False, nogil=True)
def _f16_to_f32_gather(src, table, dst):
    """uint16 float16 patterns -> uint32 float32 patterns by a 65536-entry table (AVX2 gathers)."""
    for i in range(src.size):
        dst[i] = table[src[i]]


# the gather's table, computed by the arithmetic kernel (which the check holds against numpy)
F16_TABLE = np.empty(1 << 16, np.uint32)
_f16_to_f32_bits(np.arange(1 << 16, dtype=np.uint32).astype(np.uint16), F16_TABLE)


def _f16_through(kernel):
    """float32 array -> float16 array through a numba ``kernel`` on the bit patterns (other
    dtypes: fpsim's kernel)."""

    def narrow(x: np.ndarray) -> np.ndarray:
        if x.dtype != np.float32:
            return ORIG_F32_TO_F16(x)
        src = np.ascontiguousarray(x).reshape(-1).view(np.uint32)
        out = np.empty(x.shape, np.float16)
        kernel(src, out.reshape(-1).view(np.uint16))
        return out

    return narrow


nb_f32_to_f16 = _f16_through(_f32_to_f16_bits)  # with branches
nb_f32_to_f16_select = _f16_through(_f32_to_f16_bits_select)  # branch-free (vectorised)


def nb_f32_to_bf16(x: np.ndarray) -> np.ndarray:
    src = np.ascontiguousarray(x, np.float32).reshape(-1).view(np.uint32)
    out = np.empty(x.shape, np.uint16)
    _f32_to_bf16_bits(src, out.reshape(-1))
    return out.view(ml_dtypes.bfloat16)


def nb_f16_to_f32(x: np.ndarray, kernel=None) -> np.ndarray:
    """float16 array -> float32 array through the numba table gather (``kernel`` "bits": the
    arithmetic kernel)."""
    if x.dtype != np.float16:
        raise TypeError(f"nb_f16_to_f32 takes a float16 array, got {x.dtype}")
    src = np.ascontiguousarray(x).reshape(-1).view(np.uint16)
    out = np.empty(x.shape, np.float32)
    if kernel == "bits":
        _f16_to_f32_bits(src, out.reshape(-1).view(np.uint32))
    else:
        _f16_to_f32_gather(src, F16_TABLE, out.reshape(-1).view(np.uint32))
    return out


ORIG_F32_TO_F16, ORIG_F16_TO_F32 = fpsim.backend.f32_to_f16, fpsim.backend.f16_to_f32


# ---------------------------------------------------------------------------------------- (a) check


def check_all(chunk_bits: int = 24) -> None:
    """Every float32 pattern through the narrowing kernels, every float16 pattern widened."""
    n = 1 << chunk_bits
    base = np.arange(n, dtype=np.uint32)
    d16, dsel, dbf = (np.empty(n, np.uint16) for _ in range(3))
    diff16 = diffsel = diffbf = 0
    t0 = time.perf_counter()
    chunks = 1 << (32 - chunk_bits)
    with np.errstate(invalid="ignore", over="ignore"):  # numpy warns on casting NaN and on overflow
        for c in range(chunks):
            bits = base + U32(c << chunk_bits)
            x = bits.view(np.float32)
            ref16 = x.astype(np.float16).view(np.uint16)
            _f32_to_f16_bits(bits, d16)
            diff16 += int(np.count_nonzero(d16 != ref16))
            _f32_to_f16_bits_select(bits, dsel)
            diffsel += int(np.count_nonzero(dsel != ref16))
            _f32_to_bf16_bits(bits, dbf)
            diffbf += int(np.count_nonzero(dbf != x.astype(ml_dtypes.bfloat16).view(np.uint16)))
            if c % 16 == 15:
                print(f"  {c + 1}/{chunks} chunks of 2**{chunk_bits}, {time.perf_counter() - t0:.0f} s,"
                      f" differences so far: f16 {diff16}, f16 select {diffsel}, bf16 {diffbf}", flush=True)
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    w = np.empty(1 << 16, np.uint32)
    _f16_to_f32_bits(h, w)
    refw = h.view(np.float16).astype(np.float32).view(np.uint32)
    diffw = int(np.count_nonzero(w != refw))
    _f16_to_f32_gather(h, F16_TABLE, w)
    diffg = int(np.count_nonzero(w != refw))
    print(f"all 2**32 float32 patterns: float32->float16 (branches) vs numpy astype: {diff16} differences")
    print(f"all 2**32 float32 patterns: float32->float16 (selects) vs numpy astype: {diffsel} differences")
    print(f"all 2**32 float32 patterns: float32->bfloat16 vs ml_dtypes astype: {diffbf} differences")
    print(f"all 2**16 float16 patterns: float16->float32 (arithmetic) vs numpy astype: {diffw} differences")
    print(f"all 2**16 float16 patterns: float16->float32 (table gather) vs numpy astype: {diffg} differences")


# -------------------------------------------------------------------------------------- (b) kernels


def _best(fn, arg, reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn(arg)
        best = min(best, time.perf_counter() - t)
    return best


def _datasets(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    normal = rng.standard_normal(n).astype(np.float32)
    # gradient-like: magnitudes spread over 2**-28 .. 2**8, float16 subnormals and underflow included
    wide = (rng.choice([-1.0, 1.0], n) * 2.0 ** rng.uniform(-28, 8, n)).astype(np.float32)
    return {"N(0,1)": normal, "2**U(-28,8)": wide}


def time_kernels(rounds: int = 15) -> None:
    cands = {
        "float32 copy": lambda x: x.copy(),
        "f16: numba (branches)": nb_f32_to_f16,
        "f16: numba (selects, vectorised)": nb_f32_to_f16_select,
        "f16: fpsim kernels.f32_to_f16": kernels.f32_to_f16,
        "f16: numpy astype": lambda x: x.astype(np.float16),
        "bf16: numba": nb_f32_to_bf16,
        "bf16: ml_dtypes astype": lambda x: x.astype(ml_dtypes.bfloat16),
        "widen f16: numba (arithmetic, branches)": lambda h: nb_f16_to_f32(h, "bits"),
        "widen f16: numba (table gather)": nb_f16_to_f32,
        "widen f16: fpsim kernels.f16_to_f32": kernels.f16_to_f32,
        "widen f16: numpy astype": lambda h: h.astype(np.float32),
        "widen bf16: ml_dtypes astype": lambda h: h.astype(np.float32),
    }
    for n in (10**6, 65536):
        reps = 5 if n > 100000 else 40
        for dname, x in _datasets(n).items():
            args = {"f16": x.astype(np.float16), "bf16": x.astype(ml_dtypes.bfloat16)}
            arg = {k: (args["f16"] if k.startswith("widen f16") else args["bf16"] if k.startswith("widen bf16")
                       else x) for k in cands}
            for k, fn in cands.items():
                fn(arg[k])  # compile / warm up
            times = {k: [] for k in cands}
            order = list(cands)
            rng = np.random.default_rng(1)
            with np.errstate(all="ignore"):
                for _ in range(rounds):
                    rng.shuffle(order)
                    for k in order:
                        times[k].append(_best(cands[k], arg[k], reps))
            copy = np.array(times["float32 copy"])
            print(f"\n{n} values, {dname}: ns/value (median of {rounds} rounds' best of {reps}),"
                  " median ratio to the float32 copy")
            for k in cands:
                t = np.array(times[k])
                print(f"  {k:44s} {np.median(t) / n * 1e9:7.3f} ns   {np.median(t / copy):6.2f}x copy")


# ---------------------------------------------------------------------------------------- (c) steps


ORIG_ROUND = fpsim.backend.NumpyBackend.round


def _round_bf16_numba(self, x32, fmt):
    """NumpyBackend.round with round-to-nearest float32 -> bfloat16 done by the numba kernel (the
    default backend rounds to bfloat16 by ml_dtypes' astype); everything else as before."""
    eng = fpsim.backend.ENGINE_ROUNDING
    if fmt.name == "bfloat16" and x32.dtype == np.float32 and (not eng or eng[-1].mode == "nearest"):
        return nb_f32_to_bf16(x32)
    return ORIG_ROUND(self, x32, fmt)


def _patch(on: bool) -> None:
    fpsim.backend.f32_to_f16 = nb_f32_to_f16_select if on else ORIG_F32_TO_F16
    fpsim.backend.f16_to_f32 = nb_f16_to_f32 if on else ORIG_F16_TO_F32
    fpsim.backend.NumpyBackend.round = _round_bf16_numba if on else ORIG_ROUND


def _patched(step):
    def run():
        _patch(True)
        try:
            return step()
        finally:
            _patch(False)

    return run


def time_steps(rounds: int = 30, reps: int = 3) -> None:
    """fp32, fp16-dynamic and bf16-master MLP steps, the last two also with the numba kernels
    patched in (each patched step has its own model, so it does the same updates as the other)."""
    from fpsim.tools.bench.steps import fpsim_step

    steps = {"fp32": fpsim_step("fp32")}
    for recipe in ("fp16-dynamic", "bf16-master"):
        steps[recipe] = fpsim_step(recipe)
        steps[recipe + " + numba"] = _patched(fpsim_step(recipe))
    pairs = [("fp16-dynamic", "fp16-dynamic + numba"), ("bf16-master", "bf16-master + numba")]

    def same_losses():
        losses = {k: float(fn().numpy()) for k, fn in steps.items()}
        for a, b in pairs:
            assert losses[a] == losses[b], f"the numba-patched {a} step diverged from the numpy one: {losses}"

    for _ in range(3):  # warm up, and each patched step must stay bit-identical to its unpatched one
        same_losses()
    times = {k: [] for k in steps}
    order = list(steps)
    rng = np.random.default_rng(2)
    for _ in range(rounds):
        rng.shuffle(order)
        for k in order:
            best = float("inf")
            for _ in range(reps):
                t = time.process_time()
                steps[k]()
                best = min(best, time.process_time() - t)
            times[k].append(best)
    same_losses()
    t = {k: np.array(v) for k, v in times.items()}
    print(f"\nMLP step, batch 128, process CPU time, {rounds} interleaved rounds (best of {reps}):")
    for k in steps:
        print(f"  {k:24s} median {np.median(t[k]) * 1e3:7.2f} ms")

    def ratio(a, b):
        r = t[a] / t[b]
        return f"{np.median(r):.2f}x (range {r.min():.2f}-{r.max():.2f})"

    for a, b in pairs:
        print(f"  {a + ' / fp32':36s} {ratio(a, 'fp32')}")
        print(f"  {b + ' / fp32':36s} {ratio(b, 'fp32')}")
        print(f"  {b + ' / ' + a:36s} {ratio(b, a)}")
    print("  (the losses of each patched step and its unpatched twin identical after the rounds)")


def main(argv: list[str]) -> None:
    what = argv or ["check", "kernels", "steps"]
    bad = set(what) - {"check", "kernels", "steps"}
    if bad:
        sys.exit(f"unknown section(s) {sorted(bad)}: choose from check, kernels, steps")
    import llvmlite

    print(f"numba {numba.__version__}, llvmlite {llvmlite.__version__}, numpy {np.__version__},"
          f" ml_dtypes {ml_dtypes.__version__}, python {sys.version.split()[0]}")
    if "check" in what:
        check_all()
    if "kernels" in what:
        time_kernels()
    if "steps" in what:
        time_steps()


if __name__ == "__main__":
    main(sys.argv[1:])
