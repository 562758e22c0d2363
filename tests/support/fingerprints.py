"""Fingerprints of a comparison's numbers and table (shared by the refactor-invariance tests)."""
import hashlib
import re

REF_FIELDS = ("recipe", "losses", "scales", "skipped", "act_grad_flushed", "weight_grad_flushed", "stalled",
              "scaler", "died_at", "frozen_fraction", "r2", "failure", "fp8")
GPT_FIELDS = ("recipe", "losses", "scales", "skipped", "act_grad_flushed", "weight_grad_flushed", "died_at",
              "accuracy", "eval_loss", "scaler_overflows", "notes", "fp8")


METRICS = ("r2", "accuracy", "eval_loss")  # a task's numbers: read from RunResult.metrics (None where absent)


def field(r, name: str):
    """A RunResult's field, or its task's metric of that name."""
    return r.metrics.get(name) if name in METRICS else getattr(r, name)


def numbers(results, fields) -> str:
    """sha256 (16 hex digits) of repr() of the fields (a RunResult's, or its task's metrics), every
    float to the last bit (NaN == NaN), and of where the first non-finite value was made (tiny GPT)."""
    rows = [repr((name, [(f, field(r, f)) for f in fields], repr(getattr(r, "nonfinite", None))))
            for name, r in results.items()]
    return hashlib.sha256("\n".join(rows).encode()).hexdigest()[:16]


def table(text: str) -> str:
    """sha256 (16 hex digits) of a table with its timing column (the last: "time", its dashes and
    "1.2s") taken out - the column's width follows the longest time, so its dashes go too."""
    lines = []
    for line in text.splitlines():
        if re.search(r"\s+[0-9.]+s$", line) or re.search(r"\s+time$", line) or re.fullmatch(r"[- ]*-", line):
            line = re.sub(r"\s+\S+$", "", line)
        lines.append(line)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def assert_pinned(pins: dict, name: str, got) -> None:
    """``got`` is the fingerprint pinned for recipe ``name``; a recipe with none pinned fails
    alone, with the value to pin."""
    import pytest

    if name not in pins:
        pytest.fail(f"recipe {name!r} has no pinned fingerprint; pin its fingerprint: {got!r}", pytrace=False)
    assert got == pins[name], f"{name}: the numbers moved: got {got!r}, pinned {pins[name]!r}"
