"""fpsim's float16 rounding kernels against numpy's cast on every float32 bit pattern (all 2**32):
``f32_to_f16`` (its bit-pattern path) and ``snap_f16``; prints the number of differing results
(0 expected).  Several minutes on one core; the test suite checks a structured sample
(tests/formats/test_fast_casts.py).

    python scripts/check_f16_kernels.py
"""

import sys

import numpy as np
from tqdm import tqdm

from fpsim.formats.kernels import _f32_to_f16_bits, snap_f16

STEP = 2**22


def main() -> int:
    bad = {"f32_to_f16": 0, "snap_f16": 0}
    for start in tqdm(range(0, 2**32, STEP), desc="float32 patterns", unit="chunk", file=sys.stderr):
        x = np.arange(start, start + STEP, dtype=np.uint64).astype(np.uint32).view(np.float32)
        with np.errstate(invalid="ignore", over="ignore"):
            ref = x.astype(np.float16)
        ref16, ref32 = ref.view(np.uint16), ref.astype(np.float32).view(np.uint32)
        bad["f32_to_f16"] += int(np.count_nonzero(_f32_to_f16_bits(x).view(np.uint16) != ref16))
        nan = np.isnan(x)  # snap_f16 keeps a NaN's own float32 payload: there only NaN is asked for
        s = snap_f16(x)
        bad["snap_f16"] += int(np.count_nonzero((s.view(np.uint32) != ref32) & ~nan))
        bad["snap_f16"] += int(np.count_nonzero(np.isnan(s) != nan))
    for name, n in bad.items():
        print(f"{name} on all 2**32 float32 patterns: {n} differences from numpy's cast")
    return 1 if any(bad.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
