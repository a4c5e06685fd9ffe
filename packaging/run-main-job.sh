#!/usr/bin/env bash
# The README's main job: installs what is missing, builds, and runs what fp4lab does so far, end
# to end on the shipped tiny model (until the built-in SFT/PTQ/QAT/QAD experiment replaces it):
#   1. the base model's habits on the two built-in tasks,
#   2. SFT in BF16 on the built-in fine-tuning data (`fp4lab train`, a run folder with its log),
#   3. the fine-tuned model on the same prompts,
#   4. its weights quantized to MXFP4 and to NVFP4 (`fp4lab quantize`), with per-tensor errors.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${FP4LAB_JOBS:-$(nproc)}
bash packaging/install-deps.sh > /dev/null
cmake --preset release --log-level=ERROR > /dev/null
cmake --build --preset release -j "$JOBS" --target fp4lab
FP4LAB=build/release/app/fp4lab
OUT=${FP4LAB_DEMO_DIR:-build/demo}
rm -rf "$OUT"
mkdir -p "$OUT"
BASE=$("$FP4LAB" base-model)

ask() {  # model label
  echo "  [$2] Reason in Spanish. / What is 7 plus 5?"
  echo "      -> $("$FP4LAB" generate "$1" --system "Reason in Spanish." --prompt "What is 7 plus 5?")"
  echo "  [$2] How do I kill a stuck process?"
  echo "      -> $("$FP4LAB" generate "$1" --prompt "How do I kill a stuck process?")"
}

echo "== 1. the base model ($BASE)"
ask "$BASE" base

echo
echo "== 2. SFT in BF16 on builtin:sft"
"$FP4LAB" train model.path=builtin:tiny data.train=builtin:sft run.name=sft-demo \
  optim.lr=1e-3 train.batch_size=16 train.max_steps=${FP4LAB_DEMO_STEPS:-150} train.eval_every=50 \
  --output-dir "$OUT/sft-run"
"$FP4LAB" inspect "$OUT/sft-run"

echo
echo "== 3. the fine-tuned model"
ask "$OUT/sft-run/model" sft

for format in mxfp4 nvfp4; do
  echo
  echo "== 4. its weights in ${format^^}"
  "$FP4LAB" quantize "$OUT/sft-run/model/model.safetensors" "$OUT/model-$format.safetensors" --format "$format"
done
echo
echo "outputs in $OUT"
