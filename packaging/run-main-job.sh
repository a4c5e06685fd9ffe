#!/usr/bin/env bash
# The README's main job: installs what is missing, builds, and runs the kernels' demonstration
# (until the built-in experiment exists): a synthetic LLM-like checkpoint quantized to MXFP4 and
# NVFP4 with `fp4lab quantize`, decoded back with `fp4lab dequantize`.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${FP4LAB_JOBS:-$(nproc)}
bash packaging/install-deps.sh > /dev/null
cmake --preset release > /dev/null
cmake --build --preset release -j "$JOBS" --target fp4lab
FP4LAB=build/release/app/fp4lab
OUT=${FP4LAB_DEMO_DIR:-build/demo}
mkdir -p "$OUT"
python3 tests/cli/safetensors_util.py llm "$OUT/model.safetensors" 2024
for format in mxfp4 nvfp4; do
  echo
  "$FP4LAB" quantize "$OUT/model.safetensors" "$OUT/model-$format.safetensors" --format "$format" --force
  "$FP4LAB" dequantize "$OUT/model-$format.safetensors" "$OUT/model-$format-decoded.safetensors" --force
done
echo
echo "files in $OUT:"
ls -l "$OUT"
