#!/usr/bin/env python3
"""Data-parallel throughput on this machine: `fp4lab train` of the built-in model (or
scratch:100m, a ~125 M-parameter Llama) as 1 process x T threads against N processes x T/N threads
(Gloo, same global batch), interleaved over --rounds so drift in the machine's speed hits both
alike. Prints tokens/s (median over the steps after --warmup, summed over the ranks, as the log
records it) and the gradient all-reduce time per step that the backward did not hide (median of
rank 0's allreduce_s: buckets are all-reduced while the backward runs).

    FP4LAB_BIN=build/release/app/fp4lab python3 tests/bench/bench_distributed.py \
        [--model tiny|100m] [--steps 30] [--warmup 5] [--batch 8] [--seq 128] [--threads 2]
        [--rounds 2] [--quick]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def train(binary, out, args, nproc, threads):
    model = "builtin:tiny" if args.model == "tiny" else "scratch:100m"
    cmd = [binary, "train", "--defaults", "model.path=" + model, "data.train=builtin:sft",
           f"data.seq_len={args.seq}", f"train.batch_size={args.batch}",
           f"train.max_steps={args.steps}", "train.eval_every=0", "train.eval_batches=1",
           "data.validation_max=8", f"train.threads={threads}", "--output-dir", out,
           "--events", "jsonl"]
    if nproc > 1:
        cmd += ["--nproc", str(nproc)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    steps = [json.loads(line) for line in p.stdout.splitlines() if '"event":"step"' in line]
    kept = steps[args.warmup:]
    tps = statistics.median(e["tok_per_s"] for e in kept)
    ar = [e["allreduce_s"] for e in kept if "allreduce_s" in e]
    step_s = statistics.median(args.batch * args.seq / e["tok_per_s"] for e in kept)
    return tps, (statistics.median(ar) if ar else None), step_s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["tiny", "100m"], default="tiny")
    ap.add_argument("--steps", type=int, default=None, help="default 30 (tiny), 8 (100m)")
    ap.add_argument("--warmup", type=int, default=None, help="default 5 (tiny), 2 (100m)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="a smoke run (CTest's bench label)")
    args = ap.parse_args()
    if args.steps is None:
        args.steps = 30 if args.model == "tiny" else 8
    if args.warmup is None:
        args.warmup = 5 if args.model == "tiny" else 2
    if args.quick:
        args.steps, args.warmup, args.batch, args.seq, args.rounds = 4, 1, 4, 64, 1
    binary = os.environ.get("FP4LAB_BIN", "build/release/app/fp4lab")
    configs = [(1, args.threads), (args.nproc, max(1, args.threads // args.nproc))]
    results = {c: [] for c in configs}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for nproc, threads in configs:
                out = os.path.join(tmp, f"r{r}-{nproc}x{threads}")
                results[(nproc, threads)].append(train(binary, out, args, nproc, threads))
    name = "built-in model" if args.model == "tiny" else "scratch:100m"
    print(f"{name}, global batch {args.batch} x {args.seq} tokens, {args.steps} steps "
          f"({args.warmup} warm-up), {args.rounds} round(s)")
    print(f"{'processes x threads':>20} {'tok/s (median)':>15} {'step ms':>9} "
          f"{'all-reduce ms/step':>19}")
    for (nproc, threads), rows in results.items():
        tps = statistics.median(r[0] for r in rows)
        step = statistics.median(r[2] for r in rows) * 1e3
        ar = [r[1] for r in rows if r[1] is not None]
        ar_text = f"{statistics.median(ar) * 1e3:.1f}" if ar else "-"
        print(f"{f'{nproc} x {threads}':>20} {tps:>15.0f} {step:>9.1f} {ar_text:>19}")


if __name__ == "__main__":
    main()
