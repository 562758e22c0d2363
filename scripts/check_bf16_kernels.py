"""fpsim's bfloat16 kernels against ml_dtypes on every float32 bit pattern (all 2**32) and every
bfloat16 pattern: prints the number of differing results (0 expected).  About 2 minutes on one
core; the test suite checks a structured sample (tests/test_bf16kernels.py).

    python scripts/check_bf16_kernels.py
"""

import sys

import ml_dtypes
import numpy as np
from tqdm import tqdm

from fpsim.formats.bf16kernels import bf16_to_f32, f32_to_bf16, snap_bf16

STEP = 2**24


def main() -> int:
    bad = 0
    for start in tqdm(range(0, 2**32, STEP), desc="float32 patterns", unit="chunk", file=sys.stderr):
        x = np.arange(start, start + STEP, dtype=np.uint64).astype(np.uint32).view(np.float32)
        with np.errstate(invalid="ignore", over="ignore"):
            ref = x.astype(ml_dtypes.bfloat16).view(np.uint16)
        bad += int(np.count_nonzero(f32_to_bf16(x).view(np.uint16) != ref))
        bad += int(np.count_nonzero(snap_bf16(x).view(np.uint32) != ref.astype(np.uint32) << 16))
    w = np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(ml_dtypes.bfloat16)
    wide = int(np.count_nonzero(bf16_to_f32(w).view(np.uint32) != w.astype(np.float32).view(np.uint32)))
    print(f"f32_to_bf16 and snap_bf16 on all 2**32 float32 patterns: {bad} differences from ml_dtypes")
    print(f"bf16_to_f32 on all 2**16 bfloat16 patterns: {wide} differences from ml_dtypes")
    return 1 if bad or wide else 0


if __name__ == "__main__":
    sys.exit(main())
