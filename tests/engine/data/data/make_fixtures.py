#!/usr/bin/env python3
# Writes the hand-made tokenizer.json fixtures of test_bpe_tokenizer.cpp. Ids 0..255 are the
# bytes (id == byte value), then one token per merge in rank order, so every expected encoding in
# the tests can be worked out by hand from the table below. Run from this folder.
import json

def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}

B2U = bytes_to_unicode()

def level(raw: bytes) -> str:
    return "".join(B2U[b] for b in raw)

# (left, right) as raw bytes, in rank order; the merged token gets id 256 + rank.
MERGES = [
    (b" ", b"t"),          # 0 -> 256 " t"
    (b"l", b"l"),          # 1 -> 257 "ll"
    (b"e", b"ll"),         # 2 -> 258 "ell"
    (b"h", b"e"),          # 3 -> 259 "he"
    (b" t", b"he"),        # 4 -> 260 " the"
    (b"h", b"ell"),        # 5 -> 261 "hell"
    (b"hell", b"o"),       # 6 -> 262 "hello"
    (b"\n", b"\n"),        # 7 -> 263 "\n\n"
    (b" ", b" "),          # 8 -> 264 "  "
    (b"t", b"h"),          # 9 -> 265 "th"
    (b"1", b"2"),          # 10 -> 266 "12"
    (b"3", b"4"),          # 11 -> 267 "34"
    (b"12", b"3"),         # 12 -> 268 "123"
    (b"\xc3", b"\xa9"),    # 13 -> 269 "é"
    (b"\xe4", b"\xbd"),    # 14 -> 270 first two bytes of "你"
    (b"\xe4\xbd", b"\xa0"),  # 15 -> 271 "你"
    (b"'", b"S"),          # 16 -> 272 "'S"
]
VOCAB_ONLY = [b"hel"]      # 273: reachable only with ignore_merges
ADDED = [                  # 274..277
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<think>", False),
]

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")

def tokenizer(pre_tokenizer, merges_as_pairs):
    vocab = {level(bytes([b])): b for b in range(256)}
    merges = []
    for rank, (left, right) in enumerate(MERGES):
        vocab[level(left + right)] = 256 + rank
        merges.append([level(left), level(right)] if merges_as_pairs
                      else level(left) + " " + level(right))
    for k, raw in enumerate(VOCAB_ONLY):
        vocab[level(raw)] = 256 + len(MERGES) + k
    first_added = 256 + len(MERGES) + len(VOCAB_ONLY)
    added = [{"id": first_added + k, "content": content, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": special}
             for k, (content, special) in enumerate(ADDED)]
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None, "pre_tokenizer": pre_tokenizer, "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }

# Llama-3 / Qwen2 layout: a Split regex, then ByteLevel without its own regex; string merges.
split_style = tokenizer({"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": LLAMA3_SPLIT}, "behavior": "Isolated", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
    merges_as_pairs=False)
# GPT-2 layout: ByteLevel with its built-in regex; merges as [left, right] pairs (newer files).
gpt2_style = tokenizer({"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                        "use_regex": True}, merges_as_pairs=True)

for name, content in [("bpe_split.json", split_style), ("bpe_gpt2.json", gpt2_style)]:
    with open(name, "w", encoding="utf-8") as f:
        json.dump(content, f, ensure_ascii=False, indent=1)
        f.write("\n")
