"""``mxfp8-scale-rounding``: the OCP floor rule for MX's shared scale saturates block maxima;
rounding the scale up does not (arXiv 2506.08027).

Under the spec's rule the shared exponent is floor(log2 amax) - 8 for e4m3, so a block's max
lands in [256, 512) and saturates to 448 whenever its significand is above 1.75.  ``ceil`` and
``rceil`` (NVIDIA's: amax / 448 rounded up to a power of two) put it at or below 448 always;
``even`` rounds amax to e4m3's precision first.  Measured per rule with ``fpsim.quantize``
(blocks of 32 consecutive values): the share of blocks holding a saturated element, the
relative MSE sum((q - x)^2) / sum(x^2), and the bias sum(|q| - |x|) / sum(|x|) (saturation
only shrinks magnitudes).  Full runs also train the tiny GPT with every Linear in MXFP8 under
floor and under rceil scales over the seeds, and report the ratio of the final losses; the
verdict rests on the saturation counts.
"""

from __future__ import annotations

import numpy as np

from ...formats import quantize
from ...lowp import BlockScaling
from ...numerics import fsum64, mean64
from ..recipes import Recipe
from .base import FINDINGS, Finding, Sweep, pct, say
from .samples import SAMPLES, sample

NAME = "mxfp8-scale-rounding"
RULES = ("floor", "ceil", "even", "rceil")
SOURCE_GAUSSIAN = 0.169
TRAIN_STEPS = 40  # full runs: the tiny GPT in MXFP8 under floor and rceil (about 2 x 25 s here)


def measure(x: np.ndarray, rule: str, fmt: str = "mxfp8_e4m3") -> dict:
    """Saturated-block share, relative MSE and relative bias of ``x`` (float32, 1-D) quantized
    in blocks of 32 under scale rule ``rule``; every sum exact, rounded once to float64
    (:func:`fpsim.numerics.fsum64`)."""
    q = quantize(x, fmt, scale_rounding=rule)
    d = q.dequantize().astype(np.float64)
    x64 = x.astype(np.float64)
    sq = float(fsum64(x64 ** 2))
    return {"saturated": float((q.stats.saturated > 0).mean()),
            "mse": float(fsum64((d - x64) ** 2)) / sq if sq else 0.0,
            "bias": float(fsum64(np.abs(d) - np.abs(x64)) / fsum64(np.abs(x64))) if sq else 0.0}


def measure_rules(quick: bool = True, seeds=(0,), progress=None) -> tuple[dict, dict]:
    """Per sample kind and rule, the seed means of :func:`measure` (quick runs sample with the first
    seed only: ``seed_use``), and the same as the figure's series."""
    n = 2**16 if quick else 2**20
    numbers = {}
    for kind in SAMPLES:
        say(progress, f"{kind}: quantizing under {', '.join(RULES)}")
        for seed in seeds:
            x = sample(kind, n, seed)
            for rule in RULES:
                for key, v in measure(x, rule).items():
                    k = f"{kind}_{rule}_{key}"
                    numbers[k] = numbers.get(k, 0.0) + v / len(seeds)
    return numbers, dict(numbers)


TRAINED = {rule: Recipe(f"mxfp8-{rule}", "float32", layers=BlockScaling("mxfp8_e4m3", scale_rounding=rule))
           for rule in ("floor", "rceil")}
# full runs: the tiny GPT with every Linear in MXFP8 under floor and under rceil scales
SWEEP = Sweep("tinygpt", tuple(TRAINED.values()), full_steps=TRAIN_STEPS, modes=("full",))


def extract(runs: dict) -> dict:
    """The mean over seeds of floor's final evaluation loss over rceil's (nothing in a quick run)."""
    if not runs:
        return {}
    floor, rceil = runs[TRAINED["floor"].name], runs[TRAINED["rceil"].name]
    return {"tinygpt_floor_over_rceil": float(mean64([f.final_loss / r.final_loss for f, r in zip(floor, rceil)]))}


def measured(numbers: dict, series: dict) -> str:
    text = (f"saturated blocks under floor: Gaussian {pct(numbers['gaussian_floor_saturated'])}, Student-t "
            f"{pct(numbers['student_t3_floor_saturated'])}, reference grads "
            f"{pct(numbers['reference_grads_floor_saturated'])}, tiny-GPT grads "
            f"{pct(numbers['tinygpt_grads_floor_saturated'])}; ceil / rceil "
            f"{pct(max(numbers[f'{k}_{r}_saturated'] for k in SAMPLES for r in ('ceil', 'rceil')))}")
    if "tinygpt_floor_over_rceil" in numbers:
        text += (f"; tiny GPT, {TRAIN_STEPS} steps of MXFP8: final loss floor / rceil "
                 f"{numbers['tinygpt_floor_over_rceil']:.3f}x (seed mean)")
    return text


def verdict(numbers: dict) -> tuple[str, str]:
    floor = numbers["gaussian_floor_saturated"]
    up = max(numbers[f"{k}_{r}_saturated"] for k in SAMPLES for r in ("ceil", "rceil"))
    if up > 0:
        return "not at this scale", f"rounding the scale up still saturated {pct(up)} of blocks"
    if abs(floor - SOURCE_GAUSSIAN) <= 0.02:
        return "reproduced", (f"floor saturates {pct(floor)} of Gaussian blocks (source 16.9%) and rounding the "
                              "scale up saturates none")
    if floor > 0:
        return "partly", (f"floor saturates {pct(floor)} of Gaussian blocks, not the source's 16.9%, while rounding "
                          "up saturates none")
    return "not at this scale", "floor saturated no Gaussian block"


def draw(ax, numbers: dict) -> None:
    """Per sample kind and rule, the share of blocks holding a saturated element."""
    width = 0.8 / len(RULES)
    for i, rule in enumerate(RULES):
        ax.bar(np.arange(len(SAMPLES)) + i * width, [100 * numbers[f"{k}_{rule}_saturated"] for k in SAMPLES],
               width, label=rule)
    ax.axhline(100 * SOURCE_GAUSSIAN, color="k", lw=0.8, ls="--", label="source: 16.9% (Gaussian, floor)")
    ax.set_xticks(np.arange(len(SAMPLES)) + 0.4 - width / 2, SAMPLES)
    ax.set_ylabel("blocks with a saturated element (%)")
    ax.set_title("MXFP8 e4m3: the shared scale's rounding rule")
    ax.legend()


FINDING = FINDINGS.register(Finding(
    NAME, "The OCP floor rule for MXFP8's shared scale saturates the largest element of many blocks; "
          "rounding the scale up (ceil, rceil) saturates none.",
    "arXiv 2506.08027", "16.9% of Gaussian 32-blocks saturate under floor (19.6% Student-t, 3 dof); 0% under "
                        "ceil / rceil", (2.0, 60.0), order=70, verdict=verdict, measured=measured,
    measure=measure_rules, sweep=SWEEP, extract=extract, figure=draw, seed_use="first-when-quick"))
