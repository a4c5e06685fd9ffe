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
BUILD=${FP4LAB_FUZZ_BUILD:-build/fuzz}  # another folder: FP4LAB_FUZZ_BUILD=build/x

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

TARGETS="fuzz_kernels fuzz_safetensors fuzz_gguf fuzz_data"
cmake --preset fuzz -B "$BUILD" > /dev/null
cmake --build "$BUILD" --target $TARGETS

mkdir -p "$BUILD/corpus/kernels" "$BUILD/corpus/safetensors" "$BUILD/corpus/gguf" "$BUILD/corpus/data" \
  "$BUILD/findings"
# Seeds: valid files of every dtype the reader converts, random kernel headers, for the GGUF
# reader a tiny complete llama model and one tensor of every ggml type (written here with struct:
# no gguf package needed), and for the data layer (first byte: 0 text, 1 JSONL, 2 tokenizer.json)
# the test fixtures.
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

def gguf_file(path, kvs, tensors, alignment=32):
    """kvs: (key, type, value) with type 'u32', 'f32', 'str', 'bool', 'strs' or 'i32s';
    tensors: (name, ne, ggml type, bytes)."""
    def s(text):
        b = text.encode()
        return struct.pack("<Q", len(b)) + b
    def value(kind, v):
        if kind == "u32": return struct.pack("<II", 4, v)
        if kind == "f32": return struct.pack("<If", 6, v)
        if kind == "bool": return struct.pack("<IB", 7, v)
        if kind == "str": return struct.pack("<I", 8) + s(v)
        if kind == "strs": return struct.pack("<IIQ", 9, 8, len(v)) + b"".join(s(x) for x in v)
        if kind == "i32s": return struct.pack("<IIQ", 9, 5, len(v)) + struct.pack("<%di" % len(v), *v)
        raise ValueError(kind)
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    head += b"".join(s(k) + value(kind, v) for k, kind, v in kvs)
    data, offset = b"", 0
    for name, ne, ggml, body in tensors:
        head += s(name) + struct.pack("<I", len(ne)) + struct.pack("<%dQ" % len(ne), *ne)
        head += struct.pack("<IQ", ggml, offset)
        padded = body + bytes(-len(body) % alignment)
        data += padded
        offset += len(padded)
    head += bytes(-len(head) % alignment)
    with open(path, "wb") as f:
        f.write(head + data)

def blocks(count, nbytes, scale_at=(0,)):
    # Random quant bytes with small fp16 scales (0x2c00 = 1/16) where the block's scales are.
    body = bytearray(rng.randrange(256) for _ in range(count * nbytes))
    for b in range(count):
        for at in scale_at:
            body[b * nbytes + at:b * nbytes + at + 2] = b"\x00\x2c"
    return bytes(body)

# ggml type: (id, elements per block, bytes per block, fp16 scale offsets)
types = {"F32": (0, 1, 4, ()), "F16": (1, 1, 2, ()), "Q4_0": (2, 32, 18, (0,)),
         "Q4_1": (3, 32, 20, (0, 2)), "Q5_0": (6, 32, 22, (0,)), "Q5_1": (7, 32, 24, (0, 2)),
         "Q8_0": (8, 32, 34, (0,)), "Q2_K": (10, 256, 84, (80, 82)), "Q4_K": (12, 256, 144, (0, 2)),
         "Q5_K": (13, 256, 176, (0, 2)), "Q6_K": (14, 256, 210, (208,)), "BF16": (30, 1, 2, ()),
         "MXFP4": (39, 32, 17, ())}
gguf_file(os.path.join(out, "gguf", "all-types"), [("general.alignment", "u32", 64)],
          [(name, [256], t[0], struct.pack("<256f", *[i / 64 for i in range(256)]) if name == "F32"
            else blocks(256 // t[1], t[2], t[3])) for name, t in types.items()], alignment=64)
gguf_file(os.path.join(out, "gguf", "empty"), [], [])
hidden, heads, kv_heads, ffn, vocab = 32, 2, 1, 32, 4
def matrix(rows, cols, kind="Q4_0"):
    t = types[kind]
    return ([cols, rows], t[0], blocks(rows * cols // t[1], t[2], t[3]))
norm = ([hidden], 0, struct.pack("<%df" % hidden, *[1.0] * hidden))
layer = {"attn_norm": norm, "ffn_norm": norm, "attn_q": matrix(hidden, hidden),
         "attn_k": matrix(kv_heads * 16, hidden, "Q8_0"), "attn_v": matrix(kv_heads * 16, hidden, "Q4_1"),
         "attn_output": matrix(hidden, hidden, "Q5_0"), "ffn_gate": matrix(ffn, hidden, "Q5_1"),
         "ffn_up": matrix(ffn, hidden), "ffn_down": matrix(hidden, ffn)}
tensors = [("token_embd.weight",) + matrix(vocab, hidden), ("output_norm.weight",) + norm]
tensors += [("blk.0.%s.weight" % name,) + t for name, t in layer.items()]
gguf_file(os.path.join(out, "gguf", "llama"),
          [("general.architecture", "str", "llama"), ("llama.embedding_length", "u32", hidden),
           ("llama.block_count", "u32", 1), ("llama.feed_forward_length", "u32", ffn),
           ("llama.attention.head_count", "u32", heads),
           ("llama.attention.head_count_kv", "u32", kv_heads), ("llama.context_length", "u32", 64),
           ("llama.attention.layer_norm_rms_epsilon", "f32", 1e-5),
           ("llama.rope.freq_base", "f32", 10000.0), ("tokenizer.ggml.model", "str", "gpt2"),
           ("tokenizer.ggml.pre", "str", "llama3"),
           ("tokenizer.ggml.tokens", "strs", ["a", "b", "ab", "<s>"]),
           ("tokenizer.ggml.merges", "strs", ["a b"]),
           ("tokenizer.ggml.token_type", "i32s", [1, 1, 1, 3]),
           ("tokenizer.ggml.bos_token_id", "u32", 3), ("tokenizer.ggml.eos_token_id", "u32", 3),
           ("tokenizer.ggml.add_bos_token", "bool", 1),
           ("tokenizer.chat_template", "str", "{{ messages }}")], tensors)
for i in range(16):
    body = bytes(rng.randrange(256) for _ in range(16 + 4 * rng.randrange(0, 64)))
    with open(os.path.join(out, "kernels", "seed%02d" % i), "wb") as f:
        f.write(body)
PY

status=0
for target in $TARGETS; do
  corpus=$BUILD/corpus/${target#fuzz_}
  maxlen=4096
  [ $target = fuzz_data ] && maxlen=16384  # the tokenizer.json seeds are 5.4 KB
  [ $target = fuzz_gguf ] && maxlen=8192   # the llama seed is 5.1 KB, the all-types one 4.4 KB
  echo "== $target, $SECONDS_EACH s"
  if ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$BUILD/tests/fuzz/$target" -max_total_time="$SECONDS_EACH" -max_len=$maxlen \
      -print_final_stats=1 -artifact_prefix="$BUILD/findings/$target-" "$corpus" \
      > "$BUILD/$target.log" 2>&1; then
    grep -E "^Done|stat::number_of_executed_units" "$BUILD/$target.log" | head -2
  else
    status=1
    echo "!! $target found a problem; the input is in $BUILD/findings/:" >&2
    grep -E "ERROR|runtime error|fuzz_kernels:|fuzz_data:|uncaught|SUMMARY" "$BUILD/$target.log" | head -5 >&2
  fi
done
exit $status
