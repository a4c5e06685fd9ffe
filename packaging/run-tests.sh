#!/usr/bin/env bash
# The README's test command (and CI's): installs what is missing, builds, and runs every test:
# the optimized build, then the same tests under AddressSanitizer and UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${FP4LAB_JOBS:-$(nproc)}
bash packaging/install-deps.sh > /dev/null

echo "== release build and tests"
cmake --preset release > /dev/null
cmake --build --preset release -j "$JOBS"
ctest --preset release -j "$JOBS"

# The sanitizers cover the code that owns its memory: kernels, common, safetensors and GGUF, the
# HDF5 log, data, the exporters.
# (The wheel's LibTorch is not built with them.)
echo "== sanitizers (address, undefined)"
cmake --preset asan > /dev/null
cmake --build --preset asan -j "$JOBS" --target test_kernels test_common test_io test_log test_data test_export
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --preset asan -j "$JOBS"
