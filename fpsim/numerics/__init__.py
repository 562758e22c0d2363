"""Layer 1: the arithmetic whose results fpsim defines itself, the same bits on every machine.

A float32 sum's bits depend on the order it is added in, which numpy and the BLAS choose by
CPU (blocking, vector width, fused multiply-adds, threads); numpy's float32 exp, log and tanh
have one implementation per instruction set.  fpsim does not inherit those choices:

- ``matmul.py``   :func:`matmul_f32`: every product exact, their exact sum rounded once to float32;
- ``sums.py``     :func:`sum_f32`, :func:`mean_f32`: the exact sum of float32 values, rounded once;
- ``elementary.py`` :func:`exp_f32`, :func:`log_f32`, :func:`tanh_f32`, :func:`log1p_f32`, :func:`expm1_f32`, :func:`pow_f32`:
  correctly rounded to float32 (and cos, sin);
- ``checked.py``  the test that lets a float64 library result stand in for the exact one;
- ``exactsum.py`` exact sums of float64 terms (TwoSum trees, ``math.fsum``) for what the test leaves open;
- ``highprec.py`` the rare elementary-function values decided with Python's ``decimal``;
- ``compiled/``   the same steps with the passes around numpy's float64 work fused into numba
  kernels, the same bits, where numba is installed (``FPSIM_NUMBA=0``: the numpy path only).

numpy and the BLAS still do the work; they only no longer decide the bits.
"""

from .elementary import cos_f32, exp_f32, expm1_f32, log1p_f32, log_f32, pow_f32, sin_f32, tanh_f32
from .matmul import matmul_f32
from .sums import fsum64, mean64, mean_f32, sum_f32

__all__ = ["matmul_f32", "sum_f32", "mean_f32", "fsum64", "mean64", "exp_f32", "log_f32", "tanh_f32", "log1p_f32", "expm1_f32", "cos_f32",
           "sin_f32", "pow_f32"]
