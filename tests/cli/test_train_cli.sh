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
assert sum(k == "eval" for k in kinds) == 2 and sum(k == "checkpoint" for k in kinds) == 2, kinds
PY
for f in run.yaml log.h5 status.json model/config.json checkpoints/step-8/trainer_state.json; do
  [ -e "$T/run/$f" ] || fail "missing $f in the run folder"
done
grep -q '"state": "finished"' "$T/run/status.json" || fail "status is not finished"
"$BIN" inspect "$T/run" > "$T/inspect.txt"
grep -q "finished" "$T/inspect.txt" && grep -q "val_loss" "$T/inspect.txt" || fail "inspect: $(cat "$T/inspect.txt")"

# eval: chat rows and pre-tokenized rows, per example.
printf '%s\n' '{"messages": [{"role": "user", "content": "What is 2 plus 2?"}, {"role": "assistant", "content": "Reasoning: two plus two is four. Answer: 4"}]}' \
  '{"input_ids": [65, 66, 67, 68, 69]}' > "$T/eval.jsonl"
"$BIN" eval "$T/run/model" --data "$T/eval.jsonl" --per-example > "$T/eval.out" 2> "$T/eval.err"
[ "$(wc -l < "$T/eval.out")" -eq 2 ] || fail "eval --per-example: $(cat "$T/eval.out")"
grep -q "mean token cross-entropy" "$T/eval.err" || fail "eval summary missing"
out=$("$BIN" generate "$T/run/model" --prompt "What is 2 plus 2?" --max-new-tokens 16)
[ -n "$out" ] || fail "generate printed nothing"
[ "$("$BIN" generate "$T/run/model" --prompt hi --temperature 0.8 --seed 3 --max-new-tokens 12)" = \
  "$("$BIN" generate "$T/run/model" --prompt hi --temperature 0.8 --seed 3 --max-new-tokens 12)" ] ||
  fail "seeded sampling is not reproducible"

# SIGTERM: checkpoint, close the log, exit 130; then resume to the end.
"$BIN" train --config "$T/run.yaml" "${COMMON[@]}" train.max_steps=400 --output-dir "$T/stop" --events jsonl \
  > "$T/stop.jsonl" &
pid=$!
for _ in $(seq 1 300); do grep -q '"step":3,' "$T/stop.jsonl" 2>/dev/null && break; sleep 0.1; done
kill -TERM $pid
set +e; wait $pid; rc=$?; set -e
[ $rc -eq 130 ] || fail "SIGTERM exit code $rc, expected 130"
grep -q '"event":"cancelled"' "$T/stop.jsonl" || fail "no cancelled event"
grep -q '"state": "cancelled"' "$T/stop/status.json" || fail "status not cancelled"
ls "$T/stop/checkpoints" | grep -q "step-" || fail "no checkpoint after SIGTERM"
"$BIN" train --config "$T/run.yaml" "${COMMON[@]}" train.max_steps=12 --output-dir "$T/stop" \
  --resume-from-checkpoint latest --events jsonl > "$T/resume.jsonl" || fail "resume exited $?"
tail -1 "$T/resume.jsonl" | grep -q '"event":"finished"' || fail "resume did not finish"

# Bad input: exit 2, a message naming the problem, nothing written.
expect_error() {
  local pattern=$1; shift
  set +e; "$@" > "$T/o.txt" 2> "$T/e.txt"; local rc=$?; set -e
  [ $rc -eq 2 ] || fail "expected exit 2 from '$*', got $rc: $(cat "$T/e.txt")"
  grep -qi -- "$pattern" "$T/e.txt" || fail "expected '$pattern' in: $(cat "$T/e.txt")"
}
expect_error "did you mean 'optim.lr'" "$BIN" train optim.lrr=1 --output-dir "$T/bad1"
expect_error "must be a integer" "$BIN" train train.max_steps=ten --output-dir "$T/bad2"
expect_error "already holds a run" "$BIN" train "${COMMON[@]}" --output-dir "$T/run"
expect_error "does not exist" "$BIN" train model.path=/nonexistent --output-dir "$T/bad3"
printf '{"messages": [{"role": "user"}]}\n' > "$T/bad.jsonl"
expect_error "bad.jsonl:1" "$BIN" train "${COMMON[@]}" data.train="$T/bad.jsonl" --output-dir "$T/bad4"
expect_error "no checkpoint" "$BIN" train "${COMMON[@]}" --output-dir "$T/none" --resume-from-checkpoint latest
for d in bad1 bad2 bad3 bad4; do [ ! -e "$T/$d" ] || fail "a failed start left $d behind"; done
echo "cli train/inspect/eval/generate: all checks passed"
