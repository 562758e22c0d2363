from _gfloat_real.types import *  # noqa: F403

from . import RoundMode  # noqa: F401
