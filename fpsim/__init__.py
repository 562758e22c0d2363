"""fpsim: a float-format simulator and teaching lab for mixed precision training."""

from . import amp, checkpoint, lowp, nn, ops, optim
from . import backend as backends  # fpsim.backends.available()
from .amp import GradScaler, StaticScaler, autocast
from .formats import (
    BLOCK_FORMATS,
    CATEGORIES,
    FORMATS,
    ROUNDING_MODES,
    Format,
    cast,
    classify,
    decode,
    encode,
    get_block_format,
    get_format,
    manual_seed,
    quantize,
    round_to,
    rounding_mode,
    ulp,
)
from .monitor import monitor
from .state import arithmetic, blas_threads, set_blas_threads
from .tensor import Tensor, no_grad, tensor  # fpsim.tensor(...) is the factory, as torch.tensor is
from .trace import trace_nonfinite

__version__ = "0.1.0"

__all__ = [
    "Tensor",
    "tensor",
    "no_grad",
    "nn",
    "ops",
    "lowp",
    "checkpoint",
    "optim",
    "backends",
    "amp",
    "autocast",
    "GradScaler",
    "StaticScaler",
    "CATEGORIES",
    "FORMATS",
    "BLOCK_FORMATS",
    "ROUNDING_MODES",
    "Format",
    "cast",
    "classify",
    "encode",
    "decode",
    "get_format",
    "get_block_format",
    "quantize",
    "manual_seed",
    "monitor",
    "arithmetic",
    "blas_threads",
    "set_blas_threads",
    "trace_nonfinite",
    "round_to",
    "rounding_mode",
    "ulp",
]
