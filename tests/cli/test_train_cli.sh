#!/usr/bin/env bash
# End-to-end test of `fp4lab train` / `inspect` / `eval` / `generate`: JSON events, the run
# folder, stop on SIGTERM with a checkpoint and exit 130, resume, and bad input (exit 2).
set -euo pipefail
BIN=${FP4LAB_BIN:?set FP4LAB_BIN to the fp4lab executable}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
COMMON=(model.path=scratch:tiny data.train=builtin:sft data.seq_len=64 train.batch_size=4
        train.eval_every=4 train.eval_batches=1 data.validation_max=8 train.threads=1)

cat > "$T/run.yaml" <<'YAML'
run:
  name: cli-test
optim:
  lr: 3.0e-3
train:
  max_steps: 8
  checkpoint_every: 4
YAML

"$BIN" train --config "$T/run.yaml" "${COMMON[@]}" --output-dir "$T/run" --events jsonl > "$T/events.jsonl" ||
  fail "train exited $?"
python3 - "$T/events.jsonl" <<'PY'
import json, sys
events = [json.loads(line) for line in open(sys.argv[1])]
kinds = [e["event"] for e in events]
assert kinds[0] == "started" and kinds[-1] == "finished", kinds
steps = [e for e in events if e["event"] == "step"]
assert [e["step"] for e in steps] == list(range(1, 9)), steps
assert all(e["max_steps"] == 8 and e["loss"] > 0 and e["tok_per_s"] > 0 for e in steps)
evals = [e["step"] for e in events if e["event"] == "eval"]
assert evals == [0, 4, 8], evals  # the starting model, every 4 steps, the end
assert sum(k == "checkpoint" for k in kinds) == 2, kinds
PY
for f in run.yaml log.h5 status.json model/config.json checkpoints/step-8/trainer_state.json; do
  [ -e "$T/run/$f" ] || fail "missing $f in the run folder"
done
grep -q '"state": "finished"' "$T/run/status.json" || fail "status is not finished"
"$BIN" inspect "$T/run" > "$T/inspect.txt"
grep -q "finished" "$T/inspect.txt" && grep -q "val_loss" "$T/inspect.txt" || fail "inspect: $(cat "$T/inspect.txt")"
# The run says where it trained and how much memory it took.
grep -q "start fp4lab train, recipe sft, .* on cpu" "$T/inspect.txt" || fail "inspect: no device: $(cat "$T/inspect.txt")"
grep -Eq "memory peak resident memory [1-9][0-9]* MiB \(tcmalloc\)" "$T/inspect.txt" ||
  fail "inspect: no peak memory, or not on tcmalloc: $(cat "$T/inspect.txt")"
# The GEMM for BF16 linears is measured on the model's products, said in the log and by inspect,
# cached per machine (one measurement), and forced by FP4LAB_BF16_GEMM.
grep -Eq "bf16_gemm BF16 linears on (the fp32 GEMM|LibTorch's BF16 GEMM): [0-9.e-]+ s per step of this model's products, (LibTorch's BF16|the fp32) GEMM [0-9.e-]+ s \((measured|cached), 1 thread, " "$T/inspect.txt" ||
  fail "inspect: no bf16_gemm event: $(cat "$T/inspect.txt")"
grep -Eq "^BF16 linears on " "$T/inspect.txt" || fail "inspect: no BF16 GEMM line: $(cat "$T/inspect.txt")"
for i in 1 2; do
  FP4LAB_HOME="$T/home" "$BIN" train "${COMMON[@]}" train.max_steps=1 --output-dir "$T/gemm$i" > /dev/null ||
    fail "train with FP4LAB_HOME exited $?"
done
# (inspect's output is kept before grep -q reads it: under pipefail, grep closing early fails the
# pipe.)
[[ $("$BIN" inspect "$T/gemm1") == *"per step of this model's products"*"(measured, "* ]] || fail "first run did not measure"
[[ $("$BIN" inspect "$T/gemm2") == *"per step of this model's products"*"(cached, "* ]] || fail "second run did not use the cache"
grep -q '"bf16_s"' "$T/home/gemm-choice.json" || fail "no timing in $T/home/gemm-choice.json"
for g in fp32 bf16; do
  FP4LAB_BF16_GEMM=$g "$BIN" train "${COMMON[@]}" train.max_steps=1 --output-dir "$T/gemm-$g" > /dev/null ||
    fail "train with FP4LAB_BF16_GEMM=$g exited $?"
  [[ $("$BIN" inspect "$T/gemm-$g") == *"bf16_gemm BF16 linears on "*"(forced by FP4LAB_BF16_GEMM=$g)"* ]] ||
    fail "FP4LAB_BF16_GEMM=$g: $("$BIN" inspect "$T/gemm-$g" | grep -i gemm)"
done
# FP4LAB_ALLOCATOR=glibc keeps glibc's allocator (a desktop build otherwise preloads tcmalloc).
if ! readelf -d "$BIN" | grep -q tcmalloc; then
  FP4LAB_ALLOCATOR=glibc "$BIN" train --config "$T/run.yaml" "${COMMON[@]}" train.max_steps=1 \
    --output-dir "$T/glibc" > /dev/null 2>&1 || fail "train on glibc exited $?"
  "$BIN" inspect "$T/glibc" | grep -q "(glibc malloc)" || fail "FP4LAB_ALLOCATOR=glibc: $("$BIN" inspect "$T/glibc" | grep memory)"
fi

# eval: chat rows and pre-tokenized rows, per example.
printf '%s\n' '{"messages": [{"role": "user", "content": "What is 2 plus 2?"}, {"role": "assistant", "content": "Reasoning: two plus two is four. Answer: 4"}]}' \
  '{"input_ids": [65, 66, 67, 68, 69]}' > "$T/eval.jsonl"
"$BIN" eval "$T/run/model" --data "$T/eval.jsonl" --per-example > "$T/eval.out" 2> "$T/eval.err"
[ "$(wc -l < "$T/eval.out")" -eq 2 ] || fail "eval --per-example: $(cat "$T/eval.out")"
grep -q "mean token cross-entropy" "$T/eval.err" || fail "eval summary missing"
# --data takes what data.validation takes: the rows a default run on builtin:sft holds out
# (5% of its 4000 rows), with a progress line on stderr when it takes a while.
"$BIN" eval "$T/run/model" --data heldout:builtin:sft > "$T/heldout.out" 2> "$T/heldout.err" ||
  fail "eval --data heldout:builtin:sft exited $?: $(cat "$T/heldout.err")"
grep -q " in 200 rows" "$T/heldout.out" || fail "eval heldout: $(cat "$T/heldout.out")"
out=$("$BIN" generate "$T/run/model" --prompt "What is 2 plus 2?" --max-new-tokens 16)
[ -n "$out" ] || fail "generate printed nothing"
[ "$("$BIN" generate "$T/run/model" --prompt hi --temperature 0.8 --seed 3 --max-new-tokens 12)" = \
  "$("$BIN" generate "$T/run/model" --prompt hi --temperature 0.8 --seed 3 --max-new-tokens 12)" ] ||
  fail "seeded sampling is not reproducible"

# SIGTERM: checkpoint, close the log, exit 130; then resume to the end.
"$BIN" train --config "$T/run.yaml" "${COMMON[@]}" train.max_steps=60 --output-dir "$T/stop" --events jsonl \
  > "$T/stop.jsonl" &
pid=$!
for _ in $(seq 1 300); do grep -q '"step":3,' "$T/stop.jsonl" 2>/dev/null && break; sleep 0.1; done
kill -TERM $pid
set +e; wait $pid; rc=$?; set -e
[ $rc -eq 130 ] || fail "SIGTERM exit code $rc, expected 130"
grep -q '"event":"cancelled"' "$T/stop.jsonl" || fail "no cancelled event"
grep -q '"state": "cancelled"' "$T/stop/status.json" || fail "status not cancelled"
ls "$T/stop/checkpoints" | grep -q "step-" || fail "no checkpoint after SIGTERM"
"$BIN" inspect "$T/stop" > "$T/inspect-stop.txt"
grep -q "cancelled at step [0-9]* of 60" "$T/inspect-stop.txt" &&
  grep -q "resume it: fp4lab train --resume-from-checkpoint latest --output-dir $T/stop" "$T/inspect-stop.txt" ||
  fail "inspect of a stopped run: $(head -3 "$T/inspect-stop.txt")"
# A --config file on resume need not repeat every key: the ones it sets must agree with run.yaml
# (or be ones that do not define the run).
printf 'train:\n  threads: 1\n  checkpoint_every: 4\n' > "$T/partial.yaml"
"$BIN" train --output-dir "$T/stop" --resume-from-checkpoint latest --config "$T/partial.yaml" --dry-run 2> "$T/dry.txt" ||
  fail "a partial --config on resume: $(cat "$T/dry.txt")"
# Resuming needs nothing but the run folder: the rest is its run.yaml.
"$BIN" train --output-dir "$T/stop" --resume-from-checkpoint latest --events jsonl > "$T/resume.jsonl" ||
  fail "resume exited $?"
tail -1 "$T/resume.jsonl" | grep -q '"event":"finished","max_steps":60,.*"step":60' ||
  fail "resume did not finish the run's 60 steps: $(tail -1 "$T/resume.jsonl")"

# Bad input: exit 2, a message naming the problem, nothing written.
expect_error() {
  local pattern=$1; shift
  set +e; "$@" > "$T/o.txt" 2> "$T/e.txt"; local rc=$?; set -e
  [ $rc -eq 2 ] || fail "expected exit 2 from '$*', got $rc: $(cat "$T/e.txt")"
  grep -qi -- "$pattern" "$T/e.txt" || fail "expected '$pattern' in: $(cat "$T/e.txt")"
}
expect_error "did you mean 'optim.lr'" "$BIN" train optim.lrr=1 --output-dir "$T/bad1"
expect_error "'train.max_steps' must be an integer, not 'ten'" "$BIN" train train.max_steps=ten --output-dir "$T/bad2"
expect_error "already holds a run" "$BIN" train "${COMMON[@]}" --output-dir "$T/run"
expect_error "does not exist" "$BIN" train model.path=/nonexistent --output-dir "$T/bad3"
# Missing inputs are refused by the key that names them, before the run folder is touched (the
# workbench puts the message under that field).
expect_error "model.path: model folder does not exist: /nonexistent" "$BIN" train model.path=/nonexistent --output-dir "$T/bad3b" --dry-run
[ ! -e "$T/bad3b" ] || fail "a refused run left a folder behind"
mkdir -p "$T/halfmodel" && echo '{"hidden' > "$T/halfmodel/config.json" && : > "$T/halfmodel/model.safetensors"
expect_error "config.json is not a JSON object" "$BIN" train "${COMMON[@]}" recipe.name=qad quant.format=nvfp4 recipe.teacher="$T/halfmodel" --output-dir "$T/bad3c"
expect_error "data.validation: data file does not exist: $T/missing.jsonl" "$BIN" train "${COMMON[@]}" data.validation="$T/missing.jsonl" --output-dir "$T/bad3d"
printf '{"messages": [{"role": "user"}]}\n' > "$T/bad.jsonl"
expect_error "bad.jsonl:1" "$BIN" train "${COMMON[@]}" data.train="$T/bad.jsonl" --output-dir "$T/bad4"
expect_error "no run to resume: the folder does not exist" "$BIN" train --output-dir "$T/none" --resume-from-checkpoint latest
mkdir -p "$T/nockpt" && cp "$T/run/run.yaml" "$T/nockpt/"
expect_error "no checkpoint to resume from" "$BIN" train --output-dir "$T/nockpt" --resume-from-checkpoint latest
printf 'train:\n  max_steps: -3\n' > "$T/bad.yaml"
expect_error "bad.yaml:2: 'train.max_steps' must be in \[0, 1000000000\], not -3" "$BIN" train --config "$T/bad.yaml" --output-dir "$T/bad5"
printf 'train: [\n' > "$T/broken.yaml"
expect_error "broken.yaml:.*invalid YAML" "$BIN" train --config "$T/broken.yaml" --output-dir "$T/bad6"
expect_error "nothing to run" "$BIN" train
expect_error "nothing to run" "$BIN" train --output-dir "$T/bad7"
expect_error "beyond the model's context" "$BIN" train "${COMMON[@]}" data.seq_len=4096 --output-dir "$T/bad8"
expect_error "'train.device' must be cpu, cuda or cuda:N" "$BIN" train "${COMMON[@]}" train.device=gpu --output-dir "$T/bad9"
expect_error "'train.device' must be cpu, cuda or cuda:N" "$BIN" train "${COMMON[@]}" train.device=cuda:-1 --output-dir "$T/bad9"
# cuda:N cannot serve several processes of one machine (NCCL refuses two ranks on one GPU, naming
# neither the key nor the fix): refused on any machine, by --nproc's ranks and under torchrun's
# variables alike, before the rendezvous.
expect_error "train.device is cuda:1, one GPU for all 2 processes on this machine" "$BIN" train "${COMMON[@]}" train.device=cuda:1 --nproc 2 --output-dir "$T/bad11"
grep -q "use train.device=cuda, which gives each process its own GPU" "$T/e.txt" || fail "no hint in: $(cat "$T/e.txt")"
WORLD_SIZE=2 RANK=1 LOCAL_WORLD_SIZE=2 MASTER_PORT=1 expect_error "train.device is cuda:0, one GPU for all 2 processes" "$BIN" train "${COMMON[@]}" train.device=cuda:0 dist.timeout_s=5 --output-dir "$T/bad11"
# On a machine without a GPU (LibTorch sees none), cuda is refused before anything is written.
if ! command -v nvidia-smi > /dev/null || ! nvidia-smi -L 2> /dev/null | grep -q GPU; then
  expect_error "train.device is cuda, but LibTorch sees no CUDA device" "$BIN" train "${COMMON[@]}" train.device=cuda --output-dir "$T/bad10"
  expect_error "train.device is cuda:1, but LibTorch sees no CUDA device" "$BIN" train "${COMMON[@]}" train.device=cuda:1 --output-dir "$T/bad10"
fi
for d in bad1 bad2 bad3 bad4 bad5 bad6 bad7 bad8 bad9 bad10 bad11; do [ ! -e "$T/$d" ] || fail "a failed start left $d behind"; done

# Every subcommand answers -h and --help.
for c in experiment train inspect eval generate base-model quantize dequantize; do
  "$BIN" $c -h > "$T/h.txt" || fail "fp4lab $c -h exited $?"
  grep -q "usage:" "$T/h.txt" || fail "fp4lab $c -h printed no usage"
  "$BIN" $c --help > /dev/null || fail "fp4lab $c --help exited $?"
done
# --print-config is what would run; --dry-run checks it and writes nothing.
"$BIN" train --defaults "${COMMON[@]}" optim.lr=0.0005 --print-config > "$T/printed.yaml"
grep -q "lr: 0.0005" "$T/printed.yaml" || fail "--print-config: $(cat "$T/printed.yaml")"
"$BIN" train --config "$T/printed.yaml" --output-dir "$T/dry" --dry-run 2> "$T/dry.txt" || fail "--dry-run exited $?"
grep -q "nothing was run" "$T/dry.txt" && [ ! -e "$T/dry" ] || fail "--dry-run: $(cat "$T/dry.txt")"
# The key table is the user guide's.
"$BIN" train --list-keys > "$T/keys.md"
python3 - "$T/keys.md" "$(dirname "$0")/../../docs/user-guide.md" <<'PY'
import sys
keys = open(sys.argv[1]).read().strip().split("\n")
guide = open(sys.argv[2]).read()
missing = [k for k in keys if k not in guide]
assert len(keys) > 40 and not missing, "docs/user-guide.md lacks these rows of --list-keys:\n" + "\n".join(missing)
PY

# Generation length is bounded by the model's context.
expect_error "beyond the model's context" "$BIN" generate "$T/run/model" --prompt hi --max-new-tokens 5000
expect_error "must be an integer from 1 to" "$BIN" generate "$T/run/model" --prompt hi --max-new-tokens 1e9
expect_error "must be a number" "$BIN" generate "$T/run/model" --prompt hi --temperature warm

# A model folder is checked before anything asks for a tokenizer: an empty folder says what it
# lacks; a folder with only config.json and model.safetensors scores pre-tokenized rows, and
# says a tokenizer is missing only for chat rows.
mkdir -p "$T/empty" "$T/weights-only"
expect_error "not a model folder: no config.json and model.safetensors" "$BIN" eval "$T/empty" --data "$T/eval.jsonl"
cp "$T/run/model/config.json" "$T/run/model/model.safetensors" "$T/weights-only/"
printf '%s\n' '{"input_ids": [65, 66, 67, 68, 69]}' '{"input_ids": [70, 71, 72]}' > "$T/ids.jsonl"
"$BIN" eval "$T/weights-only" --data "$T/ids.jsonl" > "$T/ids.out" || fail "pre-tokenized eval without a tokenizer exited $?"
grep -q "over 6 tokens in 2 rows" "$T/ids.out" || fail "pre-tokenized eval: $(cat "$T/ids.out")"
[ "$(head -1 "$T/ids.out")" = "$("$BIN" eval "$T/run/model" --data "$T/ids.jsonl" | head -1)" ] ||
  fail "the same weights scored differently with and without a tokenizer"
expect_error "no tokenizer.json.*a chat row" "$BIN" eval "$T/weights-only" --data "$T/eval.jsonl"

# Graded generation needs a tokenizer: refused before anything runs (and by --dry-run), not after
# training.
expect_error "no tokenizer.json.*eval.tasks" "$BIN" train --defaults model.path="$T/weights-only" \
  data.train="$T/ids.jsonl" data.seq_len=8 train.batch_size=1 eval.tasks=reasoning_language --output-dir "$T/bad9" --dry-run
expect_error "no tokenizer.json.*eval.tasks" "$BIN" train --defaults model.path="$T/weights-only" \
  data.train="$T/ids.jsonl" data.seq_len=8 train.batch_size=1 eval.tasks=reasoning_language --output-dir "$T/bad9"
[ ! -e "$T/bad9" ] || fail "a run refused for its missing tokenizer left a folder"
expect_error "takes no value" "$BIN" train --defaults --dry-run=false

# eval scores what a quantized run saved: a PTQ run's model is the fake-quantized one (its loss on
# the validation rows is the run's own logged val_loss), and --bf16 its BF16 weights.
python3 - "$T/val.jsonl" <<'PY'
import random, sys
random.seed(7)
with open(sys.argv[1], "w") as f:
    for _ in range(12):
        f.write('{"input_ids": [%s]}\n' % ", ".join(str(random.randrange(32, 127)) for _ in range(65)))
PY
"$BIN" train --defaults model.path=builtin:tiny recipe.name=ptq quant.format=nvfp4 data.train=builtin:sft \
  data.seq_len=64 data.pack=false data.validation="$T/val.jsonl" train.batch_size=4 train.eval_batches=4 \
  model.compute_dtype=fp32 quant.calib_batches=1 train.threads=1 --output-dir "$T/ptq" > /dev/null 2>&1 ||
  fail "ptq run exited $?"
"$BIN" eval "$T/ptq/model" --data "$T/val.jsonl" > "$T/q.out" || fail "eval of the PTQ model exited $?"
"$BIN" eval "$T/ptq/model" --data "$T/val.jsonl" --bf16 > "$T/b.out" || fail "eval --bf16 exited $?"
grep -q "scored: the fake-quantized model, NVFP4 W4A4" "$T/q.out" || fail "eval does not say it scored the quantized model: $(cat "$T/q.out")"
grep -q "scored: the BF16 weights" "$T/b.out" || fail "eval --bf16: $(cat "$T/b.out")"
python3 - "$T/q.out" "$T/b.out" "$("$BIN" inspect "$T/ptq" --csv eval | tail -1)" <<'PY'
import re, sys
loss = lambda path: float(re.search(r"cross-entropy ([0-9.]+)", open(path).read()).group(1))
quantized, bf16 = loss(sys.argv[1]), loss(sys.argv[2])
logged = float(sys.argv[3].split(",")[3])  # step, tokens, wall_s, val_loss, ...
assert abs(quantized - logged) < 1e-4 * logged, (quantized, logged)
assert abs(bf16 - quantized) > 1e-3, (bf16, quantized)
print(f"PTQ model: eval {quantized:.6f} = logged val_loss {logged:.6f}; BF16 weights {bf16:.6f}")
PY
# eval --run: the run's own evaluation again, bit for bit (a PTQ, QAT or QAD model/ is the model
# it evaluated), in fp32 on unpacked rows and under BF16 autocast on packed sequences.
"$BIN" train --defaults model.path=builtin:tiny recipe.name=ptq quant.format=mxfp4 data.train=builtin:sft \
  data.seq_len=64 train.batch_size=4 train.eval_batches=2 quant.calib_batches=1 train.threads=1 \
  --output-dir "$T/ptq-bf16" > /dev/null 2>&1 || fail "the BF16 PTQ run exited $?"
for recipe in qat qad; do
  "$BIN" train --defaults model.path=builtin:tiny recipe.name=$recipe quant.format=nvfp4 \
    data.train=builtin:sft data.seq_len=64 train.batch_size=4 train.max_steps=2 train.eval_every=2 \
    train.eval_batches=2 train.threads=1 --output-dir "$T/$recipe-short" > /dev/null 2>&1 ||
    fail "the short $recipe run exited $?"
done
for run in ptq ptq-bf16 qat-short qad-short; do
  got=$("$BIN" eval --run "$T/$run" | head -1) || fail "eval --run $run exited $?"
  want=$("$BIN" inspect "$T/$run" --csv eval | tail -1 | cut -d, -f4)
  python3 -c 'import sys; g, w = float(sys.argv[1].split()[1]), float(sys.argv[2]); assert g == w, (g, w); print(f"eval --run {sys.argv[3]}: {g!r} = logged val_loss {w!r}")' \
    "$got" "$want" "$run" || fail "eval --run $run: '$got', logged val_loss $want"
done
expect_error "not a run folder: no run.yaml" "$BIN" eval --run "$T/ptq/model"
expect_error "takes at most a MODEL_DIR" "$BIN" eval --run "$T/ptq" --data "$T/val.jsonl"
# A run from the PTQ model: SFT is refused (also by --dry-run), QAD with the same quantization
# adopts its quantizers and distils from the BF16 weights of the model it started from.
expect_error "recipe sft trains BF16" "$BIN" train --defaults recipe.name=sft model.path="$T/ptq/model" --dry-run
expect_error "holds a fake-quantized model (NVFP4" "$BIN" train --defaults recipe.name=qat quant.format=mxfp4 \
  model.path="$T/ptq/model" --dry-run
"$BIN" train --defaults recipe.name=qad quant.format=nvfp4 model.path="$T/ptq/model" data.seq_len=64 \
  train.batch_size=2 train.max_steps=2 train.eval_batches=1 data.validation_max=4 train.threads=1 \
  --output-dir "$T/qad-from-ptq" > /dev/null 2>&1 || fail "QAD from the PTQ model exited $?"
"$BIN" inspect "$T/qad-from-ptq" | grep -q "frozen_model $T/ptq/model (BF16" ||
  fail "the QAD teacher is not the BF16 model: $("$BIN" inspect "$T/qad-from-ptq" | grep frozen_model)"
echo "cli train/inspect/eval/generate: all checks passed"
