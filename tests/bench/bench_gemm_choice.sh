#!/usr/bin/env bash
# Is the default BF16 GEMM (measured per machine, engine/model/gemm_choice.h) as fast as the faster
# of the two forced ones? Three bench_train processes train the same SFT step: FP4LAB_BF16_GEMM=bf16
# (LibTorch's BF16 GEMM), FP4LAB_BF16_GEMM=fp32 (the fp32 GEMM on BF16-rounded operands), and the
# default (the choice a run makes: measured, or read from fp4lab's cache). They take turns step by
# step in a ring of FIFOs (FP4LAB_BENCH_TURN_WAIT / _POST), so every ratio compares steps of the
# same minute on this VM, whose speed moves within minutes. Reports, per model, the median step of
# each and the median over step triples of default / faster forced, with its quartiles.
# usage: [MODELS="tiny smollm2"] [ROUNDS=N] [STEPS=N] [THREADS=N] tests/bench/bench_gemm_choice.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build/release}
VENV=${FP4LAB_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/fp4lab/venv-torch-2.11.0}
PY="$VENV/bin/python"
CPP="$BUILD/tests/bench/bench_train"
[ -x "$CPP" ] || { echo "build $CPP first (cmake --build --preset release --target bench_train)" >&2; exit 2; }
MODELS=${MODELS:-tiny smollm2}
ROUNDS=${ROUNDS:-2}
STEPS=${STEPS:-6}
THREADS=${THREADS:-$(nproc)}
OUT=$(mktemp)
RING=$(mktemp -d)
trap '[ -n "${RAW:-}" ] && cp "$OUT" "$RAW"; rm -rf "$OUT" "$RING"' EXIT  # RAW=FILE keeps the JSON lines
mkfifo "$RING/bf16" "$RING/fp32" "$RING/default"
for model in $MODELS; do
  case $model in
    tiny) BATCH=16 ;;
    *) BATCH=8 ;;
  esac
  # The default's choice first, alone: measured on an idle machine (or read from the cache), not
  # while the ring's first process trains.
  "$CPP" --model "$model" --recipe sft --steps 0 --batch "$BATCH" --seq 256 --threads "$THREADS"
  for ((r = 0; r < ROUNDS; ++r)); do
    pids=()
    # bf16 -> fp32 -> default -> bf16: each waits for a byte on its FIFO before a step and writes
    # one to the next one's after it.
    for pair in "bf16 fp32" "fp32 default" "default bf16"; do
      set -- $pair
      gemm=$1; [ "$gemm" = default ] && gemm=
      FP4LAB_BF16_GEMM=$gemm FP4LAB_BENCH_TURN_WAIT="$RING/$1" FP4LAB_BENCH_TURN_POST="$RING/$2" \
        "$CPP" --model "$model" --recipe sft --warmup 1 --steps "$STEPS" --batch "$BATCH" --seq 256 \
        --threads "$THREADS" | sed "s/^{/{\"round\":$r,\"path\":\"$1\",/" >> "$OUT" &
      pids+=($!)
    done
    printf t > "$RING/bf16"
    wait "${pids[@]}"
  done
done
"$PY" - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
first = rows[0]
print(f"torch {first['torch']}, {first['threads']} threads, SFT step, BF16 autocast, AdamW; "
      f"the default chose: " + ", ".join(sorted({f"{r['model']}: {r['bf16_gemm']} ({r['gemm_source']})"
                                                for r in rows if r['path'] == 'default'})) + "\n")
print("| model | batch x seq | LibTorch's BF16 GEMM (s) | fp32 GEMM (s) | default (s) | default / faster forced, step by step |")
print("|---|---|---|---|---|---|")
for model in dict.fromkeys(r["model"] for r in rows):
    mine = [r for r in rows if r["model"] == model]
    rounds = sorted({r["round"] for r in mine})
    def steps(path, rnd):
        return next(r for r in mine if r["path"] == path and r["round"] == rnd)["steps_s"][1:]
    med = {p: statistics.median(s for n in rounds for s in steps(p, n)) for p in ("bf16", "fp32", "default")}
    ratios = [d / min(b, f) for n in rounds
              for b, f, d in zip(steps("bf16", n), steps("fp32", n), steps("default", n))]
    q = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [ratios[0]] * 3
    m = mine[0]
    print(f"| {model} | {m['batch']} x {m['seq']} | {med['bf16']:.3f} | {med['fp32']:.3f} | {med['default']:.3f} | "
          f"**{statistics.median(ratios):.3f}x** (quartiles {q[0]:.3f}-{q[2]:.3f}, {len(ratios)} triples) |")
PY
