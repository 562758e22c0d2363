"""Random draws that are the same bits on every machine.

numpy's ``Generator`` promises its streams only "on the same machine": its normal draws (a
ziggurat) call the C library's ``exp`` and ``log1p`` on a few draws in a hundred, and libms
differ in the last bit.  The raw bits (PCG64), integers and ``random()`` / ``uniform`` are
integer arithmetic and one exact scaling, the same everywhere; fpsim's normal draws are built
from those alone: Box-Muller in float32, z = sqrt(-2 log u1) cos(2 pi u2) (and its sine twin),
with u1, u2 uniform on the float32 grid (0, 1] of 24-bit integers and fpsim's correctly rounded
log, cos and sin - every step one IEEE operation or a correctly rounded function.
"""

from __future__ import annotations

import numpy as np

from .elementary import cos_f32, log_f32, sin_f32

__all__ = ["normal"]

_TWO_PI = np.float32(2 * np.pi)


def normal(rng: np.random.Generator, size, scale: float = 1.0) -> np.ndarray:
    """float32 draws from N(0, scale**2) of shape ``size``: Box-Muller on 24-bit uniforms
    (|z| < 5.8 before the scale), then times float32(scale)."""
    shape = (size,) if np.isscalar(size) else tuple(size)
    n = int(np.prod(shape, dtype=np.int64))
    m = (n + 1) // 2
    bits = rng.integers(0, 2**24, size=(2, m), dtype=np.int64)
    u1 = ((bits[0] + 1).astype(np.float32) * np.float32(2.0**-24))  # (0, 1]: log u1 is finite
    u2 = bits[1].astype(np.float32) * np.float32(2.0**-24)  # [0, 1)
    r = np.sqrt(np.float32(-2) * log_f32(u1))
    t = _TWO_PI * u2
    z = np.empty(2 * m, np.float32)
    z[0::2] = r * cos_f32(t)
    z[1::2] = r * sin_f32(t)
    z = z[:n].reshape(shape)
    if scale != 1.0:
        z = z * np.float32(scale)
    return z
