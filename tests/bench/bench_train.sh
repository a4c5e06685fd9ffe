#!/usr/bin/env bash
# Training throughput and peak memory, side by side in one run: fp4lab's C++ engine on the
# allocator the product links (bench_train: tcmalloc) and on glibc's malloc (bench_train_glibc),
# and the same model and step in Python PyTorch eager mode (train_step.py), with the same torch
# from the project's virtual environment, for the built-in model and a ~100M config.
# The two alternate over ROUNDS rounds (default 3), so that drift in this machine's speed hits both
# alike; the table gives each one's median step time and the C++ / Python ratio of every round.
# usage: [ROUNDS=N] [THREADS=N] [MODELS="tiny 100m"] tests/bench/bench_train.sh [BUILD_DIR]
#        (default build/release)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build/release}
VENV=${FP4LAB_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/fp4lab/venv-torch-2.11.0}
PY="$VENV/bin/python"
CPP="$BUILD/tests/bench/bench_train"
GLIBC="$BUILD/tests/bench/bench_train_glibc"
[ -x "$CPP" ] && [ -x "$GLIBC" ] || { echo "build $CPP and $GLIBC first (cmake --build --preset release --target bench_train bench_train_glibc)" >&2; exit 2; }
THREADS=${THREADS:-$(nproc)}
ROUNDS=${ROUNDS:-3}
MODELS=${MODELS:-tiny 100m}

run() {  # model steps batch seq
  local model=$1 steps=$2 batch=$3 seq=$4
  "$CPP" --model "$model" --steps "$steps" --batch "$batch" --seq "$seq" --threads "$THREADS"
  "$GLIBC" --model "$model" --steps "$steps" --batch "$batch" --seq "$seq" --threads "$THREADS"
  "$PY" tests/bench/train_step.py --model "$model" --steps "$steps" --batch "$batch" --seq "$seq" --threads "$THREADS" 2>/dev/null
}
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
for ((r = 0; r < ROUNDS; ++r)); do
  for model in $MODELS; do
    case $model in
      tiny) run tiny 30 16 256 ;;
      100m) run 100m 6 4 256 ;;
      *) echo "unknown model $model (tiny, 100m)" >&2; exit 2 ;;
    esac
  done
done > "$OUT"
"$PY" - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"torch {rows[0]['torch']}, {rows[0]['threads']} threads, BF16 autocast, AdamW, batch x seq as listed\n")
print("| model | params | batch x seq | implementation | median step (s) | tokens/s | peak RSS (MB) | Python / this per round (median) | glibc / tcmalloc per round (median) |")
print("|---|---|---|---|---|---|---|---|---|")
def per_round(xs):
    return " / ".join(f"{x:.2f}" for x in xs) + f" ({statistics.median(xs):.2f}x)"
for model in dict.fromkeys(r["model"] for r in rows):
    tc = [r for r in rows if r["model"] == model and r.get("allocator") == "tcmalloc"]
    gl = [r for r in rows if r["model"] == model and r.get("allocator") == "glibc"]
    py = [r for r in rows if r["model"] == model and r["impl"] == "python-eager"]
    for label, runs in (("fp4lab C++, tcmalloc", tc), ("fp4lab C++, glibc", gl), ("PyTorch eager", py)):
        r = runs[0]
        step = statistics.median(x["step_s"] for x in runs)
        rss = max(x["peak_rss_mb"] for x in runs)
        vs_py = per_round([p["step_s"] / c["step_s"] for c, p in zip(runs, py)]) if runs is not py else ""
        vs_tc = per_round([g["step_s"] / t["step_s"] for t, g in zip(tc, gl)]) if runs is tc else ""
        print(f"| {model} | {r['params'] / 1e6:.1f} M | {r['batch']} x {r['seq']} | {label} | "
              f"{step:.3f} | {r['batch'] * r['seq'] / step:.0f} | {rss:.0f} | {vs_py} | {vs_tc} |")
PY
