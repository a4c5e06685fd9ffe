"""The same BF16 SFT step as fp4lab's engine, written in PyTorch eager mode: Llama-shaped decoder
(RMSNorm, RoPE, grouped-query attention through SDPA, SwiGLU), CPU autocast to bfloat16 with fp32
master weights, token cross-entropy, AdamW, gradient clipping. bench_train.sh runs it beside the
C++ engine (tests/bench/bench_train.cpp) with the same torch and the same configs.

With --model-dir DIR it is instead the SFT step a user would otherwise run on a real model:
Hugging Face transformers' own model class loaded from DIR (bench_smollm2.sh: SmolLM2-135M), with
the model's own loss (labels=, fp32 cross-entropy), the same autocast, AdamW and clipping.

usage: python train_step.py (--model tiny|100m | --model-dir DIR) [--steps N] [--warmup N]
                            [--batch B] [--seq T] [--threads N]
prints one JSON line: tokens/s, step seconds, peak RSS."""
import argparse
import json
import math
import os
import resource
import time

import torch
import torch.nn.functional as F

CONFIGS = {
    # Must match bench_train.cpp.
    "tiny": dict(vocab=263, hidden=256, inter=704, layers=4, heads=4, kv=2, tie=True),
    "100m": dict(vocab=32000, hidden=768, inter=2048, layers=12, heads=12, kv=4, tie=False),
}


class RMSNorm(torch.nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Block(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        d, hd = c["hidden"], c["hidden"] // c["heads"]
        self.heads, self.kv, self.hd = c["heads"], c["kv"], hd
        self.input_layernorm = RMSNorm(d)
        self.q_proj = torch.nn.Linear(d, c["heads"] * hd, bias=False)
        self.k_proj = torch.nn.Linear(d, c["kv"] * hd, bias=False)
        self.v_proj = torch.nn.Linear(d, c["kv"] * hd, bias=False)
        self.o_proj = torch.nn.Linear(c["heads"] * hd, d, bias=False)
        self.post_attention_layernorm = RMSNorm(d)
        self.gate_proj = torch.nn.Linear(d, c["inter"], bias=False)
        self.up_proj = torch.nn.Linear(d, c["inter"], bias=False)
        self.down_proj = torch.nn.Linear(c["inter"], d, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(b, t, self.heads, self.hd).transpose(1, 2)
        k = self.k_proj(h).view(b, t, self.kv, self.hd).transpose(1, 2)
        v = self.v_proj(h).view(b, t, self.kv, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.heads // self.kv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o_proj(a.transpose(1, 2).reshape(b, t, -1))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Model(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(c["vocab"], c["hidden"])
        self.layers = torch.nn.ModuleList(Block(c) for _ in range(c["layers"]))
        self.norm = RMSNorm(c["hidden"])
        self.lm_head = None if c["tie"] else torch.nn.Linear(c["hidden"], c["vocab"], bias=False)
        hd = c["hidden"] // c["heads"]
        self.register_buffer("inv_freq", 1.0 / (10000.0 ** (torch.arange(0, hd, 2).float() / hd)), persistent=False)

    def forward(self, ids):
        t = ids.shape[1]
        freqs = torch.outer(torch.arange(t, dtype=torch.float32), self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        x = self.norm(x)
        return x @ self.embed_tokens.weight.t() if self.lm_head is None else self.lm_head(x)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=CONFIGS, default="tiny")
    p.add_argument("--model-dir", help="a Hugging Face folder, run through transformers")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--threads", type=int, default=0)
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    if a.model_dir:
        import transformers
        model = transformers.AutoModelForCausalLM.from_pretrained(a.model_dir, dtype=torch.float32)
        model.train()
        vocab, impl = model.config.vocab_size, "transformers-eager"
        name = a.model_dir.rstrip("/").split("/")[-1]
    else:
        c = CONFIGS[a.model]
        model = Model(c)
        vocab, impl, name = c["vocab"], "python-eager", a.model
    params = sum(x.numel() for x in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.0)
    ids = torch.randint(0, vocab, (a.batch, a.seq + 1))
    inputs, targets = ids[:, :-1], ids[:, 1:]

    def loss_of():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            if a.model_dir:  # the model's own shifted, fp32 loss
                return model(input_ids=inputs, labels=inputs).loss
            logits = model(inputs)
        return F.cross_entropy(logits.float().reshape(-1, vocab), targets.reshape(-1))

    # Turns with another process (bench_smollm2.sh: fp4lab's bench_train, the FIFOs swapped): a
    # byte read from FP4LAB_BENCH_TURN_WAIT before each step, one written to _POST after it.
    wait_path, post_path = os.environ.get("FP4LAB_BENCH_TURN_WAIT"), os.environ.get("FP4LAB_BENCH_TURN_POST")
    turns = (os.open(wait_path, os.O_RDWR), os.open(post_path, os.O_RDWR)) if wait_path and post_path else None

    times, all_times = [], []
    for step in range(a.warmup + a.steps):
        if turns:
            os.read(turns[0], 1)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_of()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        all_times.append(time.perf_counter() - t0)
        if turns:
            os.write(turns[1], b"t")
        if step >= a.warmup:
            times.append(all_times[-1])
    step_s = sorted(times)[len(times) // 2]
    print(json.dumps({
        "impl": impl, "recipe": "sft", "model": name, "params": params, "batch": a.batch, "seq": a.seq,
        "threads": torch.get_num_threads(), "step_s": step_s, "steps_s": all_times, "tok_per_s": a.batch * a.seq / step_s,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "loss": loss.item(),
        "torch": torch.__version__,
    }))


if __name__ == "__main__":
    main()
