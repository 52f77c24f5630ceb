#!/usr/bin/env bash
# The measurements taken on a lent H200 (the device tool), as one script: `meshplan calibrate --quick`
# (the CUDA backend) and tests/calibrate/measure_shapes.py (kernel timings by shape through PyTorch).
# The binary and its plugin are built here (Debian 12) and carried in .devcarry/ with the three
# libraries the device image lacks; CUDA's own libraries are the device's.
#   device run: bash tests/calibrate/device_h200.sh   (carry .devcarry; results under $OUT)
set -uo pipefail
OUT=${OUT:-/tmp/meshplan-device}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.devcarry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export MESHPLAN_DATA_DIR=$PWD
# Where the image has no /usr/local/cuda/lib64, the CUDA 13 libraries PyTorch's wheels carry will do.
if ldd .devcarry/meshplan-calibrate-cuda.so | grep -q "not found"; then
  for lib in $(find / -xdev -name 'libcublasLt.so.13*' -o -name 'libcudart.so.13*' 2>/dev/null); do
    LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$(dirname "$lib")
  done
fi
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit,memory.total --format=csv \
  | tee "$OUT/gpu.txt"
ldd .devcarry/meshplan-calibrate-cuda.so | grep -E "not found|cublas|cudart" | tee -a "$OUT/gpu.txt"
start=$SECONDS
timeout 300 .devcarry/meshplan calibrate --quick --out "$OUT/h200-quick.json" 2>&1 | tee "$OUT/calibrate.log" | tail -40
echo "calibrate: rc ${PIPESTATUS[0]} after $((SECONDS - start)) s"
start=$SECONDS
PYTHONUNBUFFERED=1 timeout 200 python3 tests/calibrate/measure_shapes.py "$OUT/shapes.csv" 2>&1 | tee "$OUT/shapes.log" | tail -30
echo "shapes: rc ${PIPESTATUS[0]} after $((SECONDS - start)) s"
