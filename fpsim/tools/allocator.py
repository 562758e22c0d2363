"""Keep freed memory for reuse: what fpsim's commands do at start-up, on Linux with glibc.

A training step makes and frees its temporaries (activations, gradients, each op's float32
result) at every step.  glibc's ``malloc`` serves an array over its mmap threshold (128 KiB at
first, raised as large blocks are freed) with fresh pages from the kernel and gives them back when
it is freed, and it trims freed memory at the top of its heap back to the kernel too; the next step
then pays a page fault for every 4 KiB it touches again.  On a small VM that cost is large: the tiny
GPT's float32 step took 1.50-1.56x PyTorch CPU's on the 2-core VM of docs/performance.md with
glibc's defaults and 1.33-1.36x with the two settings below (three pairs of fresh processes; PyTorch's
own time moved by a few percent; ``fpsim bench --sections allocator`` times the step both ways).  The bits do not change: where an array lives does not change what is
computed.

:func:`keep_freed_memory` sets ``M_MMAP_THRESHOLD`` to 32 MiB (arrays below it come from the heap and
go back to it) and ``M_TRIM_THRESHOLD`` to 256 MiB (up to that much freed memory is kept for reuse)
in this process with ``mallopt``, and sets the environment variables glibc reads at start-up,
``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_``, for the processes it starts (``--jobs``
workers, lab kernels) - unless the user has set them.  Elsewhere (macOS, Windows, musl) it does
nothing.  ``fpsim`` commands call it; a notebook or script may too, knowing that the process then
holds up to 256 MiB of freed memory.
"""

from __future__ import annotations

import ctypes
import os
import sys

__all__ = ["keep_freed_memory", "MMAP_THRESHOLD", "TRIM_THRESHOLD"]

MMAP_THRESHOLD = 32 << 20  # bytes: arrays below this come from the heap (glibc's largest dynamic value)
TRIM_THRESHOLD = 256 << 20  # bytes of freed memory at the heap's top kept for reuse
_SETTINGS = (("MALLOC_MMAP_THRESHOLD_", -3, MMAP_THRESHOLD), ("MALLOC_TRIM_THRESHOLD_", -1, TRIM_THRESHOLD))  # malloc.h


def _glibc():
    """This process's C library when it is glibc (it has ``mallopt`` and says its version), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)  # the symbols this process has loaded, the C library's among them
        version = libc.gnu_get_libc_version
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no gnu_get_libc_version)
        return None
    version.restype = ctypes.c_char_p
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return libc


def keep_freed_memory() -> bool:
    """Set glibc's two thresholds in this process and in the environment its children inherit
    (see the module docstring); a variable the user has set is left as it is (glibc read it when
    the process started).  Returns True when this process runs with them; False where the C
    library is not glibc (nothing is changed then)."""
    libc = _glibc()
    if libc is None:
        return False
    ok = True
    for name, option, value in _SETTINGS:
        if os.environ.get(name):
            continue
        os.environ[name] = str(value)
        ok = bool(libc.mallopt(option, value)) and ok
    return ok
