#!/usr/bin/env python3
"""Training throughput idle and with one core busy with another program, side by side: `fp4lab
train` of the built-in model (SFT, BF16, the default batch 16 x 256) at the default thread count
(train.threads=0) and at fixed counts, interleaved over --rounds so drift in the machine's speed
hits every variant alike. The load is a busy loop in another process (`--load N` of them, default
1). Prints tokens/s (the tokens of the steps after --warmup over their summed time, so a default's
steps at a count it tries or before it adapts count too) per variant and load, and each variant's
ratio to one thread under the same load.

    FP4LAB_BIN=build/release/app/fp4lab python3 tests/bench/bench_under_load.py \
        [--steps 40] [--warmup 8] [--rounds 2] [--threads 0,1,2] [--load 1] [--env K=V]...

`--env K=V` adds a variant: the default thread count with that environment variable set (to try
OpenMP settings, e.g. --env OMP_WAIT_POLICY=passive).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def train(binary, out, args, threads, env):
    cmd = [binary, "train", "--defaults", "model.path=builtin:tiny", "data.train=builtin:sft",
           f"train.max_steps={args.steps}", "train.eval_every=0", "train.eval_batches=1",
           "data.validation_max=8", f"train.threads={threads}", "--output-dir", out,
           "--events", "jsonl"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800,
                       env=dict(os.environ, **env))
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    steps = [json.loads(line) for line in p.stdout.splitlines() if '"event":"step"' in line]
    kept = steps[args.warmup:]
    # The steps at which the default changed its thread count (step events carry `threads`).
    switches = [f"{e['step']}:{int(e['threads'])}" for prev, e in zip(steps, steps[1:])
                if "threads" in e and e["threads"] != prev.get("threads")]
    SWITCHES.setdefault((threads, tuple(env.items())), []).append(" ".join(switches) or "-")
    # What the run delivers: tokens over the time of its steps, the slow ones included (the
    # default's steps at the count it tries and those before it adapts).
    tokens = kept[-1]["tokens"] - steps[args.warmup - 1]["tokens"]
    return tokens / sum((e["tokens"] - prev["tokens"]) / e["tok_per_s"]
                        for prev, e in zip(steps[args.warmup - 1:], kept))


SWITCHES = {}


def busy_loops(n):
    # Plain busy loops in their own processes: "another program" using a core.
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", default="0,1,2", help="train.threads values (0: the default)")
    ap.add_argument("--load", type=int, default=1, help="busy processes in the loaded runs")
    ap.add_argument("--env", action="append", default=[], help="K=V: a variant with this set")
    ap.add_argument("--quick", action="store_true", help="a smoke run")
    args = ap.parse_args()
    if args.quick:
        args.steps, args.warmup, args.rounds = 6, 2, 1
    binary = os.environ.get("FP4LAB_BIN", "build/release/app/fp4lab")
    variants = [(f"threads={t}" + (" (default)" if t == "0" else ""), t, {})
                for t in args.threads.split(",")]
    for kv in args.env:
        k, _, v = kv.partition("=")
        variants.append((f"threads=0, {k}={v}", "0", {k: v}))
    results = {}  # (variant, load) -> [tok/s per round]
    with tempfile.TemporaryDirectory() as tmp:
        n = 0
        for _ in range(args.rounds):
            for load in ("idle", "loaded"):
                loops = busy_loops(args.load) if load == "loaded" else []
                try:
                    time.sleep(0.5 if loops else 0)
                    for name, threads, env in variants:
                        n += 1
                        tps = train(binary, os.path.join(tmp, f"r{n}"), args, threads, env)
                        results.setdefault((name, load), []).append(tps)
                finally:
                    for p in loops:
                        p.kill()
                        p.wait()
    print(f"{os.cpu_count()} CPUs, built-in model, SFT BF16, batch 16 x 256, {args.steps} steps "
          f"(tok/s of the steps after the first {args.warmup}), {args.rounds} rounds, loaded = {args.load} busy "
          "process(es)\n")
    print("| variant | idle tok/s (rounds) | loaded tok/s (rounds) | idle / 1 thread | "
          "loaded / 1 thread |")
    print("|---|---|---|---|---|")
    one = {load: statistics.median(results.get(("threads=1", load), [float("nan")]))
           for load in ("idle", "loaded")}
    for name, _, _ in variants:
        cells = []
        for load in ("idle", "loaded"):
            xs = results[(name, load)]
            cells.append(f"{statistics.median(xs):.0f} ({' / '.join(f'{x:.0f}' for x in xs)})")
        ratios = [statistics.median(results[(name, load)]) / one[load]
                  for load in ("idle", "loaded")]
        print(f"| {name} | {cells[0]} | {cells[1]} | {ratios[0]:.2f}x | {ratios[1]:.2f}x |")
    print("\nThread count changes (step:threads), idle and loaded alternating by round:")
    for (threads, env), runs in SWITCHES.items():
        if threads == "0":
            print(f"- threads=0 {dict(env) or ''}: {' | '.join(runs)}")


if __name__ == "__main__":
    main()
