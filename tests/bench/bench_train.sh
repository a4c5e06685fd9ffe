#!/usr/bin/env bash
# Training throughput and peak memory, side by side in one run: fp4lab's C++ engine
# (bench_train) and the same model and step in Python PyTorch eager mode (train_step.py), with
# the same torch from the project's virtual environment, for the built-in model and a ~100M config.
# usage: tests/bench/bench_train.sh [BUILD_DIR]   (default build/release; prints a markdown table)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build/release}
VENV=${FP4LAB_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/fp4lab/venv-torch-2.11.0}
PY="$VENV/bin/python"
CPP="$BUILD/tests/bench/bench_train"
[ -x "$CPP" ] || { echo "build $CPP first (cmake --build --preset release --target bench_train)" >&2; exit 2; }
THREADS=${THREADS:-$(nproc)}

run() {  # model steps batch seq
  local model=$1 steps=$2 batch=$3 seq=$4
  "$CPP" --model "$model" --steps "$steps" --batch "$batch" --seq "$seq" --threads "$THREADS"
  "$PY" tests/bench/train_step.py --model "$model" --steps "$steps" --batch "$batch" --seq "$seq" --threads "$THREADS" 2>/dev/null
}
{
  run tiny 30 16 256
  run 100m 6 4 256
} > /tmp/fp4lab-bench-train.jsonl
"$PY" - /tmp/fp4lab-bench-train.jsonl <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"torch {rows[0]['torch']}, {rows[0]['threads']} threads, BF16 autocast, AdamW, batch x seq as listed\n")
print("| model | params | batch x seq | implementation | step (s) | tokens/s | peak RSS (MB) | C++ / Python |")
print("|---|---|---|---|---|---|---|---|")
for i in range(0, len(rows), 2):
    c, p = rows[i], rows[i + 1]
    for r in (c, p):
        ratio = f"{c['tok_per_s'] / p['tok_per_s']:.2f}x" if r is c else ""
        print(f"| {r['model']} | {r['params'] / 1e6:.1f} M | {r['batch']} x {r['seq']} | {r['impl']} | "
              f"{r['step_s']:.3f} | {r['tok_per_s']:.0f} | {r['peak_rss_mb']:.0f} | {ratio} |")
PY
