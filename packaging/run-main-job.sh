#!/usr/bin/env bash
# The README's main job: installs what is missing, builds, and runs the built-in experiment from
# the shipped tiny base model: SFT in BF16, then PTQ, QAT and QAD to MXFP4 and NVFP4, and QAT
# straight from the base model (`fp4lab experiment`).
#
# With a display (DISPLAY or WAYLAND_DISPLAY set) it opens the workbench window and starts the
# experiment in it: the runs appear one by one, their curves grow live, and the report opens in a
# tab at the end. Without a display, or with --headless, it runs on the command line and prints
# the report. Either way the run folders, their logs, report.md / report.csv and the PNG plots in
# report/ stay in $FP4LAB_EXPERIMENT_DIR (default build/experiment).
# Other arguments go to `fp4lab experiment` (e.g. --quick, --w4a16, qat_steps=200).
set -euo pipefail
cd "$(dirname "$0")/.."
headless=0
args=()
for a in "$@"; do
  if [[ "$a" == --headless ]]; then headless=1; else args+=("$a"); fi
done
if [[ -z "${DISPLAY:-}" && -z "${WAYLAND_DISPLAY:-}" ]]; then headless=1; fi
JOBS=${FP4LAB_JOBS:-$(nproc)}
bash packaging/install-deps.sh > /dev/null
cmake --preset release --log-level=ERROR > /dev/null
cmake --build --preset release -j "$JOBS" --target fp4lab
OUT=${FP4LAB_EXPERIMENT_DIR:-build/experiment}
# A fresh experiment each time (an existing folder's finished runs would be reused).
rm -rf "$OUT"
if (( headless )); then
  build/release/app/fp4lab experiment --output-dir "$OUT" "${args[@]}"
else
  echo "fp4lab: opening the workbench; the experiment runs in $OUT (close the window to stop)"
  build/release/app/fp4lab gui --experiment --experiment-dir "$OUT" -- "${args[@]}"
fi
