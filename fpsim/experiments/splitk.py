"""Split-K matrix products whose reduction split can follow the batch size, as GPU GEMM
heuristics choose it - the mechanism behind batch-dependent results in LLM inference (Thinking
Machines, "Defeating Nondeterminism in LLM Inference", 2025).

fpsim's own matmul (:func:`fpsim.numerics.matmul_f32`) sums every product exactly and rounds
once, so no split, batch size or kernel can change a bit of it: ``mm(a[:1], b)`` is
``mm(a, b)[:1]`` always.  A GPU GEMM instead splits the reduction axis K into ``s`` chunks when
the output is too small to keep its units busy, computes each chunk's partial sum, and adds the
partial sums; the float additions do not associate, so the result depends on ``s`` - and a
heuristic that picks ``s`` from the number of output rows makes one request's numbers depend on
how many others share its batch.

:func:`splitk_matmul` is that product, defined exactly so it is the same bits on every machine:
each chunk's exact sum rounded once to float32, then into the accumulation format ``acc``; the
partial sums added left to right, each addition a float32 IEEE addition rounded into ``acc``.
:func:`splits_for` is the split rule: ``policy="batch"`` (a heuristic: ``units // rows`` chunks,
a power of two, each chunk at least ``min_chunk`` long) or ``policy="fixed"`` (chunks of ``min_chunk``
whatever the rows: the batch-invariant kernels' rule).  :class:`SplitKBackend` is the numpy
backend with every matmul of the engine (Linear, attention, the head) computed so: a model moved
onto it (``model.to(backend=SplitKBackend("bfloat16", "batch"))``) runs its GEMMs split-K.
"""

from __future__ import annotations

import numpy as np

from ..backend import NumpyBackend
from ..formats import get_format
from ..numerics import matmul_f32

__all__ = ["POLICIES", "SplitKBackend", "splits_for", "splitk_matmul"]

POLICIES = ("batch", "fixed")
UNITS = 16  # the compute units the batch heuristic tries to fill: a GPU's SMs, in miniature
MIN_CHUNK = 16  # the shortest chunk of K a split makes


def splits_for(rows: int, k: int, policy: str, units: int = UNITS, min_chunk: int = MIN_CHUNK) -> int:
    """How many chunks K is split into for an output of ``rows`` rows (every batch dimension times
    M): ``"batch"`` - the largest power of two at most ``units // rows`` and ``k // min_chunk``
    (1 when either is below 2: a big output, or a short K, needs no split); ``"fixed"`` -
    ``ceil(k / min_chunk)`` for every ``rows``."""
    if policy not in POLICIES:
        raise ValueError(f"splits_for: policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    if policy == "fixed":
        return max(1, -(-k // min_chunk))
    cap = min(units // max(rows, 1), k // min_chunk)
    return 1 << (cap.bit_length() - 1) if cap >= 1 else 1


def splitk_matmul(a32, b32, splits: int, acc="float32") -> np.ndarray:
    """float32 ``a32 @ b32`` ((..., M, K) @ (..., K, N), batch dimensions broadcast) with K split
    into ``splits`` chunks of ``c = ceil(K / splits)`` (the last one shorter): each chunk's exact
    sum rounded once to float32 and into ``acc``, the partial sums added in chunk order in float32,
    each sum rounded into ``acc``.  One chunk is :func:`fpsim.numerics.matmul_f32` rounded into
    ``acc``."""
    a32, b32 = np.asarray(a32, np.float32), np.asarray(b32, np.float32)
    k = a32.shape[-1]
    if not isinstance(splits, int | np.integer) or not 1 <= splits <= max(k, 1) or b32.shape[-2:-1] != (k,):
        raise ValueError(f"splitk_matmul: shapes {a32.shape} @ {b32.shape} with splits {splits!r}: need "
                         "(..., M, K) @ (..., K, N) and an integer split in 1..K")
    fmt = get_format(acc)
    c = -(-k // int(splits))
    pad = c * int(splits) - k  # zeros: they add nothing to an exact sum
    a = np.concatenate([a32, np.zeros(a32.shape[:-1] + (pad,), np.float32)], -1) if pad else a32
    b = np.concatenate([b32, np.zeros(b32.shape[:-2] + (pad, b32.shape[-1]), np.float32)], -2) if pad else b32
    a = np.moveaxis(a.reshape(a.shape[:-1] + (int(splits), c)), -2, -3)  # (..., s, M, c)
    b = b.reshape(b.shape[:-2] + (int(splits), c, b.shape[-1]))  # (..., s, c, N)
    parts = matmul_f32(a, b)  # every chunk's exact sum, rounded once to float32

    def into_acc(x):
        return x if fmt.name == "float32" else np.asarray(_HOST.round(x, fmt)).astype(np.float32)

    total = into_acc(parts[..., 0, :, :])
    for i in range(1, int(splits)):
        total = into_acc(total + into_acc(parts[..., i, :, :]))
    return total


_HOST = NumpyBackend()


class SplitKBackend(NumpyBackend):
    """The numpy backend with split-K GEMMs (module docstring): ``acc`` the format the partial
    sums are held in, ``policy`` the split rule of :func:`splits_for` (``units``, ``min_chunk``
    its parameters).  Everything else - storage, rounding, sums, exp - is the numpy backend's."""

    def __init__(self, acc="float32", policy: str = "batch", units: int = UNITS, min_chunk: int = MIN_CHUNK):
        super().__init__()
        splits_for(1, 1, policy)  # an unknown policy raises here, not at the first matmul
        self.acc, self.policy = get_format(acc).name, policy
        self.units, self.min_chunk = int(units), int(min_chunk)
        self.name = f"numpy-splitk({self.acc}, {policy})"

    def matmul(self, a32, b32, fa=None, fb=None):
        """``a32 @ b32`` split-K: the split from the output's rows (every leading dimension of a32)."""
        a32 = np.asarray(a32)
        rows = int(np.prod(a32.shape[:-1], dtype=np.int64))
        s = splits_for(rows, a32.shape[-1], self.policy, self.units, self.min_chunk)
        return splitk_matmul(a32, b32, s, self.acc)
