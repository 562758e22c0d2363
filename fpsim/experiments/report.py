"""The tables ``fpsim compare`` prints: one run per recipe (:func:`format_table`), or each
recipe's final loss against the baseline's over several seeds (:func:`format_seed_table`)."""

from __future__ import annotations

import math

from ..lowp import format_scaling_table
from ..numerics import mean64
from ..textable import percent, text_table
from .recipes import RECIPES, get_recipe
from .result import RunResult

__all__ = ["format_table", "format_seed_table"]


def _seed_row(by_seed: dict[int, dict[str, RunResult]], name: str, baseline: str) -> list[str]:
    """One recipe's row of :func:`format_seed_table`."""
    seeds = list(by_seed)
    runs = [by_seed[s][name] for s in seeds]
    ratios = []
    cells = []
    for s, r in zip(seeds, runs):
        b = by_seed[s].get(baseline)
        if r.failure or b is None or b.failure or not math.isfinite(r.final_loss):
            cells.append("failed" if r.failure else "-")
        else:
            ratios.append(r.final_loss / b.final_loss)
            cells.append(f"{ratios[-1]:.3f}x")
    ok = [r.final_loss for r in runs if not r.failure and math.isfinite(r.final_loss)]
    every = len(ratios) == len(seeds)
    return [name, *cells,
            f"{mean64(ratios):.3f}x" if every else "-",
            f"{min(ratios):.3f} - {max(ratios):.3f}" if every else "-",
            f"{mean64(ok):.4e}" if len(ok) == len(seeds) else "-"]


def format_seed_table(by_seed: dict[int, dict[str, RunResult]], baseline: str = "fp32") -> str:
    """One row per recipe: its final loss divided by the baseline's from the same seed, for
    every seed, then the mean and the range of those ratios (``fpsim compare --seeds``)."""
    seeds = list(by_seed)
    names = list(by_seed[seeds[0]])
    cols = ["recipe", *(f"seed {s}" for s in seeds), "mean", "min - max", "mean final loss"]
    rows = [_seed_row(by_seed, name, baseline) for name in names]
    out = [*text_table(cols, rows, right=range(1, len(cols))), "",
           f"Each entry: the recipe's final loss / {baseline}'s final loss from the same initial weights (the",
           "seed) and the same data.  Two recipes whose ranges overlap are not told apart by these seeds."]
    failed = [f"{n} (seed {s}): {by_seed[s][n].failure}" for s in seeds for n in names if by_seed[s][n].failure]
    if failed:
        out += ["", "failed runs:", *(f"  {f}" for f in failed)]
    return "\n".join(out)


def _pct(d: dict, k, digits: int = 1) -> str:
    return percent(d[k], digits=digits) if k in d else "-"


def _nonfinite_cell(r) -> str:
    """Where the first inf / NaN was made (transformer task): step, op, module, direction."""
    nf = r.nonfinite
    if nf is None:
        return "-"
    return f"step {nf.step}: {nf.op} in {nf.where} ({nf.direction})"


def _died_at(r: RunResult) -> str:
    step = r.died_at
    return f" at step {step}" if step is not None else ""


def _run_row(name: str, r: RunResult, base: RunResult | None, quality_col: bool = True) -> list[str]:
    """One recipe's row of :func:`format_table`."""
    first = min(r.act_grad_flushed) if r.act_grad_flushed else None
    last = max(r.act_grad_flushed) if r.act_grad_flushed else None
    ok = math.isfinite(r.final_loss)
    rel = f"{r.final_loss / base.final_loss:.3f}x" if base and ok and base.final_loss > 0 else "-"
    acc = r.accuracy  # the transformer task reports answer accuracy, not R^2
    quality = (percent(acc, digits=1) if acc is not None and math.isfinite(acc) else "-") if acc is not None else (
        f"{r.r2:.4f}" if ok and r.r2 is not None and math.isfinite(r.r2) else "-")
    row = [
        name, f"{r.final_loss:.4e}" if ok else "diverged" + _died_at(r), rel, *([quality] if quality_col else []),
        f"{r.steps_skipped} ({percent(r.steps_skipped, len(r.skipped), digits=0)})" if r.skipped else "0",
        "per tensor" if r.fp8 else f"{r.final_scale:g}",
        f"{_pct(r.act_grad_flushed, first)} -> {_pct(r.act_grad_flushed, last)}" if first is not None else "-",
        _pct(r.weight_grad_flushed, last, 2) if last is not None else "-",
        _pct(r.stalled, max(r.stalled)) if r.stalled else "-",
    ]
    if r.traced:
        row.append(_nonfinite_cell(r))
    return row + [f"{r.seconds:.1f}s"]


def _fp8_lines(results: dict[str, RunResult]) -> list[str]:
    """The per-tensor scale table of every fp8 run, and what its columns mean."""
    lines = []
    for name, r in results.items():
        if r.fp8:
            rec = get_recipe(name).fp8 if name in RECIPES else None
            title = f"{name}: per-tensor fp8 scales after the last step" + (f" ({rec})" if rec else "")
            lines += ["", format_scaling_table(r.fp8, title)]
    if any(r.fp8 for r in results.values()):
        lines += ["  (saturated: clamped to +-max by the saturating cast; flushed to 0: non-zero values the cast "
                  "lost; for fp8 recipes act-grad 0s counts the e5m2 gradient casts)"]
    return lines


def format_table(results: dict[str, RunResult], baseline: str = "fp32") -> str:
    """The comparison table ``fpsim compare`` prints, with a legend."""
    base = results.get(baseline)
    gpt = any(r.traced for r in results.values())
    # a quality column where the task has a measure of it (R^2, answer accuracy)
    quality = gpt or any(r.r2 is not None or r.accuracy is not None for r in results.values())
    cols = ["recipe", "final loss", f"vs {baseline}", *(["answer acc" if gpt else "R^2"] if quality else []),
            "skipped", "final scale", "act-grad 0s first->last", "weight-grad 0s", "stalled",
            *(["first non-finite"] if gpt else []), "time"]
    lines = text_table(cols, [_run_row(name, r, base, quality) for name, r in results.items()])
    notes = [f"  {n}: {r.failure}" for n, r in results.items() if r.failure]
    notes += [f"  {n}: {note}" for n, r in results.items() for note in r.notes]
    if notes:
        lines += ["", "where it went wrong:", *notes]
    lines += _fp8_lines(results)
    lines += [
        "",
        "act-grad 0s: gradients flowing between layers that float32 had non-zero and the low format",
        "  flushed to 0, at the first and the last step; weight-grad 0s: the same for weight gradients.",
        "skipped: optimizer steps a loss scaler skipped because the scaled gradients held inf/NaN (share of steps).",
    ]
    if gpt:
        lines += [
            "final loss: cross-entropy on the answer tokens of the evaluation batch; answer acc: sorted digits",
            "  predicted exactly.  first non-finite: the step and op that first MADE an inf or NaN from finite",
            "  inputs (fpsim.trace_nonfinite), loss-scaler overflows aside - those are normal and skipped.",
        ]
    else:
        lines += [
            "stalled: parameter entries (masters where there are masters) that the last step left unchanged -",
            "  their update was below half an ulp." + ("  R^2: 1 - reconstruction error / variance of the data."
                                                     if quality else ""),
        ]
    carried = [n for n in results if n in RECIPES and RECIPES[n].update_rounding != "nearest"]
    if carried:
        lines += [f"  For {', '.join(carried)} a stalled update is not lost: Kahan summation keeps it in the",
                  "  compensation buffer, and stochastic rounding moves the weight by it on average."]
    return "\n".join(lines)
