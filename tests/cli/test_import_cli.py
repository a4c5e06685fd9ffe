#!/usr/bin/env python3
"""`fp4lab import` against the libraries that read GGUF: small llama GGUF files written with
gguf.GGUFWriter (random weights in F32, F16, Q8_0, Q4_0, Q4_1, and raw Q4_K / Q6_K blocks; a
byte-level BPE vocabulary with merges, control and user-defined tokens and a ChatML template) are
imported, then
- every tensor equals gguf.quants.dequantize after the inverse rotary permutation of q/k, rounded
  to BF16 (torch's round-to-nearest-even), bit for bit; with --dtype f32 the fp32 decode itself;
- transformers loads OUT (--dtype f32) and its parameters equal, bit for bit, those transformers
  gets by loading the GGUF itself (gguf_file=); the logits on a prompt agree to 1e-5 relative to
  the largest logit (same weights, so only kernel-order rounding may differ);
- AutoTokenizer of OUT encodes sample texts (special tokens, non-ASCII, digits, newlines) to the
  same ids as AutoTokenizer(gguf_file=), with and without special tokens, and renders the chat
  template the same;
- `fp4lab generate OUT` runs;
- malformed inputs (truncated, bad magic, unknown architecture, unsupported tensor type) exit 2
  naming the problem and leave neither OUT nor litter; a non-empty OUT without --force is refused
  and left untouched.
Run with the project's virtual environment's python (gguf, transformers, tokenizers, torch)."""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

try:
    import gguf
    import torch
    import transformers
    from gguf.quants import dequantize, quantize
    from safetensors.torch import load_file
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders
    import accelerate  # noqa: F401  (transformers needs it to load gguf_file=)
except ImportError as e:  # not the project's venv
    print(f"SKIP: {e}")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_util import BIN, fail, run  # noqa: E402
Q = gguf.GGMLQuantizationType
HIDDEN, HEADS, KV_HEADS, FFN, LAYERS = 256, 4, 2, 512, 2  # K-quant rows need 256
HEAD_DIM = HIDDEN // HEADS
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
CORPUS = ["The quick brown fox jumps over the lazy dog. " * 3,
          "Hello world, hello there! Numbers 12345 and 2024.",
          "Grüße aus München, naïve café, 東京 and emoji 😀.",
          "def f(x):\n    return x * 2\n\n# comment", "to be or not to be, that is the question"]
SAMPLES = ["Hello world", " leading space and  double", "Grüße, 東京 😀 café",
           "<|im_start|>user\nhi<|im_end|>", "x<think>y</think>z", "12345 67\n\n\tend",
           "<|endoftext|>tail"]




def train_vocab():
    """A byte-level BPE vocabulary with merges, trained by the tokenizers library."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=420, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(CORPUS * 4, trainer)
    spec = json.loads(tok.to_str())["model"]
    vocab = sorted(spec["vocab"].items(), key=lambda kv: kv[1])
    tokens = [t for t, _ in vocab]
    merges = [" ".join(m) if isinstance(m, list) else m for m in spec["merges"]]
    types = [1] * len(tokens)
    for special in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]:
        tokens.append(special)
        types.append(3)  # CONTROL
    for user in ["<think>", "</think>"]:
        tokens.append(user)
        types.append(4)  # USER_DEFINED
    return tokens, types, merges


def permute(w, n_head):
    """llama.cpp's convert_hf_to_gguf.py permutation of q/k rows."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute(w, n_head):
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def raw_k_blocks(rng, rows, cols, qtype):
    """Random Q4_K / Q6_K blocks (gguf cannot quantize to these) with small finite scales."""
    block_bytes = {Q.Q4_K: 144, Q.Q6_K: 210}[qtype]
    blocks = rng.integers(0, 256, size=(rows * cols // 256, block_bytes), dtype=np.uint8)
    scales = (rng.standard_normal((blocks.shape[0], 2)) * 1e-3).astype(np.float16).view(np.uint8)
    if qtype == Q.Q4_K:
        blocks[:, 0:4] = scales
    else:
        blocks[:, 208:210] = scales[:, 0:2]
    return blocks.reshape(rows, cols // 256 * block_bytes)


def write_gguf(path, tokens, types, merges, tied, types_by_kind, arch="llama", pre=None,
               vocab_padding=0):
    rng = np.random.default_rng(abs(hash(path)) % 2**32)
    vocab = len(tokens) + vocab_padding
    w = gguf.GGUFWriter(path, arch)
    w.add_context_length(128)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_vocab_size(vocab)
    w.add_tokenizer_model("gpt2")
    if pre:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens + [f"[PAD{i}]" for i in range(vocab_padding)])
    w.add_token_types(types + [1] * vocab_padding)
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index("<|im_start|>"))
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML)

    def add(name, shape, qtype, scale=0.08):
        rows, cols = shape
        if qtype in (Q.Q4_K, Q.Q6_K):
            w.add_tensor(name, raw_k_blocks(rng, rows, cols, qtype), raw_dtype=qtype)
            return
        data = (rng.standard_normal(shape) * scale).astype(np.float32)
        if qtype == Q.F32:
            w.add_tensor(name, data)
        elif qtype == Q.F16:
            w.add_tensor(name, data.astype(np.float16))
        else:
            w.add_tensor(name, quantize(data, qtype), raw_dtype=qtype)

    add("token_embd.weight", (vocab, HIDDEN), types_by_kind["embd"], 0.5)
    kinds = [("attn_q", (HEADS * HEAD_DIM, HIDDEN)), ("attn_k", (KV_HEADS * HEAD_DIM, HIDDEN)),
             ("attn_v", (KV_HEADS * HEAD_DIM, HIDDEN)), ("attn_output", (HIDDEN, HIDDEN)),
             ("ffn_gate", (FFN, HIDDEN)), ("ffn_up", (FFN, HIDDEN)), ("ffn_down", (HIDDEN, FFN))]
    for layer in range(LAYERS):
        for norm in ("attn_norm", "ffn_norm"):
            w.add_tensor(f"blk.{layer}.{norm}.weight",
                         (1 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32))
        for kind, shape in kinds:
            add(f"blk.{layer}.{kind}.weight", shape, types_by_kind[kind][layer])
    w.add_tensor("output_norm.weight", (1 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32))
    if not tied:
        add("output.weight", (vocab, HIDDEN), types_by_kind["output"], 0.2)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


HF_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head",
            "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
            "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
            "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm",
            "ffn_norm": "post_attention_layernorm"}


def reference_tensors(path):
    """name -> fp32 numpy array, decoded by gguf and un-permuted, in torch layout."""
    out = {}
    for t in gguf.GGUFReader(path).tensors:
        shape = [int(d) for d in reversed(t.shape)]
        values = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape)
        parts = t.name.split(".")
        if parts[0] == "blk":
            kind = parts[2]
            name = f"model.layers.{parts[1]}.{HF_NAMES[kind]}.weight"
            if kind == "attn_q":
                values = unpermute(values, HEADS)
            elif kind == "attn_k":
                values = unpermute(values, KV_HEADS)
        else:
            name = HF_NAMES[parts[0]] + ".weight"
        out[name] = values
    return out


def check_tensors(gguf_path, out_dir, f32):
    ref = reference_tensors(gguf_path)
    got = load_file(os.path.join(out_dir, "model.safetensors"))
    if set(ref) != set(got):
        fail(f"tensor names differ: {sorted(set(ref) ^ set(got))}")
    for name, values in ref.items():
        want = torch.from_numpy(values)
        if not f32:
            want = want.to(torch.bfloat16)
        have = got[name]
        if have.dtype != want.dtype or list(have.shape) != list(want.shape):
            fail(f"{name}: {have.dtype} {list(have.shape)}, expected {want.dtype} {list(want.shape)}")
        bits = torch.int32 if f32 else torch.int16
        if not torch.equal(have.view(bits), want.view(bits)):
            fail(f"{name}: not bit-identical to gguf's dequantization")
    return len(ref)


def check_transformers(gguf_path, out_f32, tied):
    folder, name = os.path.split(gguf_path)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name,
                                                               dtype=torch.float32)
    ours = transformers.AutoModelForCausalLM.from_pretrained(out_f32, dtype=torch.float32)
    if ours.config.tie_word_embeddings != tied:
        fail(f"tie_word_embeddings {ours.config.tie_word_embeddings}, expected {tied}")
    a, b = dict(theirs.named_parameters()), dict(ours.named_parameters())
    if set(a) != set(b):
        fail(f"transformers parameter names differ: {sorted(set(a) ^ set(b))}")
    for n in a:
        if not torch.equal(a[n].detach(), b[n].detach()):
            fail(f"{n}: transformers' gguf_file= load differs from the import "
                 f"(max |diff| {(a[n] - b[n]).abs().max().item()})")
    ids = torch.tensor([[5, 17, 42, 99, 3, 250, 7, 64]])
    with torch.no_grad():
        la, lb = theirs(ids).logits, ours(ids).logits
    diff = (la - lb).abs().max().item()
    scale = la.abs().max().item()
    if diff > 1e-5 * scale:
        fail(f"logits differ by {diff} (max |logit| {scale})")
    return diff, scale


def check_tokenizer(gguf_path, out_dir):
    folder, name = os.path.split(gguf_path)
    theirs = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
    ours = transformers.AutoTokenizer.from_pretrained(out_dir)
    for text in SAMPLES:
        for special in (False, True):
            a = theirs.encode(text, add_special_tokens=special)
            b = ours.encode(text, add_special_tokens=special)
            if a != b:
                fail(f"{text!r} (add_special_tokens={special}): gguf {a} vs import {b}")
        if ours.decode(ours.encode(text, add_special_tokens=False)) != text:
            fail(f"{text!r} does not decode back")
    messages = [{"role": "user", "content": "Grüße?"}, {"role": "assistant", "content": "Hi"}]
    a = theirs.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    b = ours.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    if a != b:
        fail(f"chat templates render differently:\n{a!r}\n{b!r}")
    if ours.eos_token != "<|im_end|>" or ours.bos_token != "<|im_start|>":
        fail(f"special tokens: bos {ours.bos_token!r}, eos {ours.eos_token!r}")


def main():
    tokens, types, merges = train_vocab()
    with tempfile.TemporaryDirectory(prefix="fp4lab-import-") as tmp:
        mixed = {"embd": Q.Q8_0, "output": Q.Q4_1,
                 "attn_q": [Q.Q4_0, Q.F32], "attn_k": [Q.Q4_1, Q.Q8_0],
                 "attn_v": [Q.Q8_0, Q.F16], "attn_output": [Q.F16, Q.Q4_0],
                 "ffn_gate": [Q.Q4_1, Q.Q4_K], "ffn_up": [Q.Q4_0, Q.Q6_K],
                 "ffn_down": [Q.Q8_0, Q.F32]}
        files = {"untied": (False, None), "tied": (True, "llama-bpe")}
        for label, (tied, pre) in files.items():
            src = os.path.join(tmp, f"{label}.gguf")
            write_gguf(src, tokens, types, merges, tied, mixed, pre=pre)
            out_bf16, out_f32 = os.path.join(tmp, f"{label}-bf16"), os.path.join(tmp, f"{label}-f32")
            run(["import", src, "--output-dir", out_bf16])
            run(["import", src, "--output-dir", out_f32, "--dtype", "f32"])
            n = check_tensors(src, out_bf16, f32=False)
            check_tensors(src, out_f32, f32=True)
            config = json.load(open(os.path.join(out_bf16, "config.json")))
            for key, want in [("hidden_size", HIDDEN), ("num_attention_heads", HEADS),
                              ("num_key_value_heads", KV_HEADS), ("intermediate_size", FFN),
                              ("num_hidden_layers", LAYERS), ("rms_norm_eps", 1e-5),
                              ("rope_theta", 10000.0), ("vocab_size", len(tokens)),
                              ("tie_word_embeddings", tied), ("torch_dtype", "bfloat16"),
                              ("dtype", "bfloat16"), ("max_position_embeddings", 128),
                              ("eos_token_id", tokens.index("<|im_end|>"))]:
                if config.get(key) != want:
                    fail(f"config.json {key} = {config.get(key)!r}, expected {want!r}")
            if not json.load(open(os.path.join(out_bf16, "tokenizer_config.json"))).get("chat_template"):
                fail("no chat template in tokenizer_config.json")
            diff, scale = check_transformers(src, out_f32, tied)
            check_tokenizer(src, out_bf16)
            p = run(["generate", out_bf16, "--prompt", "Hello world", "--max-new-tokens", "4"])
            print(f"{label}: {n} tensors bit-exact (BF16 and F32); transformers parameters equal; "
                  f"logits max |diff| {diff:.3g} (max |logit| {scale:.3g}); tokenizer matches; "
                  f"generate: {p.stdout.strip()[:60]!r}")

        # Refusals: nothing written, nothing left behind.
        src = os.path.join(tmp, "untied.gguf")
        data = open(src, "rb").read()
        bad = {"truncated": (data[: len(data) - 100], "past the end"),
               "magic": (b"GGUX" + data[4:], "bad magic"),
               "header": (data[:20], "unexpected end of file")}
        arch_src = os.path.join(tmp, "gpt2arch.gguf")
        write_gguf(arch_src, tokens, types, merges, True, mixed, arch="falcon")
        q2 = dict(mixed, ffn_up=[Q.Q4_0, Q.Q6_K])
        q2_src = os.path.join(tmp, "q2k.gguf")
        write_gguf(q2_src, tokens, types, merges, True, q2)
        raw = bytearray(open(q2_src, "rb").read())
        # Retype the Q6_K tensor as Q3_K (same 256-element blocks, 110 bytes: still fits).
        reader = gguf.GGUFReader(q2_src)
        field = [t for t in reader.tensors if t.tensor_type == Q.Q6_K][0]
        name = field.name.encode()
        at = raw.index(name) + len(name) + 4 + 8 * len(field.shape)
        raw[at:at + 4] = int(Q.Q3_K).to_bytes(4, "little")
        cases = {k: v for k, v in bad.items()}
        for label, (content, message) in cases.items():
            path = os.path.join(tmp, f"bad-{label}.gguf")
            open(path, "wb").write(content)
            cases[label] = (path, message)
        open(os.path.join(tmp, "bad-q3k.gguf"), "wb").write(bytes(raw))
        cases["q3k"] = (os.path.join(tmp, "bad-q3k.gguf"), "unsupported tensor type Q3_K in blk.1.ffn_up.weight")
        cases["arch"] = (arch_src, "unsupported architecture 'falcon'")
        for label, (path, message) in cases.items():
            before = sorted(os.listdir(tmp))
            out = os.path.join(tmp, f"out-{label}")
            p = run(["import", path, "--output-dir", out], expect=2)
            if message not in p.stderr or path not in p.stderr:
                fail(f"{label}: message does not say {message!r} and name the file:\n{p.stderr}")
            if os.path.exists(out) or sorted(os.listdir(tmp)) != before:
                fail(f"{label}: left something behind: {sorted(set(os.listdir(tmp)) - set(before))}")
        existing = os.path.join(tmp, "untied-bf16")
        before = open(os.path.join(existing, "model.safetensors"), "rb").read()
        p = run(["import", os.path.join(tmp, "tied.gguf"), "--output-dir", existing], expect=2)
        if "not empty" not in p.stderr:
            fail("a non-empty OUT is not refused with a clear message: " + p.stderr)
        if open(os.path.join(existing, "model.safetensors"), "rb").read() != before:
            fail("the refused OUT was modified")
        run(["import", os.path.join(tmp, "tied.gguf"), "--output-dir", existing, "--force"])
        if "lm_head.weight" in load_file(os.path.join(existing, "model.safetensors")):
            fail("--force did not replace OUT")
        print("refusals: truncated, bad magic, short header, Q3_K, falcon, non-empty OUT: exit 2, "
              "nothing left behind")
    print("PASS")


if __name__ == "__main__":
    main()
