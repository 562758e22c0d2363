"""Layer 4: low-precision training recipes - fp8 with per-tensor scaling (delayed, as Transformer
Engine's ``DelayedScaling``; current, as its ``Float8CurrentScaling``), block scaling (MX, NVFP4,
fp8 blocks), the layers they run in, and :func:`convert`, the one conversion of a model.
``fpsim.fp8`` is this package under its old name, kept for one release with a DeprecationWarning.

- ``recipes.py``  the recipes and the scale computation;
- ``quant.py``    fp8 numbers with their scale, the cast (``quantize_fp8``), fake quantization (qdq);
- ``scaling.py``  the per-tensor scaling state, its checkpoint form, and the group of a model;
- ``linear.py``   ``Fp8Linear`` and ``fp8_linear`` (three GEMMs, each operand with its own scale);
- ``block.py``    block-scaled training (MX, NVFP4, DeepSeek-V3 fp8 blocks): ``BlockScaling``,
  ``BlockLinear`` (each GEMM's operands in blocks along its own K);
- ``convert.py``  ``convert(model, config)``: every Linear swapped for the layer the config names;
  ``handlers.py`` the handlers it finds by the config's type (``LAYER_HANDLERS``).

fp8 has too little range for raw activations and gradients (e4m3fn: 2^-9 .. 448; e5m2: 2^-16 ..
57344), so every fp8 tensor carries a float32 scale.  Following Micikevicius et al. (2022) and
Transformer Engine's HYBRID format, weights and forward activations use e4m3fn (more precision),
gradients e5m2 (more range).
"""

import warnings

from ..formats import FP8_FORMATS
from .block import BlockLinear, BlockScaling, block_linear, hadamard_matrix, hadamard_transform
from .convert import convert
from .handlers import LAYER_HANDLERS
from .linear import Fp8Linear, LinearScaling, fp8_linear
from .quant import Fp8Tensor, qdq, quantize_fp8
from .recipes import AMAX_ALGOS, CurrentScaling, DelayedScaling, FixedScaling, compute_scale
from .scaling import ScalingGroup, ScalingState, format_scaling_table

__all__ = ["DelayedScaling", "CurrentScaling", "FixedScaling", "ScalingState", "ScalingGroup", "Fp8Tensor", "LinearScaling",
           "Fp8Linear", "compute_scale", "quantize_fp8", "qdq", "fp8_linear", "convert",
           "format_scaling_table", "FP8_FORMATS", "AMAX_ALGOS", "BlockScaling", "BlockLinear", "block_linear",
           "hadamard_matrix", "hadamard_transform", "LAYER_HANDLERS"]

# Old names, kept for one release: each use warns and names the new one.
_RENAMED = {"quantize": ("quantize_fp8", quantize_fp8), "convert_blocks": ("convert", convert),
            "Linear": ("Fp8Linear", Fp8Linear), "linear": ("fp8_linear", fp8_linear)}


def __getattr__(name: str):
    if name in _RENAMED:
        new, obj = _RENAMED[name]
        warnings.warn(f"fpsim.lowp.{name} is deprecated (removed 2027-06-01); use fpsim.lowp.{new}", DeprecationWarning,
                      stacklevel=2)
        return obj
    if name == "f32_to_fp8":  # the unscaled cast kernel is the formats'; lowp's fp8 casts are scaled
        from ..formats.kernels import f32_to_fp8

        warnings.warn("fpsim.lowp.f32_to_fp8 is deprecated (removed 2027-06-01): use fpsim.formats.f32_to_fp8 "
                      "(the same function; fpsim.lowp.quantize_fp8 casts with a scale)", DeprecationWarning,
                      stacklevel=2)
        return f32_to_fp8
    raise AttributeError(f"module 'fpsim.lowp' has no attribute {name!r}")
