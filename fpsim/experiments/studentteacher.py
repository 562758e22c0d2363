"""The student-teacher proxy of arXiv 2506.20752 (Su et al., "Characterization and Mitigation of
Training Instabilities in Microscaling Formats"; code: Hither1/systems-scaling,
``olmo/synthetic/student_teacher.py``), ported at a laptop's width.

- Data: every step a fresh batch x ~ N(0, 1) of shape (batch, width), fpsim's float32 normal
  draws (:func:`fpsim.numerics.random.normal`) from a generator seeded by (``data_seed``, step);
  the target y = teacher(x) + 0.005 * N(0, 1).
- Teacher: ``depth`` blocks Linear(width, width, no bias) -> GELU -> Linear(width, width, no bias),
  no residual and no LayerNorm, PyTorch's initialisation (uniform in +-1/sqrt(fan_in), rounded
  once to float32) from ``data_seed``, fixed, and evaluated in float32 as fpsim's ops evaluate it:
  every product sum exact and rounded once (:func:`fpsim.numerics.matmul_f32`), ``ops.gelu``'s
  float32 formula with the correctly rounded tanh - the same bits on every machine (a float64
  teacher's BLAS sums and libm tanh were not).
- Student (:class:`ResidualMLP`): ``depth`` residual blocks x + fc2(GELU(fc1(LN(x)))), fc1 width ->
  4 width without bias, fc2 4 width -> width with bias, PyTorch's initialisation from the seed.
  GELU is ``ops.gelu``, PyTorch's tanh approximation (the reference uses the erf form), in the
  teacher too.
- Loss: the mean squared error in float32; Adam at ``lr`` (6e-4, the paper's), constant.

``ln_format`` is what the paper varies: the LayerNorm of the quantized runs computes in the
reference's vector format - its input, its affine weight and bias, its output and every gradient
it hands back rounded into ``ln_format`` (``"bfloat16"``, as the microxcaling library's
``bfloat=16`` vector ops do, though fpsim rounds each op once rather than every intermediate) -
or, with ``"float32"``, keeps them in high precision (the reference's ``--dont_quantize_layernorm``).
The GEMMs' format is the recipe's (``BlockScaling("mxfp8_e4m3")`` for the proxy's MXFP8).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import nn, ops
from ..formats import tensor_format
from ..numerics import matmul_f32, tanh_f32
from ..numerics.random import normal
from ..tensor import tensor
from .task import TASKS, Task

__all__ = ["StudentTeacherTask", "ResidualMLP", "ResidualBlock"]

NOISE_STD = 0.005


class ResidualBlock(nn.Module):
    """x + fc2(GELU(fc1(LN(x)))); the LayerNorm in ``ln_format`` (module docstring)."""

    def __init__(self, width: int, rng, ln_format: str = "float32"):
        super().__init__()
        self.ln = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 4 * width, bias=False, rng=rng)
        self.fc2 = nn.Linear(4 * width, width, rng=rng)
        self.ln_format = tensor_format(ln_format).name

    def forward(self, x):
        if self.ln_format == "float32":
            z = self.ln(x)
        else:  # the cast ops round the input, weight and bias forward; the LayerNorm's gradients come back in ln_format
            f = self.ln_format
            z = ops.layer_norm(x.to(f), self.ln.dim, self.ln.weight.to(f), self.ln.bias.to(f), self.ln.eps)
            z = z.to("float32")
        return x + self.fc2(ops.gelu(self.fc1(z)))


class ResidualMLP(nn.Sequential):
    """``depth`` :class:`ResidualBlock` of ``width``, initialised from ``seed``."""

    def __init__(self, width: int, depth: int, seed: int = 0, ln_format: str = "float32"):
        rng = np.random.default_rng(seed)
        super().__init__(*(ResidualBlock(width, rng, ln_format) for _ in range(depth)))


def _gelu32(x):
    """ops.gelu's tanh approximation of float32 ``x``, step by step as ops.gelu computes it on the
    CPU: u = c (x + 0.044715 x x x) in float32, 0.5 x (1 + tanh u) with the correctly rounded tanh."""
    u = x * x
    u *= x
    u *= np.float32(0.044715)
    u += x
    u *= np.float32(math.sqrt(2 / math.pi))
    return (tanh_f32(u) + np.float32(1)) * (np.float32(0.5) * x)


@TASKS.register("student-teacher")
@dataclass(frozen=True)
class StudentTeacherTask(Task):
    """The proxy (module docstring): sizes, learning rate, steps, the LayerNorm's format."""

    summary = "a residual MLP student learning a fixed teacher (arXiv 2506.20752's proxy, MX recipes)"
    default_recipes = ("fp32", "bf16-master", "mxfp8")

    measure_at = ()
    width: int = 32
    depth: int = 4
    batch: int = 256
    steps: int = 600
    lr: float = 6e-4
    ln_format: str = "bfloat16"
    data_seed: int = 0

    def teacher(self) -> list:
        """The teacher's weights, float32 (uniform draws in float64, rounded once), (in, out) pairs per block."""
        rng = np.random.default_rng([self.data_seed, 1])
        b = 1 / math.sqrt(self.width)
        return [tuple(rng.uniform(-b, b, (self.width, self.width)).astype(np.float32) for _ in range(2))
                for _ in range(self.depth)]

    def sample(self, step: int, teacher=None) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) of ``step`` in float32 (module docstring)."""
        rng = np.random.default_rng([self.data_seed, 2, step])
        x = normal(rng, (self.batch, self.width))
        h = x
        for w1, w2 in teacher if teacher is not None else self.teacher():
            h = matmul_f32(_gelu32(matmul_f32(h, w1.T)), w2.T)
        return x, h + normal(rng, h.shape, NOISE_STD)

    def model(self, seed: int = 0):
        return ResidualMLP(self.width, self.depth, seed, self.ln_format)

    def batches(self, recipe, backend):
        """Step -> (x, y) as float32 tensors (x rounded into the recipe's parameter format)."""
        teacher = self.teacher()

        def at(step):
            x, y = self.sample(step, teacher)
            return tensor(x, recipe.params, backend=backend), tensor(y, "float32", backend=backend)

        return at

    def loss(self, model, batch, recipe):
        x, y = batch
        with recipe.forward_context():
            pred = model(x)
        return ops.mse_loss(pred.to("float32"), y)
