"""What the property tests (the ``*_fuzz.py`` files) share: the one-line error check, damaging a
file's bytes as a flaky disk or a cut download would, a tuple that Hypothesis prints briefly, and
every block-format name and alias."""

from __future__ import annotations

import pytest

from fpsim.formats import BLOCK_FORMATS

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import strategies as st  # noqa: E402

__all__ = ["BLOCK_NAMES", "one_line", "corrupt", "Saved"]

BLOCK_NAMES = sorted(BLOCK_FORMATS) + ["mxfp8", "mxfp6", "mxfp4", "fp8_blockwise", "deepseek_fp8"]


def one_line(e: BaseException, *names) -> bool:
    """One line, naming at least one of ``names``."""
    msg = str(e)
    return "\n" not in msg.strip() and any(str(n) in msg for n in names)


def corrupt(raw: bytes, data) -> bytes:
    """Truncate, or overwrite a few bytes at random places, as a flaky disk or a cut download would."""
    if data.draw(st.booleans(), label="truncate"):
        return raw[:data.draw(st.integers(0, len(raw) - 1), label="cut at")]
    b = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 4), label="hits")):
        i = data.draw(st.integers(0, len(b) - 1), label="at")
        b[i] = data.draw(st.integers(0, 255).filter(lambda v, i=i: v != b[i]), label="byte")
    return bytes(b)


class Saved(tuple):
    """Saved files or models handed to a property test by a fixture."""

    def __repr__(self):  # Hypothesis prints its arguments: not the files' bytes
        return "<saved files>"
