#!/usr/bin/env bash
# The README's main job: installs what is missing, builds, and runs the built-in experiment from
# the shipped tiny base model: SFT in BF16, then PTQ, QAT and QAD to MXFP4 and NVFP4, and QAT
# straight from the base model (`fp4lab experiment`). Prints the report; the run folders, their
# logs, report.md / report.csv and the PNG plots in report/ stay in $FP4LAB_EXPERIMENT_DIR
# (default build/experiment).
# Extra arguments go to `fp4lab experiment` (e.g. --quick, --w4a16, qat_steps=200).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${FP4LAB_JOBS:-$(nproc)}
bash packaging/install-deps.sh > /dev/null
cmake --preset release --log-level=ERROR > /dev/null
cmake --build --preset release -j "$JOBS" --target fp4lab
OUT=${FP4LAB_EXPERIMENT_DIR:-build/experiment}
# A fresh experiment each time (an existing folder's finished runs would be reused).
rm -rf "$OUT"
build/release/app/fp4lab experiment --output-dir "$OUT" "$@"
