"""fp8 numbers with their scale (:class:`Fp8Tensor`), the cast that makes them (:func:`quantize_fp8`),
and fake quantization as one differentiable op (:func:`qdq`).

The stored fp8 numbers are ``x * scale``, rounded to nearest even with **saturation** (values
beyond the format's max become +-max, as the hardware's saturating conversions do); the value
they stand for is ``fp8 * (1 / scale)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..backend import Backend, get_backend
from ..formats import F32, Format
from ..formats.kernels import f32_to_fp8, fp8_to_f32
from ..tensor import Tensor, make_node

__all__ = ["Fp8Tensor", "quantize_fp8", "qdq"]


def _widen(codes, fmt: Format, backend: Backend):
    if isinstance(codes, np.ndarray) and codes.dtype == fmt.dtype:
        return fp8_to_f32(codes)
    return backend.to_f32(codes)


@dataclass(frozen=True)
class Fp8Tensor:
    """fp8 numbers and the float32 scale they were cast with: ``value = codes * (1 / scale)``.

    ``codes`` is in the backend's storage for the format: ``ml_dtypes.float8_e4m3fn`` /
    ``float8_e5m2`` on numpy (one byte per value), float32 arrays holding exactly the fp8 values
    on ``numpy-f32`` and CuPy; ``numpy()`` gives the fp8 dtype on every backend.  A cast that
    made only the widened values (``stored=None``: nothing needed the bytes yet) leaves ``codes``
    to be narrowed from them when first read - exact values, so the same bytes.
    """

    stored: object = field(repr=False)  # codes, or None until first read (then widened holds the values)
    fmt: Format
    scale: np.float32
    backend: Backend
    widened: object = field(default=None, repr=False, compare=False)  # codes_f32(), when the cast made it

    @property
    def codes(self):
        if self.stored is None:  # numpy backend: the bytes of the exact fp8 values in widened
            object.__setattr__(self, "stored", f32_to_fp8(self.widened, self.fmt, saturate=True))
        return self.stored

    @property
    def scale_inv(self) -> np.float32:
        return np.float32(1.0 / float(self.scale))

    @property
    def shape(self) -> tuple:
        return tuple((self.stored if self.stored is not None else self.widened).shape)

    def codes_f32(self):
        """The fp8 numbers themselves (x * scale, rounded), widened exactly to float32."""
        return self.widened if self.widened is not None else _widen(self.codes, self.fmt, self.backend)

    def f32(self):
        """The values they stand for, ``codes * (1/scale)`` in float32 (exact for a power-of-two
        scale, else rounded once)."""
        return self.codes_f32() * self.backend.xp.float32(self.scale_inv)

    def numpy(self) -> np.ndarray:
        """The stored fp8 numbers as a numpy array in the storage dtype."""
        out = self.backend.to_numpy(self.codes)
        return out if out.dtype == self.fmt.dtype else out.astype(self.fmt.dtype)


def quantize_fp8(x, state, *, direction: str = "forward", target: str = "") -> Fp8Tensor:
    """Cast ``x`` to fp8 with a per-tensor scaling state's scale, returning the fp8 numbers and that scale.

    ``x``: a Tensor, or a float32 array on the numpy backend; the cast uses ``state``'s current
    scale and saturation and records the amax and counts in ``state``; the result is an
    :class:`Fp8Tensor`.  Not differentiable (see :func:`qdq`)."""
    if isinstance(x, Tensor):
        be, x32 = x.backend, x.f32()
    else:
        be = get_backend(None)
        x32 = np.asarray(x, dtype=np.float32)
    return state.to_fp8(x32, be, direction=direction, target=target)


def qdq(x: Tensor, state, grad_state=None) -> Tensor:
    """:func:`quantize_fp8` and back to float32 as one differentiable op (fake quantization of a Tensor).

    Forward ``x -> fp8 (state) -> float32``, the result holding exactly the values the fp8
    numbers stand for; backward straight through, the incoming
    float32 gradient cast to ``grad_state``'s format and scale (e5m2) and back, or passed
    unchanged when ``grad_state`` is None."""
    q = quantize_fp8(x, state, target=state.name)
    be = x.backend
    out32 = q.f32()

    def backward(g, out):
        if grad_state is None:
            return (g,)
        gq = grad_state.to_fp8(g, be, direction="backward")
        return (gq.f32(),)

    return make_node(out32, F32, (x,), backward, "fp8.qdq", inputs=())
