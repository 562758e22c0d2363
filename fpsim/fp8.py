"""``fpsim.fp8``: the fp8 training recipes of :mod:`fpsim.lowp`, under the name they have always had."""

from .lowp import *  # noqa: F403
from .lowp import __all__  # noqa: F401
