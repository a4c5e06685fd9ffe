#!/usr/bin/env bash
# Training throughput and peak memory on the real pretrained model (builtin:smollm2-135m,
# SmolLM2-135M-Instruct): fp4lab's SFT, QAT (NVFP4 W4A4) and QAD (NVFP4 W4A4, distilling from its
# BF16 self) steps (bench_train --model smollm2), and the same SFT step in Hugging Face
# transformers, PyTorch eager mode (train_step.py --model-dir), with the same torch from the
# project's virtual environment. Batch 8 x 256 tokens, BF16 autocast, AdamW, as issue 19 asks.
#
# This VM's speed moves by 1.5x within a minute, so nothing is compared across minutes: the three
# fp4lab recipes run in one process, taking turns step by step (bench_train --recipe sft,qat,qad),
# and fp4lab's SFT and transformers' run as two processes that take turns step by step through two
# FIFOs (FP4LAB_BENCH_TURN_WAIT / _POST). Every ratio is taken step by step within a round of
# turns and reported as the median over all of them, with its quartiles, for ROUNDS runs of each
# (default 2). Peak memory comes from one run of each recipe alone (the turn-taking process holds
# all three models).
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
STEPS=${STEPS:-12}
OUT=$(mktemp)
TURNS=$(mktemp -d)
mkfifo "$TURNS/cpp" "$TURNS/py"
trap '[ -n "${RAW:-}" ] && cp "$OUT" "$RAW"; rm -rf "$OUT" "$TURNS"' EXIT  # RAW=FILE keeps the JSON lines
COMMON=(--model smollm2 --warmup 1 --batch 8 --seq 256 --threads "$THREADS")
{
  # Peak memory, one recipe per process (one timed step each; their times are not used).
  for recipe in sft qat qad; do
    "$CPP" "${COMMON[@]}" --recipe "$recipe" --steps 1 | sed 's/^{/{"memory_run":true,/'
  done
  for ((r = 0; r < ROUNDS; ++r)); do
    "$CPP" "${COMMON[@]}" --recipe sft,qat,qad --steps "$STEPS" | sed "s/^{/{\"round\":$r,/"
    # fp4lab's SFT and transformers' in lockstep: each waits for a byte on its FIFO before a step
    # and writes one to the other's after it; fp4lab goes first.
    FP4LAB_BENCH_TURN_WAIT="$TURNS/cpp" FP4LAB_BENCH_TURN_POST="$TURNS/py" \
      "$CPP" "${COMMON[@]}" --recipe sft --steps "$STEPS" | sed "s/^{/{\"round\":$r,\"paired\":true,/" &
    CPP_PID=$!
    FP4LAB_BENCH_TURN_WAIT="$TURNS/py" FP4LAB_BENCH_TURN_POST="$TURNS/cpp" \
      "$PY" tests/bench/train_step.py --model-dir "$MODEL_DIR" --steps "$STEPS" --warmup 1 --batch 8 \
      --seq 256 --threads "$THREADS" 2>/dev/null | sed "s/^{/{\"round\":$r,\"paired\":true,/" &
    PY_PID=$!
    printf t > "$TURNS/cpp"
    wait "$CPP_PID" "$PY_PID"
  done
} > "$OUT"
"$PY" - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
memory = {r["recipe"]: r["peak_rss_mb"] for r in rows if r.get("memory_run")}
timed = [r for r in rows if "round" in r]
rounds = sorted({r["round"] for r in timed})
def run(impl, recipe, rnd, paired=False):
    return next(r for r in timed if r["impl"] == impl and r["recipe"] == recipe and r["round"] == rnd
                and r.get("paired", False) == paired)
fp = {k: [run("fp4lab-cpp", k, n) for n in rounds] for k in ("sft", "qat", "qad")}
hf = [run("transformers-eager", "sft", n, True) for n in rounds]
fp_paired = [run("fp4lab-cpp", "sft", n, True) for n in rounds]
first = fp["sft"][0]
print(f"torch {first['torch']}, {first['threads']} threads, SmolLM2-135M-Instruct, batch 8 x 256, BF16 autocast, AdamW; "
      f"fp4lab's BF16 linear layers through {first['bf16_gemm']} GEMMs, {first['allocator']}; "
      f"{len(rounds)} rounds of {len(first['steps_s']) - 1} timed steps per recipe\n")
def steps(r):  # the timed steps, warm-up dropped
    return r["steps_s"][1:]
def spread(xs):
    q = statistics.quantiles(xs, n=4) if len(xs) >= 2 else [xs[0]] * 3
    return f"median **{statistics.median(xs):.3f}x** (quartiles {q[0]:.2f}-{q[2]:.2f}, {len(xs)} pairs)"
print("| implementation | recipe | median step (s) | tokens/s | peak RSS alone (MB) | ratio |")
print("|---|---|---|---|---|---|")
sft_steps = [s for r in fp["sft"] for s in steps(r)]
hf_ratio = [a / b for r, f in zip(hf, fp_paired) for a, b in zip(steps(r), steps(f))]
for recipe in ("sft", "qat", "qad"):
    all_steps = [s for r in fp[recipe] for s in steps(r)]
    step = statistics.median(all_steps)
    if recipe == "sft":
        ratio = f"transformers / fp4lab step by step: {spread(hf_ratio)}"
    else:
        pairs = [a / b for r, s in zip(fp[recipe], fp["sft"]) for a, b in zip(steps(r), steps(s))]
        ratio = f"/ SFT step by step: {spread(pairs)}; of medians {step / statistics.median(sft_steps):.3f}x"
    print(f"| fp4lab | {recipe} | {step:.2f} | {8 * 256 / step:.0f} | {memory.get(recipe, float('nan')):.0f} | {ratio} |")
hf_step = statistics.median(s for r in hf for s in steps(r))
print(f"| transformers eager | sft | {hf_step:.2f} | {8 * 256 / hf_step:.0f} | {max(r['peak_rss_mb'] for r in hf):.0f} | |")
print("\nSteps, s, round by round (fp4lab SFT / QAT / QAD taking turns; fp4lab SFT / transformers taking turns):")
for n, rnd in enumerate(rounds):
    print(f"- round {rnd}: " + " | ".join(
        ", ".join(f"{s:.2f}" for s in steps(r)) for r in (fp["sft"][n], fp["qat"][n], fp["qad"][n], fp_paired[n], hf[n])))
PY
