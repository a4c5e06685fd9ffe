#!/usr/bin/env bash
# The GPU checks' training part (run-gpu-checks.sh runs it): SFT, QAT and QAD of the built-in model, a few steps each,
# on train.device=cuda and train.device=cpu from the same seed, in fp32 and in BF16 autocast; then
# a run checkpointed on the GPU resumed on the CPU. Needs the engine that tests/gpu/bundle-engine.sh
# builds on the build machine (.gpu-deps/fp4lab, carried here), and this machine's CUDA torch wheel
# for LibTorch itself.
# Tolerances, on every step's training loss relative to the CPU run's: fp32 5e-3 (CUDA's and the
# CPU's fp32 GEMMs sum in other orders, about 1e-6 apart per product; eight AdamW steps and, in QAT
# and QAD, the odd FP4 rounding flip that this moves, grow it); BF16 autocast 5e-2 (each product is
# rounded to BF16's 8 bits, 4e-3 apart, by GEMMs that accumulate differently).
#
# Usage: bash tests/gpu/train-checks.sh [WORK_DIR]
# DEVICE=cpu runs the "GPU" side on the CPU too, to check this script itself on a machine without
# a GPU (every difference is then 0); FP4LAB_BUNDLE names another engine folder than .gpu-deps/fp4lab.
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DEVICE=${DEVICE:-cuda}
FAILED=()
note_failure() { FAILED+=("$1"); echo "!!!! FAILED: $1"; }

BUNDLE=${FP4LAB_BUNDLE:-$ROOT/.gpu-deps/fp4lab}
T=${1:-/tmp/fp4lab-gpu/train}
if [ ! -x "$BUNDLE/bin/fp4lab" ]; then
  echo "no $BUNDLE/bin/fp4lab: run tests/gpu/bundle-engine.sh on the build machine and carry .gpu-deps"
  exit 1
fi
if ! TORCH_LIB=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))' 2> /dev/null); then
  echo "python3 has no torch here: LibTorch comes from its wheel"
  exit 1
fi
echo "this machine: torch $(python3 -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)'), $(ldd --version | head -1)"
if [ -f "$BUNDLE/torch-version" ]; then
  echo "the bundle: built against torch $(cat "$BUNDLE/torch-version"), needs $(cat "$BUNDLE/glibc-needed")"
  # LibTorch's C++ ABI changes between releases: the bundle's version and this machine's must be
  # one release (the CUDA minor may differ; the driver must support the bundle's CUDA).
  here=$(python3 -c 'import torch; print(torch.__version__.split("+")[0])')
  built=$(cut -d' ' -f1 "$BUNDLE/torch-version" | cut -d+ -f1)
  [ "$here" = "$built" ] || echo "WARNING: torch $here here, the bundle was built against $built: expect undefined symbols"
fi
FP4=$BUNDLE/bin/fp4lab
rm -rf "$T"
mkdir -p "$T"
export LD_LIBRARY_PATH=$BUNDLE/lib:$TORCH_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export FP4LAB_RESOURCES=$ROOT/resources
# This machine's libstdc++ first; the bundled one (Debian 12's, glibc >= 2.36) if that is too old.
if ! "$FP4" train --list-keys > /dev/null 2> "$T/start.err"; then
  cat "$T/start.err"
  echo "retrying with the bundled libstdc++ (lib-gcc)"
  export LD_LIBRARY_PATH=$BUNDLE/lib-gcc:$LD_LIBRARY_PATH
  "$FP4" train --list-keys > /dev/null || { echo "the bundled fp4lab does not start"; exit 1; }
fi
COMMON=(model.path=builtin:tiny data.train=builtin:sft data.seq_len=128 train.batch_size=16
        train.max_steps=8 train.eval_every=4 train.eval_batches=2 data.validation_max=32
        optim.lr=1e-3 train.checkpoint_every=4 run.seed=7)
for v in "sft none" "qat nvfp4" "qat mxfp4" "qad nvfp4"; do
  read -r recipe format <<< "$v"
  for dtype in fp32 bf16; do
    for side in cpu gpu; do
      device=cpu
      [ $side = gpu ] && device=$DEVICE
      name=$recipe-$format-$dtype-$side
      timeout --signal=KILL 300 "$FP4" train --defaults "${COMMON[@]}" recipe.name=$recipe \
        quant.format=$format model.compute_dtype=$dtype train.device=$device \
        --output-dir "$T/$name" > "$T/$name.out" 2>&1 || { tail -5 "$T/$name.out"; note_failure "train $name"; }
    done
  done
done
# A GPU run's checkpoint resumed on the CPU: the same steps 5-8.
cp -r "$T/sft-none-fp32-gpu" "$T/resume-on-cpu"
timeout --signal=KILL 300 "$FP4" train --resume-from-checkpoint "$T/resume-on-cpu/checkpoints/step-4" \
  --output-dir "$T/resume-on-cpu" train.device=cpu > "$T/resume.out" 2>&1 ||
  { tail -5 "$T/resume.out"; note_failure "train resume on cpu"; }
python3 - "$FP4" "$T" <<'EOF_PY' || note_failure "train: GPU losses against the CPU's"
import os, re, subprocess, sys
fp4, root = sys.argv[1], sys.argv[2]
def losses(run):
    out = subprocess.run([fp4, "inspect", os.path.join(root, run), "--csv", "train"], capture_output=True, text=True, check=True).stdout
    rows = [r.split(",") for r in out.strip().splitlines()[1:]]
    return [float(r[3]) for r in rows], [float(r[6]) for r in rows]
def memory(run):
    out = subprocess.run([fp4, "inspect", os.path.join(root, run)], capture_output=True, text=True).stdout
    m = re.search(r"peak cuda:\d+ memory (\d+) MiB", out)
    return m.group(1) + " MiB" if m else "-"
failed = False
print("| recipe | format | compute | step-1 loss CPU | step-1 loss GPU | max rel. diff (8 steps) | tolerance | GPU tok/s | CPU tok/s | GPU peak memory | ok |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for v in ["sft-none", "qat-nvfp4", "qat-mxfp4", "qad-nvfp4"]:
    for dtype, tol in [("fp32", 5e-3), ("bf16", 5e-2)]:
        try:
            cpu, cpu_tps = losses(f"{v}-{dtype}-cpu")
            gpu, gpu_tps = losses(f"{v}-{dtype}-gpu")
        except Exception as e:
            print(f"| {v} | {dtype} | could not read: {e} |"); failed = True; continue
        diff = max(abs(a - b) / abs(a) for a, b in zip(cpu, gpu)) if cpu and len(cpu) == len(gpu) else float("inf")
        ok = diff <= tol
        failed |= not ok
        r, f = v.split("-")
        print(f"| {r} | {f} | {dtype} | {cpu[0]:.5f} | {gpu[0]:.5f} | {diff:.2e} | {tol:g} | {sorted(gpu_tps)[len(gpu_tps)//2]:.0f} | {sorted(cpu_tps)[len(cpu_tps)//2]:.0f} | {memory(v + '-' + dtype + '-gpu')} | {'yes' if ok else 'NO'} |")
gpu, _ = losses("sft-none-fp32-gpu")
resumed, _ = losses("resume-on-cpu")
diff = max(abs(a - b) / abs(a) for a, b in zip(gpu[4:], resumed[4:])) if len(resumed) == 8 else float("inf")
print(f"\nSFT fp32 checkpointed on the GPU at step 4, resumed on the CPU: steps 5-8 max rel. diff {diff:.2e} (tolerance 5e-3)")
failed |= not diff <= 5e-3
sys.exit(1 if failed else 0)
EOF_PY

[ ${#FAILED[@]} -eq 0 ] && echo "TRAIN CHECKS PASSED" || { printf 'FAILED: %s\n' "${FAILED[@]}"; exit 1; }
