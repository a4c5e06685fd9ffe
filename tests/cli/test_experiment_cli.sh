#!/usr/bin/env bash
# End-to-end test of `fp4lab experiment --quick`: every stage's run folder (its model, and no
# checkpoint left once finished), the report (markdown and CSV) with one row per run and its goals,
# reuse of finished runs on a second invocation, and bad input (exit 2, nothing written).
set -euo pipefail
BIN=${FP4LAB_BIN:?set FP4LAB_BIN to the fp4lab executable}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
RUNS="sft base ptq-mxfp4 qat-mxfp4 qad-mxfp4 ptq-nvfp4 qat-nvfp4 qad-nvfp4 qat-from-base-mxfp4"

start=$(date +%s)
"$BIN" experiment --quick threads=1 --output-dir "$T/exp" > "$T/stdout.md" 2> "$T/stderr.txt" ||
  { cat "$T/stderr.txt" >&2; fail "experiment exited $?"; }
echo "quick experiment: $(( $(date +%s) - start )) s"
for r in $RUNS; do
  [ -f "$T/exp/$r/log.h5" ] || fail "no log for run $r"
  grep -q '"state": "finished"' "$T/exp/$r/status.json" || fail "run $r did not finish"
  [ -f "$T/exp/$r/tasks/step-$(python3 -c "import json;print(json.load(open('$T/exp/$r/status.json'))['step'])").jsonl" ] ||
    fail "run $r has no graded answers"
  # A finished run's result is its model/: its checkpoint (train.keep_checkpoints=0) is gone.
  [ -f "$T/exp/$r/model/config.json" ] || fail "run $r has no model/"
  [ ! -e "$T/exp/$r/checkpoints" ] || fail "finished run $r kept $(ls "$T/exp/$r/checkpoints")"
done
[ -f "$T/exp/qat-nvfp4/model/quant_state.json" ] || fail "no quantizer state in the QAT model"
cmp -s "$T/stdout.md" <(cat "$T/exp/report.md"; echo) || fail "stdout differs from report.md"

python3 - "$T/exp/report.csv" "$RUNS" <<'PY'
import csv, math, sys
rows = list(csv.DictReader(open(sys.argv[1])))
names = [r["run"] for r in rows]
assert sorted(names) == sorted(sys.argv[2].split()), names
by = {r["run"]: r for r in rows}
for r in rows:
    assert 0 < float(r["val_loss"]) < 10, r
    for t in ("reasoning_language", "false_refusal"):
        v = float(r["pass_rate_" + t])
        assert 0 <= v <= 1, r
assert by["sft"]["val_kl_to_sft"] == "n/a"
for n in ("ptq-nvfp4", "qat-nvfp4", "qad-nvfp4", "base"):
    assert float(by[n]["val_kl_to_sft"]) > 0, by[n]
assert float(by["ptq-mxfp4"]["gap_recovered"]) == 0
assert by["qat-from-base-mxfp4"]["gap_recovered"] == "n/a"
# Gap recovered is (PTQ - X) / (PTQ - SFT) on validation loss.
sft, ptq, qad = (float(by[n]["val_loss"]) for n in ("sft", "ptq-nvfp4", "qad-nvfp4"))
assert math.isclose(float(by["qad-nvfp4"]["gap_recovered"]), (ptq - qad) / (ptq - sft), rel_tol=1e-3, abs_tol=1e-3)
assert int(by["qat-nvfp4"]["steps"]) == 15 and int(by["ptq-nvfp4"]["steps"]) == 0
assert int(by["qat-from-base-mxfp4"]["steps"]) == 75  # the SFT + QAT budget
PY
grep -q "## Goals" "$T/exp/report.md" || fail "no goals in the report"
grep -q "QAD nvfp4 recovers" "$T/exp/report.md" || fail "no QAD goal in the report"

# Built with the Qt widgets, the report links its PNG plots (1200x700, drawn with no display);
# a headless build writes none.
PLOTS="training_loss val_loss val_loss_recovery val_kl layer_error_ptq"
check_plots() {
  if [ "${FP4LAB_WITH_PLOTS:-0}" = 1 ]; then
    grep -q "^## Plots" "$T/exp/report.md" || fail "no plots section in the report"
    for p in $PLOTS; do
      grep -q "](report/$p.png)" "$T/exp/report.md" || fail "report.md does not link $p.png"
      python3 -c "import struct,sys; d=open(sys.argv[1],'rb').read(24); \
        assert d[:8]==b'\x89PNG\r\n\x1a\n' and struct.unpack('>II', d[16:24])==(1200,700)" \
        "$T/exp/report/$p.png" || fail "report/$p.png is not a 1200x700 PNG"
    done
    [ "$(ls "$T/exp/report" | sort | tr '\n' ' ')" = "$(printf '%s.png\n' $PLOTS | sort | tr '\n' ' ')" ] ||
      fail "unexpected files in report/: $(ls "$T/exp/report")"
  else
    [ ! -e "$T/exp/report" ] || fail "a build without the widgets wrote plots"
    ! grep -q "^## Plots" "$T/exp/report.md" || fail "a build without the widgets links plots"
  fi
}
check_plots

# A second invocation reuses every finished run.
"$BIN" experiment --quick threads=1 --output-dir "$T/exp" > /dev/null 2>&1 || fail "rerun failed"
[ "$(grep -c '(reused)' "$T/exp/report.md")" = 9 ] || fail "finished runs were not reused"
grep -q "total time [0-9]* s (9 of 9 runs reused from an earlier invocation; the runs' own times add up to [1-9]" \
  "$T/exp/report.md" || fail "the report's total time does not say the runs were reused"

# repeats=2 reuses those nine runs and adds PTQ, QAT and QAD at a second run seed, graded on the
# same task items; each gap is against its own seed's PTQ, and the report summarises the seeds.
"$BIN" experiment --quick threads=1 repeats=2 --output-dir "$T/exp" > /dev/null 2>&1 || fail "repeats=2 failed"
[ "$(grep -c '(reused)' "$T/exp/report.md")" = 9 ] || fail "repeats=2 did not reuse the nine runs"
grep -q "## Across seeds" "$T/exp/report.md" || fail "no summary across seeds"
grep -q "(mean of 2 seeds)" "$T/exp/report.md" || fail "the goals do not read the means"
check_plots
# Plots that cannot be drawn (report/ is a file) fail the command, but report.md keeps its tables.
if [ "${FP4LAB_WITH_PLOTS:-0}" = 1 ]; then
  mv "$T/exp/report" "$T/report.saved" && touch "$T/exp/report"
  set +e
  "$BIN" experiment --quick threads=1 repeats=2 --output-dir "$T/exp" > /dev/null 2> "$T/stderr.txt"
  status=$?
  set -e
  [ $status = 2 ] || fail "unwritable plots: exit $status, expected 2"
  grep -q "## Goals" "$T/exp/report.md" && grep -q "(mean of 2 seeds)" "$T/exp/report.md" ||
    fail "unwritable plots: report.md lost its tables"
  ! grep -q "^## Plots" "$T/exp/report.md" || fail "unwritable plots: report.md links plots"
  rm "$T/exp/report" && mv "$T/report.saved" "$T/exp/report"
fi
for f in mxfp4 nvfp4; do
  cmp -s <(grep -o '"prompt":"[^"]*"' "$T/exp/ptq-$f/tasks/step-0.jsonl") \
    <(grep -o '"prompt":"[^"]*"' "$T/exp/ptq-$f-seed1235/tasks/step-0.jsonl") ||
    fail "the second seed graded other task items ($f)"
done
python3 - "$T/exp/report.csv" <<'PY'
import csv, math, sys
by = {r["run"]: r for r in csv.DictReader(open(sys.argv[1]))}
assert len(by) == 15, sorted(by)
for f in ("mxfp4", "nvfp4"):
    for rec in ("ptq", "qat", "qad"):
        assert by[f"{rec}-{f}"]["seed"] == "1234" and by[f"{rec}-{f}-seed1235"]["seed"] == "1235"
sft, ptq, qad = (float(by[n]["val_loss"]) for n in ("sft", "ptq-nvfp4-seed1235", "qad-nvfp4-seed1235"))
assert math.isclose(float(by["qad-nvfp4-seed1235"]["gap_recovered"]), (ptq - qad) / (ptq - sft), rel_tol=1e-3, abs_tol=1e-3)
PY

# A finished run is reused only if it ran what would run now: a changed key stops the experiment
# before anything runs (exit 2, naming the runs and the key, experiment.yaml untouched);
# --dry-run says what would happen; --rerun-changed moves those runs aside and runs them again.
cp "$T/exp/experiment.yaml" "$T/experiment.yaml.before"
set +e
"$BIN" experiment --quick threads=1 repeats=2 qat_steps=16 --output-dir "$T/exp" > /dev/null 2> "$T/err.txt"; code=$?
set -e
[ $code = 2 ] || fail "a changed qat_steps exited $code"
grep -q "5 finished runs ran another configuration" "$T/err.txt" || fail "changed runs: $(cat "$T/err.txt")"
grep -q "qat-nvfp4: train.max_steps (ran 15, now 16)" "$T/err.txt" || fail "the key is not named: $(cat "$T/err.txt")"
grep -q "qat-from-base-mxfp4: train.max_steps (ran 75, now 76)" "$T/err.txt" || fail "qat-from-base: $(cat "$T/err.txt")"
cmp -s "$T/exp/experiment.yaml" "$T/experiment.yaml.before" || fail "a refused experiment rewrote experiment.yaml"
"$BIN" experiment --quick threads=1 repeats=2 qat_steps=16 --output-dir "$T/exp" --dry-run > "$T/plan.txt"
[ "$(grep -c ' changed ' "$T/plan.txt")" = 5 ] && [ "$(grep -c ' reuse ' "$T/plan.txt")" = 10 ] ||
  fail "dry run: $(cat "$T/plan.txt")"
# The same folder spelled another way is the same experiment.
"$BIN" experiment --quick threads=1 repeats=2 --output-dir "$T/./exp/" --dry-run > "$T/plan2.txt"
[ "$(grep -c ' reuse ' "$T/plan2.txt")" = 15 ] || fail "another spelling of the folder: $(cat "$T/plan2.txt")"
"$BIN" experiment --quick threads=1 repeats=2 qat_steps=16 --output-dir "$T/exp" --rerun-changed > /dev/null 2>&1 ||
  fail "--rerun-changed failed"
[ "$(ls "$T/exp/replaced" | wc -l)" = 5 ] || fail "replaced/: $(ls "$T/exp/replaced")"
[ "$(grep -c '(reused)' "$T/exp/report.md")" = 10 ] || fail "--rerun-changed did not reuse the other runs"
grep -q "QAT nvfp4 KL to SFT >= 10x QAD's (UNEQUAL steps)" "$T/exp/report.md" ||
  fail "the steps label does not read the runs' own configs"
python3 - "$T/exp/report.csv" <<'PY'
import csv, sys
by = {r["run"]: r for r in csv.DictReader(open(sys.argv[1]))}
assert by["qat-nvfp4"]["steps"] == "16" and by["qad-nvfp4"]["steps"] == "15", by["qat-nvfp4"]
PY

# Bad input: exit 2 with a message, nothing written.
set +e
"$BIN" experiment --quick qat_stepz=3 --output-dir "$T/bad" 2> "$T/err.txt"; code=$?
set -e
[ $code = 2 ] || fail "unknown key exited $code"
grep -q "unknown experiment key 'qat_stepz'" "$T/err.txt" || fail "no message for an unknown key"
grep -q "did you mean 'qat_steps'" "$T/err.txt" || fail "no hint for an unknown key: $(cat "$T/err.txt")"
for bad in "sft_steps=[" "qat_steps=-5" "formats=fp8" "repeats=0" "activations=maybe"; do
  set +e
  "$BIN" experiment --quick "$bad" --output-dir "$T/bad" 2> "$T/err.txt"; code=$?
  set -e
  [ $code = 2 ] || fail "'$bad' exited $code: $(cat "$T/err.txt")"
  key=${bad%%=*}
  grep -q "'$key'" "$T/err.txt" || fail "'$bad' does not name the experiment key: $(cat "$T/err.txt")"
  ! grep -q "train\.\|optim\.\|internal" "$T/err.txt" || fail "'$bad' leaks run-config keys: $(cat "$T/err.txt")"
done
printf 'qat_steps: 20\nsft_lr: fast\n' > "$T/bad.yaml"
set +e; "$BIN" experiment --quick --config "$T/bad.yaml" --output-dir "$T/bad" 2> "$T/err.txt"; code=$?; set -e
[ $code = 2 ] && grep -q "bad.yaml:2: 'sft_lr' must be a number, not 'fast'" "$T/err.txt" ||
  fail "a bad value in the experiment file: $(cat "$T/err.txt")"
[ ! -e "$T/bad" ] || fail "a folder was written for bad input"
echo "ok"
