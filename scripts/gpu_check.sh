#!/usr/bin/env bash
# The one prepared run for a machine with an NVIDIA GPU on which CuPy and PyTorch (CUDA) are
# already installed.  It installs nothing but fpsim itself (editable, without dependencies,
# without build isolation - the machine may have no network), then:
#   1. prints versions: python, numpy, ml_dtypes, cupy, torch, and the GPU (nvidia-smi);
#   2. runs the GPU tests: pytest tests/engine/test_backend.py tests/tools/test_gpu_check.py
#      (their cupy cases run only where CuPy sees a GPU);
#   3. runs `fpsim gpu-check` (every op and format, numpy vs cupy; the reference task under
#      fp32 / fp16-dynamic / bf16-master, 50 steps; rounding-event counts; step times);
#   4. trains the reference task with PyTorch CUDA autocast + GradScaler (float16), and
#      plain float32 and autocast bfloat16, from fpsim's initial weights, against fpsim's
#      matching recipe on cupy: loss-curve agreement, final losses, step times.
# Each step has a time limit; all of it fits in about 8 minutes on one H200 (typically 2-3).
# Everything printed also goes to the log file: $1, else $OUT/gpu_check.log when $OUT is set,
# else ./gpu_check_<date>.log.  Numbers also go to gpu_check*.json next to the log.
#
#   bash scripts/gpu_check.sh [LOGFILE]
set -u
cd "$(dirname "$0")/.."
if [ -n "${1:-}" ]; then
    LOG="$1"
elif [ -n "${OUT:-}" ]; then
    LOG="$OUT/gpu_check.log"
else
    LOG="gpu_check_$(date +%Y%m%d_%H%M%S).log"
fi
mkdir -p "$(dirname "$LOG")"
JSON_DIR="$(dirname "$LOG")"
exec > >(tee -a "$LOG") 2>&1
PY="${PYTHON:-python}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # works even if the editable install below fails
export MPLBACKEND=Agg
start=$(date +%s)
step() { echo; echo "=== [$(( $(date +%s) - start ))s] $* ==="; }
declare -A RC

step "install fpsim itself (no dependencies)"
timeout 30 "$PY" -m pip install --no-deps --no-build-isolation -q -e . \
    || echo "pip install failed; using the source tree through PYTHONPATH instead"

step "versions"
timeout 20 "$PY" - <<'EOF'
import importlib, platform, sys
print("python", platform.python_version(), sys.executable)
for name in ("numpy", "ml_dtypes", "cupy", "torch", "pytest"):
    try:
        m = importlib.import_module(name)
        print(f"{name:10s}", getattr(m, "__version__", "?"))
    except Exception as e:
        print(f"{name:10s} NOT IMPORTABLE: {type(e).__name__}: {e}")
try:
    import cupy as cp
    print("cupy: CUDA runtime", cp.cuda.runtime.runtimeGetVersion(), "devices", cp.cuda.runtime.getDeviceCount())
except Exception as e:
    print("cupy: no device:", e)
try:
    import torch
    print("torch: CUDA", torch.version.cuda, "available", torch.cuda.is_available(),
          torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
except Exception as e:
    print("torch: ", e)
import fpsim, fpsim.backend
print("fpsim", fpsim.__version__, "from", fpsim.__file__, "backends", fpsim.backend.available())
EOF
RC[versions]=$?
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>/dev/null || echo "nvidia-smi: not found"
echo "CUPY_TF32=${CUPY_TF32:-unset} (must be unset or 0: TF32 matmuls would not match float32)"

step "GPU tests: pytest tests/engine/test_backend.py tests/tools/test_gpu_check.py"
if "$PY" -c "import pytest" 2>/dev/null; then
    timeout 170 "$PY" -m pytest tests/engine/test_backend.py tests/tools/test_gpu_check.py -q -ra -p no:cacheprovider
    RC[pytest]=$?
else
    echo "pytest is not installed here: tests skipped"
    RC[pytest]=skipped
fi

step "fpsim gpu-check (ops, reference task 50 steps, rounding-event counts, step times)"
timeout 150 "$PY" -m fpsim.tools.cli gpu-check --json "$JSON_DIR/gpu_check.json"
RC[gpu_check]=$?

for dt in float16 float32 bfloat16; do
    step "PyTorch CUDA ($dt$([ $dt = float16 ] && echo ' autocast + GradScaler')) vs fpsim on cupy, reference task 150 steps"
    timeout 35 "$PY" -m fpsim.tools.cli gpu-check --no-ops --no-task --torch --torch-device cuda --torch-dtype "$dt" \
        --steps 150 --json "$JSON_DIR/gpu_check_torch_$dt.json"
    RC[torch_$dt]=$?
done

step "summary (exit status of each part; 124 = time limit)"
for k in versions pytest gpu_check torch_float16 torch_float32 torch_bfloat16; do
    echo "  $k: ${RC[$k]}"
done
echo "log: $LOG"
