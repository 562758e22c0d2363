"""The worked examples of the source material, computed exactly and explained.

(a) g = 1e-8 vanishes in float16, survives x1024 as the SUBNORMAL 1.0251998901367188e-05,
    and comes back (divided in float32) as 1.0011717677116394e-08.
(b) g = 2.45e-6 is already subnormal in float16 (the source text calls it normal); x2**15
    it becomes the normal 0.08026123046875.
(c) the vanishing update: 1.0 + 2.45e-10 is 1.0 in float16, bfloat16 AND float32.

Every value is reported with its category in the format and its relative error against the
exact (float64) value it stands for.  ``fpsim example`` prints these; labs 02 and 03 use them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .formats import CATEGORIES, classify, get_format, round_to

__all__ = [
    "Step",
    "scaling_example",
    "smallest_normalizing_scale",
    "normal_scale_range",
    "smallest_surviving_update",
    "vanishing_update",
    "format_steps",
]


@dataclass(frozen=True)
class Step:
    """One line of a worked example: what was computed, in which format, and what it became."""

    label: str
    format: str
    value: float  # the value held after this step
    exact: float  # the value it should be (float64)
    category: str  # zero / subnormal / normal / inf / nan, in `format`
    note: str = ""  # replaces the relative error where that says nothing (a lost update)

    @property
    def rel_error(self) -> float:
        """(value - exact) / exact; -1.0 means it vanished."""
        if self.exact == 0:
            return 0.0 if self.value == 0 else math.inf
        return (self.value - self.exact) / self.exact


def _category(x: float, fmt) -> str:
    return CATEGORIES[int(classify(np.float64(x), fmt).category)]


def scaling_example(grad: float = 1e-8, scale: float = 1024.0, fmt="float16") -> list[Step]:
    """Loss scaling, one gradient: cast directly, scale then cast, divide back in float32.

    The gradient starts as the float32 value a float32 backward pass would hold.  Scaling
    multiplies in float32 (one rounding; exact for a power-of-two scale), the product is
    rounded once into ``fmt``, and unscaling multiplies by float32(1 / scale) in float32,
    as PyTorch's GradScaler does.  The last step shows the same division done in ``fmt``.
    """
    f = get_format(fmt)
    f32_max = float(np.finfo(np.float32).max)
    if not (grad == grad and math.isfinite(grad)):
        raise ValueError(f"grad must be a finite number, got {grad!r}")
    if abs(grad) > f32_max:
        raise ValueError(f"grad must be a float32 number (|grad| <= {f32_max:g}), got {grad!r}")
    if not (math.isfinite(scale) and 0 < scale <= f32_max):
        raise ValueError(f"scale must be a finite float32 number > 0 (<= {f32_max:g}), got {scale!r}")
    with np.errstate(all="ignore"):  # overflow to inf and underflow to 0 are what the rows show
        g32 = np.float32(grad)
        direct = float(round_to(g32, f))
        scaled32 = g32 * np.float32(scale)
        scaled = float(round_to(scaled32, f))
        inv = np.float32(1.0 / np.float64(scale))
        recovered = float(np.float32(scaled) * inv)
        recovered_low = float(round_to(np.float32(scaled) * inv, f))
    return [
        Step(f"g = {grad:g} cast straight to {f.name}", f.name, direct, grad, _category(direct, f)),
        Step(f"S*g = {scale:g} x {grad:g} cast to {f.name}", f.name, scaled, grad * scale, _category(scaled, f)),
        Step("unscaled in float32: (S*g) x float32(1/S)", "float32", recovered, grad, _category(recovered, "float32")),
        Step(f"unscaled in {f.name} instead", f.name, recovered_low, grad, _category(recovered_low, f)),
    ]


def smallest_normalizing_scale(grad: float, fmt="float16") -> float:
    """The smallest power of two S >= 1 for which S*|grad| is a normal number of ``fmt``.
    ValueError when S*|grad| overflows ``fmt`` already at that S (no scale >= 1 helps: see
    :func:`normal_scale_range` for the scales below 1 that do)."""
    f = get_format(fmt)
    if grad == 0 or not math.isfinite(grad):
        raise ValueError(f"grad must be finite and non-zero, got {grad!r}")
    lo, hi = normal_scale_range(grad, f)
    if hi < max(lo, 0):
        raise ValueError(f"grad {grad!r} x 2^{max(lo, 0)} overflows {f.name} (max {f.max:g}): no scale >= 1 makes "
                         f"it normal; 2^{hi} or below does")
    k = max(lo, 0)
    if k > 1023:
        raise ValueError(f"grad {grad!r} needs a scale of 2^{k}, beyond float64")
    return math.ldexp(1.0, k)


def normal_scale_range(grad: float, fmt="float16") -> tuple[int, int]:
    """``(k_lo, k_hi)``: the powers of two 2^k (k of any sign) for which 2^k * |grad|, rounded
    to nearest into ``fmt``, is a NORMAL number - neither subnormal or flushed (k < k_lo) nor
    overflowed (k > k_hi).  2^k * |grad| is exact in float64 over the range searched."""
    f = get_format(fmt)
    a = abs(float(grad))
    if a == 0 or not math.isfinite(a):
        raise ValueError(f"grad must be finite and non-zero, got {grad!r}")
    normal = lambda k: _category(math.ldexp(a, k), f) == "normal"  # noqa: E731
    # differences of logs: no overflow for tiny a.  The logs only start the two searches, a step
    # or more outside the answer, and the loops walk to it exactly: the C library's log2 (its last
    # bit differs between machines) cannot change the k_lo and k_hi returned.
    lo = math.floor(math.log2(f.tiny) - math.log2(a)) - 1
    while not normal(lo):
        lo += 1
    hi = math.ceil(math.log2(f.max) - math.log2(a)) + 1
    while not normal(hi):
        hi -= 1
    return lo, hi


def smallest_surviving_update(w: float, fmt) -> float:
    """Half the ulp of ``w`` in ``fmt``: an update must be strictly larger to change w.

    (Exactly half an ulp is a tie; with ties to even it survives only when w's last
    mantissa bit is odd - never for w = 1.0.)
    """
    from .formats import ulp

    return float(ulp(w, fmt)) / 2


def vanishing_update(
    w: float = 1.0, update: float = 2.45e-10, formats=("float16", "bfloat16", "float32")
) -> list[Step]:
    """w + update, computed in float32 and rounded once into each format."""
    steps = []
    for name in formats:
        f = get_format(name)
        w_f = float(round_to(np.float64(w), f))
        new = float(round_to(np.float32(w_f) + np.float32(update), f) if f.name != "float32"
                    else np.float32(w_f) + np.float32(update))
        note = "update lost: w unchanged" if new == w_f else f"kept: w moved by {new - w_f:.6g}"
        steps.append(Step(f"{w:g} + {update:g} in {f.name}", f.name, new, w + update, _category(new, f), note))
    return steps


def format_steps(steps: list[Step]) -> str:
    """A small aligned table of steps, the way ``fpsim example`` prints it: each column as wide as
    its widest entry, so that the labs' tables fit in 100 characters."""
    rows = []
    for s in steps:
        if math.isnan(s.value) and not math.isnan(s.exact):
            err = "overflowed to NaN" if math.isfinite(s.exact) else "NaN"
        elif math.isinf(s.value) and math.isfinite(s.exact):
            err = "overflowed to inf"
        else:
            err = "vanished" if s.value == 0 and s.exact != 0 else f"{s.rel_error:+.3%}"
        rows.append((s.label, repr(s.value), s.category, s.note or f"rel.err {err}"))
    w = [max((len(r[c]) for r in rows), default=0) for c in range(3)]
    return "\n".join(f"  {a:<{w[0]}} -> {b:<{w[1]}}  {c:<{w[2]}}  {tail}" for a, b, c, tail in rows)
