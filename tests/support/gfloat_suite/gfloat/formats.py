from _gfloat_real.formats import *  # noqa: F403
from _gfloat_real.formats import _fp8_formats, _fp16_formats, _tiny_formats  # noqa: F401
from _gfloat_real.types import Domain, FormatInfo, Signedness  # noqa: F401
