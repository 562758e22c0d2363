"""``fpsim.fp8``: the old name of :mod:`fpsim.lowp`, kept for one release.  Importing it warns
(DeprecationWarning); every name it has is ``fpsim.lowp``'s."""

import warnings

from .lowp import *  # noqa: F403
from .lowp import (
    __all__,  # noqa: F401
    __getattr__,  # noqa: F401  (the renamed names: quantize, convert_blocks)
)

warnings.warn("fpsim.fp8 is deprecated (removed 2027-06-01); import fpsim.lowp (the same package)", DeprecationWarning,
              stacklevel=2)
