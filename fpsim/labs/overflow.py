"""Lab 09 support (where half precision overflows): the same attention computed several ways,
and the self-checks of the lab's exercises (here, so that the tests can hold each plausible
wrong answer against the very check the notebook runs).
"""

from __future__ import annotations

import math

import numpy as np

from .. import ops
from ..amp import autocast
from ..formats import get_format
from ..tensor import tensor
from ..textable import text_table

__all__ = ["FP16_MIN", "attention_variants", "variant_table", "check_exercise1", "check_exercise2",
           "check_exercise3"]

FP16_MIN = float(np.finfo(np.float16).min)  # -65504: the additive mask value many float16 models use


def attention_variants(q, k, v, pad=None) -> dict:
    """Causal attention of the float64 arrays q, k, v (..., T, d) computed five ways; name ->
    float32 numpy result.  ``pad``: a boolean key mask (True = a real token) for every variant."""
    def run(fmt, **kw):
        t = [tensor(a, fmt) for a in (q, k, v)]
        out = ops.scaled_dot_product_attention(*t, pad, is_causal=True, **kw)
        return np.asarray(out.numpy(), dtype=np.float32)

    out = {
        "float32": run("float32"),
        "float16": run("float16"),
        "float16, no max-subtraction": run("float16", stable=False),
        "float16, finfo.min mask": run("float16", mask_value=FP16_MIN),
    }
    with autocast("float16"):
        out["autocast float16"] = run("float32")
    return out


def variant_table(outs: dict) -> str:
    """One row per variant: NaNs, infs, and the largest difference from float32 (finite entries)."""
    ref = outs["float32"].astype(np.float64)
    rows = []
    for name, y in outs.items():
        y64 = y.astype(np.float64)
        fin = np.isfinite(y64) & np.isfinite(ref)
        err = float(np.abs(y64[fin] - ref[fin]).max()) if fin.any() else math.nan
        rows.append([name, str(int(np.isnan(y64).sum())), str(int(np.isinf(y64).sum())), f"{err:.3g}"])
    return "\n".join(text_table(["variant", "NaN", "inf", "max |diff| vs float32"], rows, right=(1, 2, 3)))


# ------------------------------------------------------------------------------------ self-checks


def _naive_softmax_right(s: int, n: int, fmt: str) -> bool:
    """Whether the naive softmax of n scores all equal to s gives 1/n everywhere (to 1%)."""
    y = np.asarray(ops.softmax(tensor(np.full((1, n), float(s)), fmt), stable=False).f32(), dtype=np.float64)
    return bool(np.all(np.abs(y - 1.0 / n) <= 0.01 / n))


def check_exercise1(exercise1) -> None:
    """exercise1(fmt, n): the largest integer score s for which the naive softmax (no
    max-subtraction) of a row of n scores all equal to s still gives 1/n everywhere in ``fmt``.
    Past it the row is NaN (exp overflowed: inf / inf) or all 0 (only the sum overflowed)."""
    for fmt, n in (("float16", 1), ("float16", 2), ("float16", 32), ("bfloat16", 4), ("float32", 3)):
        got = exercise1(fmt, n)
        assert isinstance(got, int | np.integer), f"exercise1({fmt!r}, {n}): expected an integer, got {got!r}"
        assert _naive_softmax_right(got, n, fmt), (
            f"exercise1({fmt!r}, {n}): expected a score whose naive softmax still gives 1/n, got {got}, "
            f"where it is already wrong (NaN or 0)")
        assert not _naive_softmax_right(got + 1, n, fmt), (
            f"exercise1({fmt!r}, {n}): expected the largest such score, got {got}, but {got + 1} still gives 1/n")


def _mask_sum(m: float, fmt: str) -> float:
    """-m + finfo.min of ``fmt`` (its most negative finite number), added in ``fmt``."""
    f = get_format(fmt)
    return (tensor([-m], fmt) + tensor([-f.max], fmt)).item()


def _next_below(m: float, fmt: str) -> float:
    """The number of ``fmt`` just below the positive number m."""
    f = get_format(fmt)
    a = np.asarray([m], dtype=np.float64).astype(f.dtype)
    u = a.view(np.uint16 if a.itemsize == 2 else np.uint8) - 1
    return float(u.view(f.dtype).astype(np.float64)[0])


def check_exercise2(exercise2) -> None:
    """exercise2(fmt): the smallest positive score magnitude m (a number of ``fmt``) for which
    -m + finfo(fmt).min, added in ``fmt``, rounds to -inf."""
    for fmt in ("float16", "bfloat16", "float8_e5m2"):
        m = float(exercise2(fmt))
        f = get_format(fmt)
        with np.errstate(over="ignore"):  # a wrong answer may be beyond the format: then it is inf, not m
            back = float(np.asarray([m]).astype(f.dtype).astype(np.float64)[0])
        assert m > 0 and back == m, (
            f"exercise2({fmt!r}): expected a positive number of {fmt}, got {m!r}")
        assert _mask_sum(m, fmt) == -math.inf, (
            f"exercise2({fmt!r}): expected an m for which -m + finfo.min is -inf, got {m:g}, where it is still finite")
        below = _next_below(m, fmt)
        assert _mask_sum(below, fmt) > -math.inf, (
            f"exercise2({fmt!r}): expected the smallest such m, got {m:g}, but -{below:g} + finfo.min is -inf too")


def _ln_right(a: int, n: int) -> bool:
    """Whether layer_norm with float16 statistics normalises the row +a, -a, +a, ... of n values
    as float32 statistics do (to 2%)."""
    x = tensor(np.where(np.arange(n) % 2 == 0, float(a), -float(a)).reshape(1, n), "float16")
    got = np.asarray(ops.layer_norm(x, n, acc="float16").f32(), dtype=np.float64)
    want = np.asarray(ops.layer_norm(x, n).f32(), dtype=np.float64)
    return bool(np.all(np.abs(got - want) <= 0.02 * np.abs(want)))


def check_exercise3(exercise3) -> None:
    """exercise3(n): the largest integer a for which layer_norm of a row of n values +a, -a,
    +a, ... with float16 statistics (``acc="float16"``) still normalises it.  Past it the sum
    of squares is inf: the row comes out NaN or all 0 (1 / sqrt(inf) = 0)."""
    for n in (64, 16, 100, 7):
        got = exercise3(n)
        assert isinstance(got, int | np.integer), f"exercise3({n}): expected an integer, got {got!r}"
        assert _ln_right(got, n), (
            f"exercise3({n}): expected activations that float16 statistics still normalise, got {got}, "
            f"which already come out wrong (NaN or 0)")
        assert not _ln_right(got + 1, n), (
            f"exercise3({n}): expected the largest such activation, got {got}, but {got + 1} is still fine")
