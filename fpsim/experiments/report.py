"""The tables ``fpsim compare`` prints: one run per recipe (:func:`format_table`), or each
recipe's final loss against the baseline's over several seeds (:func:`format_seed_table`)."""

from __future__ import annotations

import math
import re
import textwrap

from ..checks import check_integer
from ..lowp import format_scaling_table
from ..numerics import mean64
from ..textable import percent, text_table
from .recipes import RECIPES, get_recipe
from .result import Column, RunResult

__all__ = ["format_table", "format_seed_table", "split_table", "split_table_text", "wrap_line"]


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


def _nonfinite_cell(nf) -> str:
    """Where the first inf / NaN was made: step, op, module, direction."""
    if nf is None:
        return "-"
    return f"step {nf.step}: {nf.op} in {nf.where} ({nf.direction})"


def _died_at(r: RunResult) -> str:
    step = r.died_at
    return f" at step {step}" if step is not None else ""


def _cell(r: RunResult, col: Column) -> str:
    """The run's value in a column its task declared (``-`` where it has none)."""
    if col not in r.columns:
        return "-"
    v = r.metrics[col.key] if col.key in r.metrics else getattr(r, col.key, None)
    if col.style == "nonfinite":
        return _nonfinite_cell(v)
    if v is None or not math.isfinite(v) or (col.live_only and not math.isfinite(r.final_loss)):
        return "-"
    return percent(v, digits=1) if col.style == "percent" else f"{v:.4f}"


def _columns(results: dict[str, RunResult]) -> list[Column]:
    """Every column the runs' tasks declare, in the order first declared."""
    return list(dict.fromkeys(c for r in results.values() for c in r.columns))


def _run_row(name: str, r: RunResult, base: RunResult | None, columns: list[Column]) -> list[str]:
    """One recipe's row of :func:`format_table`."""
    first = min(r.act_grad_flushed) if r.act_grad_flushed else None
    last = max(r.act_grad_flushed) if r.act_grad_flushed else None
    ok = math.isfinite(r.final_loss)
    rel = f"{r.final_loss / base.final_loss:.3f}x" if base and ok and base.final_loss > 0 else "-"
    return [
        name, f"{r.final_loss:.4e}" if ok else "diverged" + _died_at(r), rel,
        *(_cell(r, c) for c in columns if c.place == "quality"),
        f"{r.steps_skipped} ({percent(r.steps_skipped, len(r.skipped), digits=0)})" if r.skipped else "0",
        "per tensor" if r.fp8 else f"{r.final_scale:g}",
        f"{_pct(r.act_grad_flushed, first)} -> {_pct(r.act_grad_flushed, last)}" if first is not None else "-",
        _pct(r.weight_grad_flushed, last, 2) if last is not None else "-",
        _pct(r.stalled, max(r.stalled)) if r.stalled else "-",
        *(_cell(r, c) for c in columns if c.place == "end"),
        f"{r.seconds:.1f}s",
    ]


def _fp8_lines(results: dict[str, RunResult]) -> list[str]:
    """The per-tensor scale table of every fp8 run, and what its columns mean."""
    lines = []
    for name, r in results.items():
        if r.fp8:
            rec = get_recipe(name).layers if name in RECIPES else None
            title = f"{name}: per-tensor fp8 scales after the last step" + (f" ({rec})" if rec else "")
            lines += ["", format_scaling_table(r.fp8, title)]
    if any(r.fp8 for r in results.values()):
        lines += ["  (saturated: clamped to +-max by the saturating cast; flushed to 0: non-zero values the cast "
                  "lost; for fp8 recipes act-grad 0s counts the e5m2 gradient casts)"]
    return lines


# The legend's closing lines where no run's task declares its own (Task.table_legend).
STALLED_LEGEND = ("stalled: parameter entries (masters where there are masters) that the last step left unchanged -",
                  "  their update was below half an ulp.")


def format_table(results: dict[str, RunResult], baseline: str = "fp32", width: int | None = None) -> str:
    """The comparison table ``fpsim compare`` prints, with a legend; beside the common columns,
    the ones the runs' tasks declare (:attr:`RunResult.columns`), and their legend.

    ``width``: the narrow rendering a notebook needs (the labs pass 100, where JupyterLab would
    wrap a longer line mid-number): the table split by columns into parts that each start with the
    recipe, the notes and legend wrapped between words, the same cells and words.  None, the
    default and ``fpsim compare``'s, is the one wide table."""
    check_integer(width, "width (characters)", 40, none=True)
    base = results.get(baseline)
    columns = _columns(results)
    cols = ["recipe", "final loss", f"vs {baseline}", *(c.title for c in columns if c.place == "quality"),
            "skipped", "final scale", "act-grad 0s first->last", "weight-grad 0s", "stalled",
            *(c.title for c in columns if c.place == "end"), "time"]
    rows = [_run_row(name, r, base, columns) for name, r in results.items()]
    lines = text_table(cols, rows) if width is None else split_table(cols, rows, width)
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
    lines += next((list(r.legend) for r in results.values() if r.legend is not None), list(STALLED_LEGEND))
    carried = [n for n in results if n in RECIPES and RECIPES[n].update_rounding != "nearest"]
    if carried:
        lines += [f"  For {', '.join(carried)} a stalled update is not lost: Kahan summation keeps it in the",
                  "  compensation buffer, and stochastic rounding moves the weight by it on average."]
    return "\n".join(lines) if width is None else "\n".join(wrap_line(part, width) for line in lines
                                                       for part in split_table_text(line, width).split("\n"))


def split_table(cols: list[str], rows: list[list[str]], width: int, right=()) -> list[str]:
    """:func:`text_table`'s lines for ``cols`` / ``rows`` (``right``: the right-aligned column
    indices), split by columns into as many tables as it takes (a blank line between them) for no
    line to pass ``width``: each part starts with the first column, so every row is still named;
    a single column wider than ``width`` stays whole."""
    def part(g):
        return text_table([cols[c] for c in g], [[r[c] for c in g] for r in rows],
                          right=[j for j, c in enumerate(g) if c in set(right)])

    groups = [[0]]
    for i in range(1, len(cols)):
        if max(map(len, part(groups[-1] + [i]))) > width and len(groups[-1]) > 1:
            groups.append([0])
        groups[-1].append(i)
    out = []
    for g in groups:
        out += ([""] if out else []) + part(g)
    return out


def split_table_text(text: str, width: int) -> str:
    """``text`` holding one table as :func:`text_table` prints it (optional title lines, a header,
    a rule of dashes, rows up to the first blank line, anything after passed through), with the
    table split by columns as :func:`split_table` does when a line passes ``width``; the rule's
    dashes give each column's span, a right-aligned column stays right-aligned.  Text with no
    such table, or one that fits, comes back as it was."""
    lines = text.split("\n")
    rule = next((i for i, line in enumerate(lines) if line.strip() and set(line) <= {"-", " "}), 0)
    if rule == 0 or max(map(len, lines)) <= width:
        return text
    end = next((i for i in range(rule + 1, len(lines)) if not lines[i].strip()), len(lines))
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", lines[rule])]
    table = [lines[rule - 1], *lines[rule + 1:end]]
    cells = [[line[a:b] for a, b in spans] for line in table]
    full = cells[1:]
    right = [j for j in range(len(spans)) if all(r[j] == r[j].rstrip() for r in full if r[j].strip())
             and any(r[j][:1] == " " for r in full if r[j].strip())]
    rows = [[c.strip() for c in row] for row in cells]
    return "\n".join([*lines[:rule - 1], *split_table(rows[0], rows[1:], width, right), *lines[end:]])


def wrap_line(line: str, width: int) -> str:
    """``line`` broken between words onto lines of at most ``width`` characters, each continuation
    indented two spaces past the line's own indent (a word longer than that stays whole); the
    lines of a table (columns two spaces apart, its rule of dashes) are left as they are."""
    if len(line) <= width or "   " in line.strip() or set(line) <= {"-", " "}:
        return line
    indent = line[:len(line) - len(line.lstrip())]
    return "\n".join(textwrap.wrap(line.strip(), width, initial_indent=indent, subsequent_indent=indent + "  ",
                                    break_long_words=False, break_on_hyphens=False))
