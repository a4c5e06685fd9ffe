#!/usr/bin/env python3
"""Data-parallel throughput on this machine: `fp4lab train` of the built-in model (or
scratch:100m, a ~125 M-parameter Llama) as 1 process x T threads against N processes x T/N threads
(Gloo, same global batch), interleaved over --rounds so drift in the machine's speed hits both
alike. Prints tokens/s (median over the steps after --warmup, summed over the ranks, as the log
records it) and the gradient all-reduce time per step that the backward did not hide (median of
rank 0's allreduce_s: buckets are all-reduced while the backward runs).
--grading N instead times one task evaluation (math_in_language and json_answer, N items each,
greedy, --new-tokens each; no training): 1 process x T threads, 1 process x T/N threads (what rank
0 of N processes did alone before grading was sharded) and N processes x T/N threads, item i on
rank i mod N; the seconds are the `tasks` event's (rank 0's wall clock from its first item until
every rank's answers are in).

    FP4LAB_BIN=build/release/app/fp4lab python3 tests/bench/bench_distributed.py \
        [--model tiny|100m] [--steps 30] [--warmup 5] [--batch 8] [--seq 128] [--threads 2]
        [--rounds 2] [--quick] [--grading N [--new-tokens 96]]
"""
import argparse
import json
import os
import re
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


def grade(binary, out, args, nproc, threads):
    model = "builtin:tiny" if args.model == "tiny" else "scratch:100m"
    cmd = [binary, "train", "--defaults", "model.path=" + model, "data.train=builtin:sft",
           f"data.seq_len={args.seq}", f"train.batch_size={args.batch}", "train.max_steps=0",
           "train.eval_batches=1", "data.validation_max=8", f"train.threads={threads}",
           "eval.tasks=math_in_language,json_answer", f"eval.task_items={args.grading}",
           f"eval.max_new_tokens={args.new_tokens}", "--output-dir", out]
    if nproc > 1:
        cmd += ["--nproc", str(nproc)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    rows = subprocess.run([binary, "inspect", out, "--csv", "eval"], capture_output=True,
                          text=True, check=True).stdout.strip().splitlines()
    last = dict(zip(rows[0].split(","), rows[-1].split(",")))
    events = subprocess.run([binary, "inspect", out], capture_output=True, text=True,
                            check=True).stdout
    seconds = re.search(r" tasks step 0: \d+ items graded in ([0-9.]+) s", events)
    if not seconds:
        sys.exit(f"no tasks event in {out}:\n{events}")
    return float(seconds.group(1)), (float(last["pass_rate_math_in_language"]),
                                     float(last["pass_rate_json_answer"]))


def interleaved(measure, binary, args, configs):
    """{(processes, threads): [measure(...) of each round]}, the configurations taking turns."""
    results = {c: [] for c in configs}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for nproc, threads in configs:
                out = os.path.join(tmp, f"r{r}-{nproc}x{threads}")
                results[(nproc, threads)].append(measure(binary, out, args, nproc, threads))
    return results


def main_grading(args, binary):
    half = max(1, args.threads // args.nproc)
    results = interleaved(grade, binary, args, [(1, args.threads), (1, half), (args.nproc, half)])
    name = "built-in model" if args.model == "tiny" else "scratch:100m"
    print(f"{name}: one task evaluation, 2 tasks x {args.grading} items, up to "
          f"{args.new_tokens} new tokens each, {args.rounds} round(s)")
    print(f"{'processes x threads':>20} {'seconds (each round)':>24} {'pass rates':>14}")
    for (nproc, threads), rows in results.items():
        secs = ", ".join(f"{r[0]:.2f}" for r in rows)
        print(f"{f'{nproc} x {threads}':>20} {secs:>24} {str(rows[0][1]):>14}")


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
    ap.add_argument("--grading", type=int, default=0, help="time a task evaluation of N items")
    ap.add_argument("--new-tokens", type=int, default=96)
    args = ap.parse_args()
    binary = os.environ.get("FP4LAB_BIN", "build/release/app/fp4lab")
    if args.grading:
        return main_grading(args, binary)
    if args.steps is None:
        args.steps = 30 if args.model == "tiny" else 8
    if args.warmup is None:
        args.warmup = 5 if args.model == "tiny" else 2
    if args.quick:
        args.steps, args.warmup, args.batch, args.seq, args.rounds = 4, 1, 4, 64, 1
    results = interleaved(train, binary, args,
                          [(1, args.threads), (args.nproc, max(1, args.threads // args.nproc))])
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
