#!/usr/bin/env bash
# End-to-end test of `fp4lab quantize` / `fp4lab dequantize`: layouts checked by an independent
# Python decoder, round trip, and the error paths (exit code 2, message, good files untouched).
set -euo pipefail
BIN=${FP4LAB_BIN:?set FP4LAB_BIN to the fp4lab executable}
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
PY=python3
fail() { echo "FAIL: $*" >&2; exit 1; }

$PY "$HERE/safetensors_util.py" make "$T/in.safetensors" 7

for fmt in nvfp4 mxfp4; do
  extra=()
  [ "$fmt" = mxfp4 ] && extra=(--scale-rule floor)
  "$BIN" quantize "$T/in.safetensors" "$T/q-$fmt.safetensors" --format $fmt "${extra[@]}" > "$T/table-$fmt.txt" ||
    fail "quantize $fmt exited $?"
  grep -q "model.w" "$T/table-$fmt.txt" || fail "no row for model.w in the $fmt table"
  grep -q "model.odd.*not a multiple" "$T/table-$fmt.txt" || fail "model.odd not listed as copied"
  "$BIN" dequantize "$T/q-$fmt.safetensors" "$T/back-$fmt.safetensors" > /dev/null || fail "dequantize $fmt"
  $PY - "$T" "$fmt" "$HERE" <<'PYEOF'
import math, struct, sys
sys.path.insert(0, sys.argv[3])
import safetensors_util as st
T, fmt = sys.argv[1], sys.argv[2]
_, src = st.read(f"{T}/in.safetensors")
meta, q = st.read(f"{T}/q-{fmt}.safetensors")
_, back = st.read(f"{T}/back-{fmt}.safetensors")
assert meta.get("format") == "pt" and meta.get("fp4lab.format") == fmt, meta
block = 32 if fmt == "mxfp4" else 16
expect = {"model.w": ("U8", [64, 64]), "model.w.scales": ("U8", [64, 128 // block]),
          "model.w.dequant": ("F32", [64, 128]), "model.b": ("U8", [3, 16]),
          "model.odd": ("F32", [5, 10]), "model.ids": ("I64", [4]), "model.scalar": ("F32", [])}
for name, (dtype, shape) in expect.items():
    assert q[name][0] == dtype and q[name][1] == shape, (name, q[name][:2])
assert ("model.w.global_scale" in q) == (fmt == "nvfp4")
for name in ("model.odd", "model.ids", "model.scalar"):
    assert q[name][2] == src[name][2], name + " was not copied byte for byte"
# Decode the packed codes independently and compare with fp4lab's .dequant, bit for bit.
g = st.floats(q["model.w.global_scale"][2])[0] if fmt == "nvfp4" else 1.0
if fmt == "nvfp4":
    amax = max(abs(v) for v in st.floats(src["model.w"][2]))
    assert g == struct.unpack("<f", struct.pack("<f", amax / 2688))[0], (g, amax)
mine = st.decode(q["model.w"][2], q["model.w.scales"][2], 128, fmt, g)
theirs = st.floats(q["model.w.dequant"][2])
assert [struct.pack("<f", v) for v in mine] == [struct.pack("<f", v) for v in theirs], "decode mismatch"
assert back["model.w"][2] == q["model.w.dequant"][2], "dequantize differs from .dequant"
x = st.floats(src["model.w"][2])
err = sum((a - b) ** 2 for a, b in zip(x, theirs)) / sum(a * a for a in x)
assert math.sqrt(err) < 0.2, f"relative L2 {math.sqrt(err)}"
assert back["model.odd"][2] == src["model.odd"][2]
print(f"{fmt}: layout, independent decode and round trip ok (rel L2 {math.sqrt(err):.4f})")
PYEOF
done

"$BIN" quantize "$T/in.safetensors" "$T/q-2d.safetensors" --format nvfp4 --2d > /dev/null || fail "--2d"

# Error paths: exit code 2, a message that names the problem, nothing good overwritten.
expect_error() {
  local pattern=$1; shift
  set +e
  "$@" > "$T/out.txt" 2> "$T/err.txt"
  local rc=$?
  set -e
  [ $rc -eq 2 ] || fail "expected exit 2 from '$*', got $rc"
  grep -qi -- "$pattern" "$T/err.txt" || fail "expected '$pattern' in: $(cat "$T/err.txt")"
}
cp "$T/q-nvfp4.safetensors" "$T/keep.safetensors"
expect_error "exists" "$BIN" quantize "$T/in.safetensors" "$T/keep.safetensors"
expect_error "is the input" "$BIN" quantize "$T/in.safetensors" "$T/in.safetensors" --force
expect_error "unknown option" "$BIN" quantize "$T/in.safetensors" "$T/x.safetensors" --bogus
expect_error "must be one of" "$BIN" quantize "$T/in.safetensors" "$T/x.safetensors" --format int4
expect_error "MXFP4 only" "$BIN" quantize "$T/in.safetensors" "$T/x.safetensors" --scale-rule floor
expect_error "does not exist" "$BIN" quantize "$T/missing.safetensors" "$T/x.safetensors"
head -c 100 "$T/in.safetensors" > "$T/truncated.safetensors"
expect_error "truncated.safetensors" "$BIN" quantize "$T/truncated.safetensors" "$T/keep.safetensors" --force
expect_error "already" "$BIN" quantize "$T/q-nvfp4.safetensors" "$T/x.safetensors"
expect_error "fp4lab.format" "$BIN" dequantize "$T/in.safetensors" "$T/x.safetensors"
cmp -s "$T/keep.safetensors" "$T/q-nvfp4.safetensors" || fail "a failed run changed an existing file"
[ ! -e "$T/x.safetensors" ] || fail "a failed run left an output file"
ls "$T" | grep -q tmp && fail "temporary files left behind: $(ls "$T")"
echo "cli quantize/dequantize: all checks passed"
