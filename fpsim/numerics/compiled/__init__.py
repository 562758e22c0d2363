"""The optional compiled path: numba kernels for the passes around numpy's float64 BLAS and ufuncs.

``matmul.py``, ``sums.py`` and ``elementary.py`` are complete in numpy.  Where numba is installed,
the same steps run with the passes around the float64 work fused into a few compiled loops:
``_matmul.py`` (the float64 copies with the norms and quanta, the interval test, each open sum
settled where it is found), ``_sums.py`` (a reduction read once, with its bound and test) and
``_elementary.py`` (the functions' test, chunk by chunk); ``_exact.py`` holds the exact sums they
share.  ``_round.py`` (with its wrappers in ``_casts.py``) does the same for the element roundings
and widenings of ``fpsim/formats/kernels.py`` and ``fp8kernels.py``: their integer steps and their
one float32 addition, value by value in one loop, where numpy makes a pass for each step; those
functions ask :func:`rounding` for their compiled twin, as the monitor does for its counts
(``_counts.py``: what a rounding did, counted in one loop over the values and stored patterns).  The float64 work itself stays numpy's
(the dgemm, numpy's float64 exp), and the results are the same bits: each is still the exact value
rounded once, decided by the same kind of test - only the number of passes over memory changes.

Which path: the compiled one when numba can be imported, unless the environment variable
``FPSIM_NUMBA`` is ``0`` (read once, when ``fpsim.numerics`` is imported); :func:`use_compiled`
switches for a block (the tests run both paths).  ``import fpsim`` never imports numba: it is
imported on the first call that uses a kernel; without numba the numpy path runs, and a numba
that fails to import or to load the kernels leaves the numpy path in use too, with one warning.

numba's cache: fpsim sets nothing.  Each kernel is compiled on its first use (about 5 s for the
numerics', 0.1-2.5 s for each rounding's: the rounding modes' and the few-bit SR per integer dtype of
the random bits take longest; once) and cached by numba's own rules (then about 0.3 s to load in a
new process, numba's import included): ``__pycache__`` beside this package, or where that is not writable
(a read-only install) numba's user-wide cache directory (``~/.cache/numba``), or
``NUMBA_CACHE_DIR`` where the user sets it.  Where none of these is writable, the kernels are
compiled without a cache, in each process that uses them - slower to start, never an error.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import types
import warnings

__all__ = ["numba_installed", "enabled", "use_compiled", "kernels", "rounding", "count", "ROUNDING_MIN_SIZE"]

_STATE = {"on": os.environ.get("FPSIM_NUMBA", "1").strip() != "0", "kernels": None, "failed": False}


def numba_installed() -> bool:
    """Whether numba is installed (it is not imported to tell)."""
    try:
        return importlib.util.find_spec("numba") is not None
    except (ImportError, ValueError):  # a module hidden as sys.modules["numba"] = None, a broken spec
        return False


def enabled() -> bool:
    """Whether fpsim.numerics uses the compiled path now: switched on and numba installed."""
    return bool(_STATE["on"]) and not _STATE["failed"] and numba_installed()


@contextlib.contextmanager
def use_compiled(on: bool = True):
    """Within the block, the compiled path on (if numba is there) or off (the numpy path)."""
    before = _STATE["on"]
    _STATE["on"] = bool(on)
    try:
        yield
    finally:
        _STATE["on"] = before


def kernels():
    """The compiled path's functions (a namespace: ``matmul``, ``sum``, ``elementary``, ``fsum64`` ...), or None
    where the numpy path is to be used."""
    if not _STATE["on"] or _STATE["failed"]:
        return None
    if _STATE["kernels"] is None:
        _STATE["kernels"] = _load()
    return _STATE["kernels"]


# Arrays smaller than this keep the numpy path: a cast of a few numbers (a lab's, a docs example's)
# should not import numba (about 0.3 s, once); from here up the compiled loop is faster (a call costs
# about 1.5 us).  ml_dtypes' one-pass bfloat16 cast stays faster up to a few thousand values.
ROUNDING_MIN_SIZE = 1024
_MIN_SIZE = {"f32_to_bf16": 4096}


def rounding(name: str, x, dtype=None):
    """The compiled twin of the rounding, widening or count ``name`` (a function of ``_casts.py``,
    ``_counts.py`` or ``_blocks.py``, taking the numpy function's array first), or None where the numpy path is to run: the compiled path
    off, numba missing, ``x`` smaller than :data:`ROUNDING_MIN_SIZE` (bfloat16: 4096), or its dtype
    not ``dtype``."""
    if getattr(x, "size", 0) < _MIN_SIZE.get(name, ROUNDING_MIN_SIZE) or (dtype is not None and x.dtype != dtype) or not _STATE["on"] or _STATE["failed"]:
        return None
    k = kernels()
    return None if k is None else k.roundings[name]


def count(name: str, x):
    """The monitor's compiled count ``name`` (a function of ``_counts.py``) for ``x``, as :func:`rounding`
    gives it, and below :data:`ROUNDING_MIN_SIZE` too once the kernels are loaded (a step that already
    used the compiled path): a call costs 2-5 us there, numpy's short count of a few values 8-14 us -
    a step's small roundings (its biases, its loss) are most of the monitor's calls.  A few numbers
    counted alone still import no numba."""
    k = rounding(name, x)
    if k is None and _STATE["kernels"] is not None and _STATE["on"] and not _STATE["failed"] and getattr(x, "size", 0):
        k = _STATE["kernels"].roundings[name]
    return k


def _load():
    try:
        from . import (
            _blocks,
            _casts,
            _casts64,
            _counts,
            _draws,
            _elementary,
            _fused_modes,
            _matmul,
            _quantize,
            _sums,
            _tensorcore,
        )
    except Exception as e:  # no numba: the numpy path, silently; a broken numba: the same, said once
        _STATE["failed"] = True
        if numba_installed():
            warnings.warn(f"fpsim.numerics: the compiled path is off ({type(e).__name__}: {e})", RuntimeWarning,
                          stacklevel=3)
        return None
    return types.SimpleNamespace(matmul=_matmul.fused_matmul, sum=_sums.fused_sum, elementary=_elementary.fused_elementary,
                                 fsum64=_sums.fsum64_rows, tensorcore=_tensorcore,
                                 roundings={**_casts.ROUNDINGS, **_casts64.ROUNDINGS64, **_counts.COUNTS, **_blocks.BLOCKS,
                                            **_quantize.QUANTIZE, **_draws.DRAWS, **_fused_modes.FUSED})
