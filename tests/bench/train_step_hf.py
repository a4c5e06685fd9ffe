"""The SFT step a user would otherwise run: Hugging Face transformers' own model class loaded from
the same folder (here LlamaForCausalLM, SmolLM2-135M-Instruct), PyTorch eager mode, CPU autocast
to bfloat16 with fp32 master weights, the model's own loss (labels=, fp32 cross-entropy), AdamW,
gradient clipping; the same torch as fp4lab. bench_smollm2.sh runs it beside bench_train.

usage: python train_step_hf.py --model-dir DIR [--steps N] [--warmup N] [--batch B] [--seq T]
                               [--threads N]
prints one JSON line: tokens/s, step seconds, peak RSS."""
import argparse
import json
import resource
import time

import torch
import transformers


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model-dir", required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--threads", type=int, default=0)
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_pretrained(a.model_dir, dtype=torch.float32)
    model.train()
    vocab = model.config.vocab_size
    params = sum(x.numel() for x in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.0)
    ids = torch.randint(0, vocab, (a.batch, a.seq))
    times = []
    for step in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
    step_s = sorted(times)[len(times) // 2]
    print(json.dumps({
        "impl": "transformers-eager", "recipe": "sft", "model": "smollm2", "params": params,
        "batch": a.batch, "seq": a.seq, "threads": torch.get_num_threads(), "step_s": step_s,
        "tok_per_s": a.batch * a.seq / step_s,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "loss": float(loss), "torch": torch.__version__,
        "transformers": transformers.__version__,
    }))


if __name__ == "__main__":
    main()
