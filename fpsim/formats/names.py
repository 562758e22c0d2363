"""Looking up the name of a mode (a rounding mode, an SR variant, a scale rounding) as format
names are looked up: in any case, without surrounding spaces."""

from __future__ import annotations

__all__ = ["mode_name"]


def mode_name(value, known, argument: str) -> str:
    """``value`` as the one of the names ``known`` it spells, in any case and without surrounding
    spaces (``"NEAREST"`` is ``"nearest"``); anything else (another name, not a string) is a
    ValueError naming ``argument`` and the known names."""
    key = value.strip().lower() if isinstance(value, str) else None
    if key not in known:
        raise ValueError(f"unknown {argument} {value!r}; known: {', '.join(known)}")
    return key
