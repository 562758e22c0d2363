"""``fpsim bits``: the same bits on every machine, checked on this one.

fpsim defines each op's result itself (``fpsim.numerics``: exact sums and products rounded once,
correctly rounded exp / log / tanh), so no BLAS kernel, SIMD path or thread count can change a
number it computes.  ``fpsim bits`` runs a fixed set of short computations - the arithmetic
itself, the reference task under every default recipe, the tiny GPT in float16 and bfloat16, a
block-scaled and a tensor-core recipe - and prints a fingerprint of each (sha256 of every number,
to the last bit).  ``fpsim bits --configs`` runs that set again in fresh processes under every
configuration this CPU can run that changes what numpy's libraries compute - OpenBLAS's kernels
for older and newer CPUs (``OPENBLAS_CORETYPE``: Nehalem, Sandybridge, Haswell, Zen, SkylakeX,
...) and numpy's vector loops with AVX-512, then AVX2, turned off (``NPY_DISABLE_CPU_FEATURES``)
- and says whether every fingerprint agrees (exit status 1 if one does not).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time

import numpy as np

__all__ = ["main", "fingerprints", "configurations"]  # add_arguments too, for the CLI (as every tool has)

HELP = "fingerprints of a fixed set of runs; --configs: the same under every BLAS kernel and SIMD path here"


def add_arguments(p) -> None:
    p.add_argument("--configs", action="store_true",
                   help="run the set under every OPENBLAS_CORETYPE / NPY_DISABLE_CPU_FEATURES this CPU can run and "
                        "compare the fingerprints")
    p.add_argument("--json", action="store_true", help="print the fingerprints (or the comparison) as JSON")
    p.add_argument("--control", action="store_true",
                   help="also fingerprint numpy's own float32 product, exp and tanh (which the configurations change)")
    p.add_argument("--items", nargs="+", default=None, metavar="ITEM",
                   help=f"only these items (default: all of {', '.join(ITEMS)})")


# ------------------------------------------------------------------------------- the items


def _digest(obj) -> str:
    """sha256 (16 hex digits) of the repr of every number, floats to the last bit."""
    def canon(v):
        if isinstance(v, np.ndarray):
            return (v.dtype.str, v.shape, v.tobytes().hex())
        if isinstance(v, (float, np.floating)):
            return float(v).hex()
        if isinstance(v, dict):
            return {k: canon(x) for k, x in sorted(v.items())}
        if isinstance(v, (list, tuple)):
            return [canon(x) for x in v]
        return v
    return hashlib.sha256(repr(canon(obj)).encode()).hexdigest()[:16]


def _arithmetic():
    """The primitives themselves on fixed inputs: products (float32 and float16 values, a long K),
    sums, exp / log / tanh, fpsim's normal draws."""
    from .. import numerics
    from ..numerics.random import normal

    rng = np.random.default_rng(0)
    a = normal(rng, (64, 256))
    b = normal(rng, (256, 32))
    h = a.astype(np.float16).astype(np.float32)
    long_a, long_b = normal(rng, (16, 8192)), normal(rng, (8192, 8))
    x = normal(rng, 100_000, 4.0)
    return {"matmul": numerics.matmul_f32(a, b), "matmul f16": numerics.matmul_f32(h, h.T[:, :64]),
            "matmul long": numerics.matmul_f32(long_a, long_b), "sum": numerics.sum_f32(x.reshape(100, -1), 1),
            "exp": numerics.exp_f32(x), "log": numerics.log_f32(np.abs(x)), "tanh": numerics.tanh_f32(x)}


def _runs(results) -> dict:
    return {name: {"losses": r.losses, "scales": r.scales, "skipped": r.skipped, "died_at": r.died_at,
                   "act": r.act_grad_flushed, "weight": r.weight_grad_flushed, "stalled": r.stalled}
            for name, r in results.items()}


def _reference():
    from ..experiments import DEFAULT_RECIPES, ReferenceTask, compare

    return _runs(compare(DEFAULT_RECIPES, ReferenceTask(), steps=3, progress=False))


def _tinygpt():
    from ..experiments import TinyGPTTask, compare

    return _runs(compare(("fp16-amp", "bf16-master"), TinyGPTTask(), steps=2, progress=False))


def _block():
    from ..experiments import ReferenceTask, compare

    return _runs(compare(("mxfp8",), ReferenceTask(), steps=3, progress=False))


def _tensor_cores():
    from ..experiments import TinyGPTTask, compare

    return _runs(compare(("fp8-hopper",), TinyGPTTask(), steps=1, progress=False))


def _numpy_control():
    """numpy's own float32 product, sum and exp of the same inputs: the library's bits, which the
    configurations DO change - the control that shows they reach what they should."""
    from ..numerics.random import normal

    rng = np.random.default_rng(0)
    a, b = normal(rng, (64, 256)), normal(rng, (256, 32))
    x = normal(rng, 100_000, 4.0)
    with np.errstate(all="ignore"):
        return {"matmul": a @ b, "exp": np.exp(x), "tanh": np.tanh(x), "log1p": np.log1p(np.abs(x))}


CONTROL = "control: numpy's own"

ITEMS = {"arithmetic": _arithmetic, "reference task": _reference, "tiny GPT": _tinygpt, "block recipe": _block,
         "tensor cores": _tensor_cores}


def fingerprints(items=None, control: bool = False) -> dict[str, str]:
    """{item: fingerprint} of :data:`ITEMS` (or the ones named), and with ``control`` numpy's own
    float32 results of the arithmetic (:data:`CONTROL`)."""
    names = list(ITEMS) if items is None else list(items)
    unknown = [n for n in names if n not in ITEMS]
    if unknown:
        raise ValueError(f"unknown item {unknown[0]!r}; known: {', '.join(ITEMS)}")
    out = {n: _digest(ITEMS[n]()) for n in names}
    if control:
        out[CONTROL] = _digest(_numpy_control())
    return out


# ------------------------------------------------------------------------------- the configurations


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


# OpenBLAS kernel families on x86-64 and the CPU flags each needs (DYNAMIC_ARCH builds carry all;
# the newer Cooperlake / SapphireRapids names run SkylakeX's float kernels)
_CORETYPES = (("Nehalem", {"sse4_2"}), ("Sandybridge", {"avx"}), ("Haswell", {"avx2", "fma"}),
              ("Zen", {"avx2", "fma"}), ("SkylakeX", {"avx512f", "avx512bw", "avx512vl", "avx512dq"}))


def _blas_is_openblas() -> bool:
    try:
        from threadpoolctl import threadpool_info

        return any(i.get("internal_api") == "openblas" for i in threadpool_info() if i.get("user_api") == "blas")
    except Exception:  # threadpoolctl failing to read a library: no OpenBLAS kernels to choose
        return False


def _simd_variants() -> list[tuple[str, str]]:
    """(label, NPY_DISABLE_CPU_FEATURES) that turn numpy's optimized loops off in steps: the
    AVX-512 ones, then every dispatched target (down to the build's baseline)."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:  # numpy < 2
        from numpy.core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    have = [t for t in __cpu_dispatch__ if __cpu_features__.get(t)]
    out = []
    wide = [t for t in have if "AVX512" in t or t == "X86_V4"]
    if wide:
        out.append(("numpy without AVX-512", ",".join(wide)))
    if have and set(have) != set(wide):
        out.append(("numpy baseline loops", ",".join(have)))
    return out


def configurations() -> list[tuple[str, dict]]:
    """(label, environment) of every configuration to compare, the default first."""
    configs = [("default", {})]
    if _blas_is_openblas():
        flags = _cpu_flags()
        configs += [(f"OpenBLAS {name}", {"OPENBLAS_CORETYPE": name}) for name, need in _CORETYPES
                    if need <= flags]
    simd = _simd_variants()
    configs += [(label, {"NPY_DISABLE_CPU_FEATURES": v}) for label, v in simd]
    if simd and len(configs) > 2 and configs[1][1].get("OPENBLAS_CORETYPE"):
        label, v = simd[-1]
        configs.append((f"{configs[1][0]} + {label}", {**configs[1][1], "NPY_DISABLE_CPU_FEATURES": v}))
    return configs


def _run_config(env: dict, items) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "NPY_DISABLE_CPU_FEATURES")}
    cmd = [sys.executable, "-m", "fpsim.tools.cli", "bits", "--json", "--control"] + (["--items", *items] if items else [])
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env={**clean, **env}, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"fpsim bits under {env}: exit {done.returncode}: {done.stderr.strip()[-400:]}")
    return {"fingerprints": json.loads(done.stdout)["fingerprints"], "seconds": time.perf_counter() - t0,
            "blas": json.loads(done.stdout)["blas"]}


def _blas_label() -> str:
    try:
        from threadpoolctl import threadpool_info

        libs = [i for i in threadpool_info() if i.get("user_api") == "blas"]
        return ", ".join(f"{i.get('internal_api')} {i.get('architecture', '?')}" for i in libs) or "?"
    except Exception:  # threadpoolctl failing: say so rather than stop
        return "?"


def main(args) -> int:
    items = args.items
    if not args.configs:
        fp = fingerprints(items, args.control)
        if args.json:
            print(json.dumps({"fingerprints": fp, "blas": _blas_label()}))
        else:
            for k, v in fp.items():
                print(f"{k:16s} {v}")
        return 0
    configs = configurations()
    rows, ref = [], None
    for label, env in configs:
        print(f"fpsim bits: {label} ...", file=sys.stderr, flush=True)
        res = _run_config(env, items)
        if ref is None:
            ref = res["fingerprints"]
        differ = [k for k, v in res["fingerprints"].items() if v != ref.get(k) and k != CONTROL]
        control = res["fingerprints"][CONTROL] != ref[CONTROL]
        rows.append({"config": label, "env": env, "blas": res["blas"], "differ": differ,
                     "numpy_differs": control, "seconds": round(res["seconds"], 1)})
    ok = all(not r["differ"] for r in rows)
    if args.json:
        print(json.dumps({"same_bits": ok, "fingerprints": ref, "configs": rows}))
    else:
        from ..textable import text_table

        body = [[r["config"], r["blas"], "same bits" if not r["differ"] else "DIFFER: " + ", ".join(r["differ"]),
                 "-" if r is rows[0] else ("other bits" if r["numpy_differs"] else "same bits"),
                 f"{r['seconds']:.0f}s"] for r in rows]
        print("\n".join(text_table(["configuration", "BLAS", "fpsim's fingerprints", "numpy's own float32",
                                     "time"], body)))
        n_ctrl = sum(r["numpy_differs"] for r in rows)
        print(f"{len(ref) - 1} items x {len(rows)} configurations: " +
              ("every fingerprint the same" if ok else "SOME FINGERPRINTS DIFFER") +
              f"; numpy's own float32 product / exp / tanh gave other bits in {n_ctrl} of {len(rows) - 1}")
    return 0 if ok else 1
