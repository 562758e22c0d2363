"""JSON that strict parsers accept: every command that prints or writes JSON goes through
:func:`dumps`.

JSON has no NaN or infinity (RFC 8259); Python's ``json`` writes ``NaN`` / ``Infinity`` unless
told not to, and strict parsers (JavaScript's ``JSON.parse``, jq, Go, Rust) reject them.
:func:`finite` replaces each non-finite float by ``null`` and says where it did, so a reader
can tell a missing value from a diverged one; :func:`dumps` then writes with
``allow_nan=False``, so a non-finite number can never slip through.
"""

from __future__ import annotations

import json
import math

import numpy as np

__all__ = ["finite", "dumps"]


def _word(x: float) -> str:
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def finite(obj, notes: dict | None = None, path: str = ""):
    """``obj`` (dicts, lists, tuples, numbers, strings, None, numpy scalars) with every NaN /
    +-inf replaced by None.  ``notes`` (if given) gets ``path -> "nan"`` for each replaced
    scalar, and for a list ``path -> "k of n values non-finite (nan, inf)"``."""
    if isinstance(obj, dict):
        return {str(k): finite(v, notes, f"{path}.{k}" if path else str(k)) for k, v in obj.items()}
    if isinstance(obj, list | tuple | np.ndarray):
        out, bad = [], []
        for i, v in enumerate(obj.tolist() if isinstance(obj, np.ndarray) else obj):
            if isinstance(v, float | np.floating) and not math.isfinite(v):
                bad.append(_word(float(v)))
                out.append(None)
            else:
                out.append(finite(v, notes, f"{path}[{i}]"))
        if bad and notes is not None:
            notes[path] = f"{len(bad)} of {len(out)} values non-finite ({', '.join(sorted(set(bad)))})"
        return out
    if isinstance(obj, bool | np.bool_):
        return bool(obj)
    if isinstance(obj, int | np.integer):
        return int(obj)
    if isinstance(obj, float | np.floating):
        x = float(obj)
        if math.isfinite(x):
            return x
        if notes is not None:
            notes[path] = _word(x)
        return None
    return obj


def dumps(obj, **kwargs) -> str:
    """``json.dumps(obj, allow_nan=False, **kwargs)``: ValueError rather than invalid JSON."""
    return json.dumps(obj, allow_nan=False, **kwargs)
