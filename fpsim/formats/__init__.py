"""Layer 1: the float formats and exact rounding into them.

- ``table.py``   the format table (:class:`Format`, :func:`get_format`), limits derived from the bits;
- ``round.py``   the exact reference rounding (:func:`cast`, :func:`round_to`, :func:`ulp`, :func:`classify`);
- ``kernels.py`` fast exact conversions the engine runs on (float16 / fp8 bit tricks and tables,
  the device rounding algorithm and its CUDA source), checked bit for bit against ``round.py``;
  ``fp8kernels.py`` the scaled, saturating fp8 cast of per-tensor scaling in one chunked pass;
- ``modes.py``   the rounding modes, defined once (the exact float64 algorithm); ``modekernels.py`` the
  same in float32 bit operations, fast; ``sr.py`` few-bit stochastic rounding, ``srbias.py`` its bias;
- ``codes.py``   bit patterns: :func:`encode`, :func:`decode` (``bitviews.py``: the one table of their integer views); ``listing.py`` the table of every format;
- ``block.py``   block-scaled formats (MXFP8 / MXFP6 / MXFP4, NVFP4, DeepSeek-V3 fp8 blocks): one
  :func:`quantize`; ``scale_rules.py`` each format's scale rule, a field of the format (``block_scales.py``
  its arithmetic); ``blockfast.py``
  ``fake_quantize``, the float32 values of ``quantize(...).dequantize()`` in one go (training's GEMM operands).
"""

from .bitviews import UINT_VIEWS, bits_view, uint_for_bits
from .block import BLOCK_FORMATS, SCALE_ROUNDINGS, BlockFormat, BlockQuantized, BlockStats, get_block_format, quantize
from .codes import decode, encode
from .kernels import f16_to_f32, f32_to_f16, f32_to_fp8, fp8_to_f32, rne_round
from .round import (
    CATEGORIES,
    ROUNDING_MODES,
    Classification,
    cast,
    classify,
    default_rng,
    manual_seed,
    round_to,
    rounding_mode,
    ulp,
)
from .scale_rules import E8M0_SCALE, FLOAT32_BLOCK_SCALE, NVFP4_SCALE, ScaleRule
from .sr import SR_VARIANTS
from .srbias import sr_bias, sr_bias_table
from .table import (
    ALL_FORMATS,
    ELEMENT_FORMATS,
    F32,
    FORMATS,
    FP8_FORMATS,
    LOW_FORMATS,
    OCP_INT8,
    P3109_FORMATS,
    TENSOR_FORMATS,
    Format,
    format_names,
    get_format,
    hand_built_problem,
    p3109_format,
    promote,
    tensor_format,
)

__all__ = [
    "BlockFormat",
    "BLOCK_FORMATS",
    "BlockQuantized",
    "BlockStats",
    "SCALE_ROUNDINGS",
    "ScaleRule",
    "E8M0_SCALE",
    "NVFP4_SCALE",
    "FLOAT32_BLOCK_SCALE",
    "get_block_format",
    "quantize",
    "Format",
    "FORMATS",
    "ALL_FORMATS",
    "TENSOR_FORMATS",
    "ELEMENT_FORMATS",
    "FP8_FORMATS",
    "LOW_FORMATS",
    "F32",
    "ROUNDING_MODES",
    "CATEGORIES",
    "get_format",
    "tensor_format",
    "hand_built_problem",
    "promote",
    "format_names",
    "cast",
    "round_to",
    "rounding_mode",
    "ulp",
    "classify",
    "Classification",
    "manual_seed",
    "default_rng",
    "f16_to_f32",
    "f32_to_f16",
    "f32_to_fp8",
    "fp8_to_f32",
    "rne_round",
    "encode",
    "decode",
    "P3109_FORMATS",
    "p3109_format",
    "OCP_INT8",
    "SR_VARIANTS",
    "sr_bias",
    "sr_bias_table",
    "UINT_VIEWS",
    "bits_view",
    "uint_for_bits",
]
