"""How much a dot product loses to the accumulator, against K: float32 accumulation against the
tensor cores' truncating one (:mod:`fpsim.tensorcore`) - Hopper's 13-bit fp8 accumulator with
and without DeepSeek-V3's promotion, Ampere's and Hopper's float16 / bfloat16 - on all-positive
and on zero-mean data.

Each point is ``n`` independent dot products of length K.  Their inputs are |N(0, 1)| (all
positive) or N(0, 1) (zero mean) draws (fpsim's float32 normal draws,
:func:`fpsim.numerics.random.normal`) rounded once into the method's input format; the reference
is their exact dot product rounded once to float64 (the products of two 16-bit or 8-bit values
are exact in float64; their sum is :func:`fpsim.numerics.fsum64`'s), so the error is the
accumulator's alone, and the same bits on every machine.  The relative error of a dot product is
(computed - exact) / |exact|; the sweep's mean is :func:`fpsim.numerics.mean64`.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from .. import tensorcore
from ..checks import check_integer
from ..numerics import fsum64, matmul_f32, mean64
from ..numerics.random import normal
from ..textable import text_table

__all__ = ["Method", "ACCUMULATORS", "DATA", "K_VALUES", "relative_errors", "sweep", "sweep_table", "sweep_figure",
           "speed"]


@dataclass(frozen=True)
class Method:
    """One accumulator: ``arch`` None for fpsim's float32 default (exact products, their exact sum
    rounded once to float32: :func:`fpsim.numerics.matmul_f32`), else the tensor core ``arch``
    with ``promote_every``; ``fmt`` the input format."""

    name: str
    fmt: str
    arch: str | None = None
    promote_every: int | None = None


ACCUMULATORS = {m.name: m for m in (
    Method("float32 (fp8 inputs)", "float8_e4m3fn"),
    Method("hopper fp8", "float8_e4m3fn", "hopper"),
    Method("hopper fp8, promote every 128", "float8_e4m3fn", "hopper", 128),
    Method("hopper fp8, promote every 256", "float8_e4m3fn", "hopper", 256),
    Method("ampere fp16", "float16", "ampere"),
    Method("ampere bf16", "bfloat16", "ampere"),
    Method("hopper fp16", "float16", "hopper"),
    Method("hopper bf16", "bfloat16", "hopper"),
)}
DATA = ("all-positive", "zero-mean")
K_VALUES = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
_DTYPE = {"float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def _method(m) -> Method:
    if isinstance(m, Method):
        return m
    if m not in ACCUMULATORS:
        raise ValueError(f"unknown method {m!r}; known: {', '.join(ACCUMULATORS)}")
    return ACCUMULATORS[m]


def relative_errors(k: int, method="hopper fp8", data: str = "all-positive", n: int = 2048,
                    seed: int = 0) -> np.ndarray:
    """The ``n`` relative errors (float64) of ``n`` dot products of length ``k`` computed by
    ``method`` (a name in :data:`ACCUMULATORS` or a :class:`Method`) on ``data`` (:data:`DATA`)."""
    m = _method(method)
    _check(k, n, data)
    x = normal(np.random.default_rng(seed), (2, n, k))
    return _errors(m, *_inputs(m.fmt, data, x))


def _check(k, n, data) -> None:
    if data not in DATA:
        raise ValueError(f"unknown data {data!r}; known: {', '.join(DATA)}")
    for name, v in (("k", k), ("n", n)):
        check_integer(v, name, 1)


def _inputs(fmt: str, data: str, x: np.ndarray) -> tuple:
    """(a (n, k), b (n, k), their n exact dot products rounded once to float64) from the draws
    ``x`` (2, n, k): |x| for all-positive data, rounded once into ``fmt``."""
    if data == "all-positive":
        x = np.abs(x)
    a, b = x[0].astype(_DTYPE[fmt]), x[1].astype(_DTYPE[fmt])
    return a, b, fsum64(a.astype(np.float64) * b.astype(np.float64), axis=1)  # the products are exact


def _errors(m: Method, a: np.ndarray, b: np.ndarray, exact: np.ndarray) -> np.ndarray:
    a, b = a[:, None, :], b[:, :, None]  # n dot products: (n, 1, k) @ (n, k, 1)
    if m.arch is None:
        got = matmul_f32(a.astype(np.float32), b.astype(np.float32))[:, 0, 0]
    else:
        got = tensorcore.matmul(a, b, arch=m.arch, promote_every=m.promote_every)[:, 0, 0]
    return (got.astype(np.float64) - exact) / np.abs(exact)


def sweep(ks=K_VALUES, methods=tuple(ACCUMULATORS), data=DATA, n: int = 2048, seed: int = 0, progress=None) -> list[dict]:
    """One row per (data, method, K): ``mean`` and ``median`` of the signed relative errors (the
    bias), ``median_abs`` and ``max_abs`` of the |relative errors|.  ``progress``: called with a short
    label before each point (a tqdm's ``set_description``, a print)."""
    ms = [_method(name) for name in methods]
    for d in data:
        for k in ks:
            _check(k, n, d)
    rows = {}
    for k in ks:  # K outermost: each K's draws and inputs are made once, for every method
        x = normal(np.random.default_rng(seed), (2, n, k))
        for d in data:
            inputs = {}
            for m in ms:
                if progress is not None:
                    progress(f"{d}, {m.name}, K={k}")
                if m.fmt not in inputs:
                    inputs[m.fmt] = _inputs(m.fmt, d, x)
                e = _errors(m, *inputs[m.fmt])
                rows[d, m.name, k] = {"data": d, "method": m.name, "k": int(k), "mean": float(mean64(e)),
                                      "median": float(np.median(e)), "median_abs": float(np.median(np.abs(e))),
                                      "max_abs": float(np.abs(e).max())}
    return [rows[d, m.name, k] for d in data for m in ms for k in ks]


def sweep_table(rows: list[dict]) -> str:
    """The rows as text: all-positive data by its mean relative error (%), zero-mean data by the
    median |relative error|; one line per method, one column per K."""
    out = []
    for d in dict.fromkeys(r["data"] for r in rows):
        sub = [r for r in rows if r["data"] == d]
        ks = sorted({r["k"] for r in sub})
        body = []
        for name in dict.fromkeys(r["method"] for r in sub):
            cell = {r["k"]: r for r in sub if r["method"] == name}
            body.append([name] + [(f"{100 * cell[k]['mean']:+.3f}%" if d == "all-positive"
                                   else f"{cell[k]['median_abs']:.2g}") if k in cell else "" for k in ks])
        what = "mean relative error" if d == "all-positive" else "median |relative error|"
        lines = text_table(["method \\ K"] + [str(k) for k in ks], body, right=range(1, len(ks) + 1))
        out.append(f"{d} data, {what}:\n" + "\n".join(lines))
    return "\n\n".join(out)


def sweep_figure(rows: list[dict], path=None):
    """Two panels against K (log scale): all-positive data's loss (minus the mean relative error, in %)
    and zero-mean data's median |relative error|, a line per method, each on a symmetric-log axis:
    logarithmic above a small threshold, so that -0.06% and -0.2% (promotion every 128 and 256) stand
    apart beside -20%, and linear through 0, so that an error of exactly 0 (float32's) is drawn as a
    line along the bottom.  Saved to ``path`` if given; returns the matplotlib figure."""
    import matplotlib

    if path is not None:
        matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, d in zip(axes, DATA):
        sub = [r for r in rows if r["data"] == d]
        for name in dict.fromkeys(r["method"] for r in sub):
            pts = sorted((r["k"], -r["mean"] * 100 if d == "all-positive" else r["median_abs"])
                         for r in sub if r["method"] == name)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=name)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("K (length of the dot product)")
        if d == "all-positive":
            lin = 1e-3  # % lost: 0.001% and below drawn linearly, through 0
            ax.set_ylabel("lost: minus the mean relative error (%)")
            ax.set_title("all-positive inputs: the truncation's bias")
        else:
            lin = 1e-9
            ax.set_ylabel("median |relative error|")
            ax.set_title("zero-mean inputs")
        ax.set_yscale("symlog", linthresh=lin)
        ax.set_ylim(bottom=-0.3 * lin)  # room for the zeros' line below the axis; nothing else is below 0
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig


def speed(m: int = 256, k: int = 4096, n: int = 256, fmt: str = "float8_e4m3fn", arch: str = "hopper",
          repeats: int = 3, seed: int = 0) -> dict:
    """How long :func:`fpsim.tensorcore.matmul` takes on an (m, k) @ (k, n) product against float32
    BLAS on the same values (fpsim's pinned BLAS thread count), measured in turn in this process,
    best of ``repeats`` each: ``{"tensorcore_s", "blas_s", "ratio"}`` (ratio = tensorcore / BLAS)."""
    import time

    from ..state import blas_call

    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(_DTYPE[fmt])
    b = rng.standard_normal((k, n)).astype(_DTYPE[fmt])
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    tc_s, blas_s = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        blas_call(np.matmul, a32, b32)
        t1 = time.perf_counter()
        tensorcore.matmul(a, b, arch=arch)
        t2 = time.perf_counter()
        blas_s.append(t1 - t0)
        tc_s.append(t2 - t1)
    return {"tensorcore_s": min(tc_s), "blas_s": min(blas_s), "ratio": min(tc_s) / min(blas_s)}
