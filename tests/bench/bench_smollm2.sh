#!/usr/bin/env bash
# Training throughput and peak memory on the real pretrained model (builtin:smollm2-135m,
# SmolLM2-135M-Instruct), side by side in one run: fp4lab's SFT, QAT (NVFP4 W4A4) and QAD (NVFP4
# W4A4, distilling from its BF16 self) steps (bench_train --model smollm2), and the same SFT step
# in Hugging Face transformers, PyTorch eager mode (train_step.py --model-dir), with the same torch from
# the project's virtual environment. Batch 8 x 256 tokens, BF16 autocast, AdamW, as issue 19 asks.
# The implementations alternate over ROUNDS rounds (default 2), so that drift in this machine's
# speed hits all alike; the table gives each one's median step and the ratios of every round.
# usage: [ROUNDS=N] [THREADS=N] [STEPS=N] tests/bench/bench_smollm2.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build/release}
VENV=${FP4LAB_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/fp4lab/venv-torch-2.11.0}
PY="$VENV/bin/python"
CPP="$BUILD/tests/bench/bench_train"
[ -x "$CPP" ] || { echo "build $CPP first (cmake --build --preset release --target bench_train)" >&2; exit 2; }
# builtin:smollm2-135m's folder in fp4lab's cache (run/model.h, cacheRoot()).
MODEL_DIR="${FP4LAB_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/fp4lab}/models/smollm2-135m-instruct"
[ -f "$MODEL_DIR/config.json" ] || {
  echo "builtin:smollm2-135m is not imported yet: run '$BUILD/app/fp4lab generate builtin:smollm2-135m --prompt hi' once (packaging/install-deps.sh downloads it)" >&2; exit 2; }
THREADS=${THREADS:-$(nproc)}
ROUNDS=${ROUNDS:-2}
STEPS=${STEPS:-3}
OUT=$(mktemp)
trap '[ -n "${RAW:-}" ] && cp "$OUT" "$RAW"; rm -f "$OUT"' EXIT  # RAW=FILE keeps the JSON lines
for ((r = 0; r < ROUNDS; ++r)); do
  for recipe in sft qat qad; do
    "$CPP" --model smollm2 --recipe "$recipe" --steps "$STEPS" --warmup 1 --batch 8 --seq 256 --threads "$THREADS"
  done
  # The SFT step on LibTorch's own BF16 GEMMs, where fp4lab's linear layers take the fp32 GEMMs
  # (a CPU without AMX, model/linear.cpp); with AMX that is already the step above.
  if grep -q '"bf16_gemm":"fp32"' "$OUT"; then
    FP4LAB_BF16_GEMM=bf16 "$CPP" --model smollm2 --recipe sft --steps "$STEPS" --warmup 1 --batch 8 --seq 256 --threads "$THREADS"
  fi
  "$PY" tests/bench/train_step.py --model-dir "$MODEL_DIR" --steps "$STEPS" --warmup 1 --batch 8 --seq 256 --threads "$THREADS" 2>/dev/null
done > "$OUT"
"$PY" - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
gemm = next((r["bf16_gemm"] for r in rows if r["impl"] == "fp4lab-cpp"), "")
print(f"torch {rows[0]['torch']}, {rows[0]['threads']} threads, SmolLM2-135M-Instruct, batch 8 x 256, BF16 autocast, AdamW; "
      f"fp4lab's BF16 linear layers through {gemm} GEMMs\n")
print("| implementation | recipe | median step (s) | tokens/s | peak RSS (MB) | per round |")
print("|---|---|---|---|---|---|")
def runs(impl, recipe, path=None):
    return [r for r in rows if r["impl"] == impl and r["recipe"] == recipe
            and (impl != "fp4lab-cpp" or r["bf16_gemm"] == (path or gemm))]
sft = runs("fp4lab-cpp", "sft")
hf = runs("transformers-eager", "sft")
for impl, recipe, label, versus, name in [
        ("fp4lab-cpp", "sft", "fp4lab", hf, "transformers / fp4lab"),
        ("fp4lab-cpp", "qat", "fp4lab", sft, "this / fp4lab SFT"),
        ("fp4lab-cpp", "qad", "fp4lab", sft, "this / fp4lab SFT"),
        ("transformers-eager", "sft", "transformers eager", None, "")] + (
        [("fp4lab-cpp", "sft", "fp4lab, LibTorch's BF16 GEMMs", sft, "this / fp4lab SFT")]
        if gemm == "fp32" else []):
    rs = runs(impl, recipe, "bf16" if "LibTorch" in label else None)
    step = statistics.median(r["step_s"] for r in rs)
    rss = max(r["peak_rss_mb"] for r in rs)
    ratio = ""
    if versus is not None:
        xs = [(v["step_s"] / r["step_s"]) if name.startswith("transformers") else (r["step_s"] / v["step_s"])
              for r, v in zip(rs, versus)]
        ratio = f"{name}: " + " / ".join(f"{x:.2f}" for x in xs) + f" (median {statistics.median(xs):.2f}x)"
    print(f"| {label} | {recipe} | {step:.2f} | {8 * 256 / step:.0f} | {rss:.0f} | {ratio} |")
PY
