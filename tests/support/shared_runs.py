"""Runs that take seconds to make, made once per test session and read by every test that needs them.

A training run or a finding's quick run read by tests in several modules is made by ``shared(key,
make)``: once per process (kept in memory), and under ``pytest -n`` once per session - the first
worker to ask makes it and writes it (pickled) into the session's own temporary folder, under a lock
held while it is made; a worker asking for it then waits for that and reads it instead of making it
again.  The folder is the session's (``tmp_path_factory``'s, under pytest-xdist the root that every
worker's folder sits in) and is set by the session fixture in ``tests/conftest.py``: nothing is
read from an earlier session, so a change to fpsim is always measured.  Without the fixture (a
script importing this), without xdist or where ``fcntl`` is missing, each process makes its own.

The results are shared objects: tests read them and never change them.  A pickled run reads back
the same bits (floats and arrays are written exactly).
"""

from __future__ import annotations

import hashlib
import os
import pickle
from pathlib import Path

import fpsim.backend as B

try:
    import fcntl
except ImportError:  # not a POSIX system: no shared folder, each process makes its own
    fcntl = None

__all__ = ["shared", "set_folder"]

_MEMORY: dict = {}
_FOLDER: list[Path] = []


def set_folder(folder: Path | None) -> None:
    """Share the runs through ``folder`` (one folder per session), or keep them per process (None)."""
    _FOLDER[:] = [Path(folder)] if folder is not None and fcntl is not None else []


def shared(key: tuple, make):
    """``make()``, made once per session for ``key`` (a tuple of strings naming the run) under the default
    backend of the moment (``numpy`` or ``numpy-f32``: a run is made, and kept, for each)."""
    key = (*key, B._DEFAULT)
    if key in _MEMORY:
        return _MEMORY[key]
    if not _FOLDER:
        _MEMORY[key] = value = make()
        return value
    stem = hashlib.sha256(repr(key).encode()).hexdigest()[:20]
    path = _FOLDER[0] / f"{stem}.pickle"
    with open(_FOLDER[0] / f"{stem}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if make() raises
        if path.exists():
            value = pickle.loads(path.read_bytes())
        else:
            value = make()
            part = path.with_suffix(f".{os.getpid()}.part")
            part.write_bytes(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
            part.replace(path)
    _MEMORY[key] = value
    return value
