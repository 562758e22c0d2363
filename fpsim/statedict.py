"""Validate, then commit: the one way every ``load_state_dict`` in fpsim loads.

A load first collects every problem with the incoming state (missing and unexpected keys, wrong
shapes, invalid values) without touching anything, raises ONE ``ValueError`` naming all of them
and saying that nothing changed, and only then writes.  A load that spans several objects
(``checkpoint.load``: model, optimizer, scaler, fp8 state) snapshots each first and restores
them all if a later part fails (:func:`all_or_nothing`).
"""

from __future__ import annotations

import contextlib

import numpy as np

__all__ = ["Problems", "all_or_nothing"]


class Problems:
    """What is wrong with a state dict, collected before anything is changed.

    ``what`` starts the message (``"optimizer load_state_dict"``), ``owner`` ends it
    (``"(optimizer left unchanged)"``)::

        p = Problems("GradScaler state dict", "scaler")
        p.check_keys(sd, required=KEYS)
        p.raise_if_any()        # ValueError: GradScaler state dict: missing ['scale'] (scaler left unchanged)
    """

    def __init__(self, what: str, owner: str):
        self.what, self.owner = what, owner
        self.missing: list = []
        self.unexpected: list = []
        self.wrong: list[str] = []

    def check_keys(self, sd, required=(), allowed=None) -> None:
        """Every key in ``required`` must be present; a key is expected when it is required or
        ``allowed(key)`` says so (default: only the required ones)."""
        req = list(required)
        self.missing += [k for k in req if k not in sd]
        known = set(req)
        self.unexpected += [k for k in sd if k not in known and not (allowed is not None and allowed(k))]

    def check_shape(self, key, value, shape) -> None:
        got = tuple(np.shape(value))
        if got != tuple(shape):
            self.wrong.append(f"{key}: expected {tuple(shape)}, got {got}")

    def add(self, message: str) -> None:
        """Any other problem, in one phrase (``"scale must be a finite number >= 0, got -1"``)."""
        self.wrong.append(message)

    def __bool__(self) -> bool:
        return bool(self.missing or self.unexpected or self.wrong)

    def message(self) -> str:
        parts = []
        if self.missing:
            parts.append(f"missing {self.missing}")
        if self.unexpected:
            parts.append(f"unexpected {self.unexpected}")
        parts += self.wrong
        return f"{self.what}: {', '.join(parts)} ({self.owner} left unchanged)"

    def raise_if_any(self) -> None:
        if self:
            raise ValueError(self.message())


@contextlib.contextmanager
def all_or_nothing(*parts):
    """Run a multi-part load: each ``part`` is a ``(snapshot, restore)`` pair of callables.
    All are snapshotted first; if the block raises, every part is restored (in reverse
    order) and the original error propagates unchanged."""
    saved = [(restore, snapshot()) for snapshot, restore in parts]
    try:
        yield
    except BaseException:
        for restore, snap in reversed(saved):
            with contextlib.suppress(Exception):  # never mask the error that caused the rollback
                restore(snap)
        raise
