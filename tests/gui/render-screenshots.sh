#!/usr/bin/env bash
# Renders the workbench's views with real runs into docs/screenshots/*.png (the README's picture
# and the user guide's): runs the quick built-in experiment once (kept in build/screenshot-runs),
# then the hidden [.screenshots] test of test_workbench under Xvfb with Qt's xcb platform, so the
# pictures use the real window system and fonts. Needs the release build.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${FP4LAB_BUILD:-build/release}
RUNS=${FP4LAB_SCREENSHOT_RUNS:-build/screenshot-runs}
OUT=${FP4LAB_SCREENSHOT_OUT:-docs/screenshots}
cmake --build "$BUILD" --target fp4lab test_workbench
if [[ ! -f "$RUNS/report.md" ]]; then
  rm -rf "$RUNS"
  "$BUILD/app/fp4lab" experiment --quick --output-dir "$RUNS"
fi
if [[ ! -f "$RUNS/sensitivity.h5" ]]; then
  # The model view's size/accuracy frontier: the SFT model's layer sensitivity in NVFP4.
  "$BUILD/app/fp4lab" sensitivity "$RUNS/sft/model" --data builtin:sft --format nvfp4 \
    --max-batches 2 --threads 1 --output "$RUNS/sensitivity.h5"
fi
mkdir -p "$OUT"
FP4LAB_SCREENSHOT_RUNS=$(realpath "$RUNS") FP4LAB_SCREENSHOT_OUT=$(realpath "$OUT") \
  QT_QPA_PLATFORM=xcb xvfb-run -a -s "-screen 0 1700x1100x24" \
  "$BUILD/tests/test_workbench" "[.screenshots]"
ls -l "$OUT"
