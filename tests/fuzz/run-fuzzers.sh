#!/usr/bin/env bash
# Builds the libFuzzer targets (preset `fuzz`: clang, ASan, UBSan) and runs each one for SECONDS
# (default 120) from a small seed corpus. A finding (a crash, a sanitizer report, or a kernel
# result that differs from the reference) stops that fuzzer, leaves the input that caused it in
# build/fuzz/findings/ and makes this script fail; replay it with `<fuzzer> <file>`.
#
# Usage: bash tests/fuzz/run-fuzzers.sh [SECONDS]
# Needs clang and its libFuzzer runtime (Debian: apt-get install clang libclang-rt-14-dev); not
# part of the README's test command.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_EACH=${1:-120}
BUILD=build/fuzz

probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' \
  > "$probe/probe.cpp"
if ! clang++ -fsanitize=fuzzer "$probe/probe.cpp" -o "$probe/probe" 2> "$probe/err"; then
  echo "run-fuzzers: clang++ with libFuzzer is needed and did not work here:" >&2
  sed 's/^/  /' "$probe/err" >&2
  echo "  On Debian 12: apt-get install clang libclang-rt-14-dev" >&2
  exit 2
fi

cmake --preset fuzz > /dev/null
cmake --build --preset fuzz

mkdir -p "$BUILD/corpus/kernels" "$BUILD/corpus/safetensors" "$BUILD/corpus/data" "$BUILD/findings"
# Seeds: valid files of every dtype the reader converts, random kernel headers, and for the data
# layer (first byte: 0 text, 1 JSONL, 2 tokenizer.json) the test fixtures.
python3 - "$BUILD/corpus" <<'PY'
import os, random, struct, sys
sys.path.insert(0, "tests/cli")
import safetensors_util as st
out = sys.argv[1]
st.write(os.path.join(out, "safetensors", "f32"), {"w": ("F32", [2, 2], struct.pack("<4f", 1, -2, 3e-40, 3e38))})
st.write(os.path.join(out, "safetensors", "halves"), {"b": ("BF16", [3], st.bf16_bytes([1.0, -0.5, 7.0])),
                                                     "h": ("F16", [2], b"\x00\x3c\x00\xbc")})
st.write(os.path.join(out, "safetensors", "fp8-ints"), {"e": ("F8_E4M3", [4], bytes([1, 2, 0x7f, 0x80])),
                                                       "s": ("F8_E5M2", [2], b"\x3c\x7c"),
                                                       "x": ("F8_E8M0", [2], b"\x7f\xff"),
                                                       "u": ("U8", [2, 2], bytes(4)),
                                                       "i": ("I64", [1], struct.pack("<q", -5)),
                                                       "d": ("F64", [1], struct.pack("<d", 1.5)),
                                                       "z": ("I32", [0], b"")})
st.write(os.path.join(out, "safetensors", "empty"), {})
fixtures = "tests/engine/data/data"
seeds = {"text": b"\x00Hello, world! \xe4\xbd\xa0\xe5\xa5\xbd <|im_end|>\n\n  hel",
         "rows": b'\x01{"input_ids": [1, 2, 3]}\n{"prompt": "a", "completion": "b", "system": "s"}\n'}
for name in ("chat.jsonl", "bad_role.jsonl"):
    seeds[name] = b"\x01" + open(os.path.join(fixtures, name), "rb").read()
for name in ("bpe_gpt2.json", "bpe_split.json"):
    seeds[name] = b"\x02" + open(os.path.join(fixtures, name), "rb").read()
for name, body in seeds.items():
    with open(os.path.join(out, "data", name), "wb") as f:
        f.write(body)
rng = random.Random(1)
for i in range(16):
    body = bytes(rng.randrange(256) for _ in range(16 + 4 * rng.randrange(0, 64)))
    with open(os.path.join(out, "kernels", "seed%02d" % i), "wb") as f:
        f.write(body)
PY

status=0
for target in fuzz_kernels fuzz_safetensors fuzz_data; do
  corpus=$BUILD/corpus/${target#fuzz_}
  maxlen=4096
  [ $target = fuzz_data ] && maxlen=16384  # the tokenizer.json seeds are 5.4 KB
  echo "== $target, $SECONDS_EACH s"
  if ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$BUILD/tests/fuzz/$target" -max_total_time="$SECONDS_EACH" -max_len=$maxlen \
      -print_final_stats=1 -artifact_prefix="$BUILD/findings/$target-" "$corpus" \
      > "$BUILD/$target.log" 2>&1; then
    grep -E "^Done|stat::number_of_executed_units" "$BUILD/$target.log" | head -2
  else
    status=1
    echo "!! $target found a problem; the input is in $BUILD/findings/:" >&2
    grep -E "ERROR|runtime error|fuzz_kernels:|fuzz_data:|SUMMARY" "$BUILD/$target.log" | head -5 >&2
  fi
done
exit $status
