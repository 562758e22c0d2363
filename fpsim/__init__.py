"""fpsim: a float-format simulator and teaching lab for mixed precision training."""

from . import amp
from .amp import GradScaler, StaticScaler, autocast
from .formats import (
    CATEGORIES,
    FORMATS,
    ROUNDING_MODES,
    Format,
    cast,
    classify,
    get_format,
    manual_seed,
    round_to,
    ulp,
)
from .monitor import monitor

__version__ = "0.1.0"

__all__ = [
    "amp",
    "autocast",
    "GradScaler",
    "StaticScaler",
    "CATEGORIES",
    "FORMATS",
    "ROUNDING_MODES",
    "Format",
    "cast",
    "classify",
    "get_format",
    "manual_seed",
    "monitor",
    "round_to",
    "ulp",
]
