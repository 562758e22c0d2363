"""fpsim: a float-format simulator and teaching lab for mixed precision training."""

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

__version__ = "0.1.0"

__all__ = [
    "CATEGORIES",
    "FORMATS",
    "ROUNDING_MODES",
    "Format",
    "cast",
    "classify",
    "get_format",
    "manual_seed",
    "round_to",
    "ulp",
]
