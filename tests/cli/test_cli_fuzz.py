#!/usr/bin/env python3
"""Every subcommand fed random and malformed arguments, options and config values (files and
key=value) must end with exit 0 or 2 and, for 2, a message: never a signal, never "internal error"
(exit 1), never a stack trace. Commands that would train are given --dry-run, so nothing long runs.
Seeded (FP4LAB_FUZZ_SEED, default 20261201) so a failure can be replayed; prints the failing
command line."""
import os
import random
import shutil
import subprocess
import sys
import tempfile

BIN = os.environ["FP4LAB_BIN"]
SEED = int(os.environ.get("FP4LAB_FUZZ_SEED", "20261201"))
CASES = int(os.environ.get("FP4LAB_FUZZ_CASES", "160"))
rng = random.Random(SEED)

WEIRD = ["", " ", "-1", "0", "1", "1e9", "1e999", "-1e999", "nan", "inf", "-inf", "0x10", "9" * 30,
         "[", "]", "{", "}", "{a: 1}", "[1, 2]", "'", '"', "\\", ":", "a: b", "~", "null", "true",
         "yes", "no", "é", "\u2603", "\x01", "../../etc", "/nonexistent", "/dev/null", "/tmp",
         "builtin:", "builtin:nope", "scratch:nope", "random:nope", "random:tokens", "mxfp4",
         "nvfp4", "none", "sft", "ptq", "qat", "qad", "ceil", "floor", "-0", "+5", "3.5",
         "1,2", "*", "?", "%s%n", "a" * 300]


def weird():
    return rng.choice(WEIRD)


def run_keys():
    out = subprocess.run([BIN, "train", "--list-keys"], capture_output=True, text=True).stdout
    return [line.split("`")[1] for line in out.splitlines() if line.startswith("| `")]


def experiment_keys():
    out = subprocess.run([BIN, "experiment", "--list-keys"], capture_output=True, text=True).stdout
    return [line.split("`")[1] for line in out.splitlines() if line.startswith("| `")]


def main():
    with tempfile.TemporaryDirectory() as tmp:
        # A copy of the built-in model: quantize may write where the fuzzer points it.
        shipped = subprocess.run([BIN, "base-model"], capture_output=True, text=True).stdout.strip()
        model = os.path.join(tmp, "model")
        shutil.copytree(shipped, model)
        rows = os.path.join(tmp, "rows.jsonl")
        with open(rows, "w") as f:
            f.write('{"input_ids": [65, 66, 67]}\n{"messages": [{"role": "user", "content": "hi"},'
                    ' {"role": "assistant", "content": "yo"}]}\n')
        garbage = os.path.join(tmp, "garbage.bin")
        with open(garbage, "wb") as f:
            f.write(bytes(rng.randrange(256) for _ in range(300)))
        safetensors = os.path.join(model, "model.safetensors")
        rkeys, ekeys = run_keys(), experiment_keys()
        assert len(rkeys) > 40 and len(ekeys) > 15, (rkeys, ekeys)
        paths = [model, rows, garbage, safetensors, tmp, "/nonexistent", "", os.path.join(tmp, "o")]

        def config_file():
            path = os.path.join(tmp, f"c{rng.randrange(10**9)}.yaml")
            lines = []
            for _ in range(rng.randrange(1, 5)):
                key = rng.choice(rkeys + ["bogus.key", "train", "optim.lrr"])
                section, _, name = key.partition(".")
                lines.append(f"{section}:\n  {name or 'x'}: {weird()}" if rng.random() < 0.8
                             else weird())
            with open(path, "w") as f:
                f.write("\n".join(lines) + "\n")
            return path

        def case():
            command = rng.choice(["train", "train", "train", "experiment", "experiment", "eval",
                                  "generate", "inspect", "quantize", "dequantize", "base-model",
                                  "tokenize", "import", "export", "analyze", "sensitivity", "bogus",
                                  "--bogus", ""])
            args = [command] if command else []
            if command == "train":
                args += rng.choice([["--defaults"], ["--config", config_file()], [],
                                    ["--resume-from-checkpoint", rng.choice(["latest", weird()])]])
                args += [f"{rng.choice(rkeys + ['nope', 'optim.lrr', ''])}={weird()}"
                         for _ in range(rng.randrange(0, 4))]
                if rng.random() < 0.5:
                    args += ["model.path=" + rng.choice(paths + ["builtin:tiny", "scratch:tiny"])]
                args += rng.choice([[], ["--output-dir", rng.choice(paths)], ["--seed", weird()],
                                    ["--events", weird()], ["--print-config"]])
                args += ["--dry-run"]
            elif command == "experiment":
                args += rng.choice([[], ["--quick"], ["--config", config_file()]])
                args += [f"{rng.choice(ekeys + ['nope', ''])}={weird()}"
                         for _ in range(rng.randrange(0, 4))]
                args += ["--output-dir", os.path.join(tmp, "exp"), "--dry-run"]
            elif command in ("eval", "generate"):
                args += [rng.choice(paths)] if rng.random() < 0.9 else []
                if command == "eval":
                    args += rng.choice([["--data", rng.choice(paths)], [], ["--data"]])
                else:
                    args += ["--prompt", rng.choice(["hi", "", weird()]), "--max-new-tokens",
                             rng.choice(["4", weird()])]
                    args += rng.choice([[], ["--temperature", weird()], ["--seed", weird()],
                                        ["--raw"], ["--system", weird()]])
                args += rng.choice([[], ["--bf16"], ["--per-example"], ["--bogus"]])
            elif command == "tokenize":
                args += [rng.choice(paths + ["builtin:tiny", "builtin:nope"])] \
                    if rng.random() < 0.9 else []
                args += rng.choice([["--text", weird()], ["--text"], [], ["--bogus"]])
            elif command == "analyze":
                args += [rng.choice(paths)] if rng.random() < 0.9 else []
                args += rng.choice([[], ["--formats", weird()], ["--formats", "nvfp4,mxfp4"],
                                    ["--include", weird()], ["--exclude", weird()], ["--json"],
                                    ["--threads", weird()],
                                    ["--output", os.path.join(tmp, "analysis.h5")],
                                    # under tmp: "/nonexistent" would be written otherwise
                                    ["--output", tmp + "/" + weird()], ["--output", tmp],
                                    ["--output", os.path.join(tmp, "nope", "a.h5")],
                                    ["--force"]])
            elif command == "sensitivity":
                args += [rng.choice(paths + ["builtin:tiny"])] if rng.random() < 0.9 else []
                args += rng.choice([["--data", rng.choice(paths)], ["--data", rows], [],
                                    ["--data"], ["--data", weird()]])
                args += rng.choice([[], ["--format", weird()], ["--format", "mxfp4"], ["--w4a4"],
                                    ["--keep", weird()], ["--tolerance", weird()],
                                    ["--threads", weird()], ["--max-batches", weird()],
                                    ["--output", os.path.join(tmp, "sens.json")],
                                    ["--output", tmp + "/" + weird()], ["--output", tmp],
                                    ["--emit-exclude", os.path.join(tmp, "nope", "x")],
                                    ["--emit-exclude", os.path.join(tmp, "plan.txt")],
                                    [f"{rng.choice(rkeys + ['nope'])}={weird()}"], ["--force"]])
                # Only what a tiny model does quickly: one batch of short sequences, no KL.
                args += ["--max-batches", "1", "--no-kl", "data.seq_len=32", "train.batch_size=1"]
            elif command in ("import", "export"):
                args += [rng.choice(paths)] if rng.random() < 0.9 else []
                args += rng.choice([["--output-dir", os.path.join(tmp, "out")], [],
                                    ["--output-dir", rng.choice(paths)]])
                if command == "export":
                    args += rng.choice([["--format", weird()], ["--format", "bf16"], [],
                                        ["--exclude", weird()], ["--max-shard-size", weird()]])
                else:
                    args += rng.choice([[], ["--dtype", weird()], ["--force"]])
            elif command in ("inspect", "quantize", "dequantize", "base-model"):
                args += [rng.choice(paths) for _ in range(rng.randrange(0, 3))]
                if command in ("quantize", "dequantize"):
                    args += rng.choice([[], ["--format", weird()], ["--scale-rule", weird()],
                                        ["--force"], ["--2d"]])
                if command == "inspect":
                    args += rng.choice([[], ["--csv", weird()]])
                if command == "base-model":
                    args += rng.choice([[], ["--output", weird()]])
            else:
                args += [weird() for _ in range(rng.randrange(0, 3))]
            if rng.random() < 0.1:
                args.insert(rng.randrange(len(args) + 1), rng.choice(["-h", "--help", "-x", "--"]))
            return args

        seen = {0: 0, 2: 0}
        for i in range(CASES):
            args = case()
            try:
                p = subprocess.run([BIN] + args, capture_output=True, timeout=120, cwd=tmp)
            except subprocess.TimeoutExpired:
                print(f"FAIL (case {i}): timed out: fp4lab {args!r}", file=sys.stderr)
                return 1
            err = p.stderr.decode("utf-8", "replace")
            bad = p.returncode not in (0, 2) or "internal error" in err or "terminate called" in err
            if p.returncode == 2 and "error" not in err:
                bad = True
            if bad:
                print(f"FAIL (case {i}, seed {SEED}): fp4lab {args!r} exited {p.returncode}:\n"
                      f"{err[-3000:]}", file=sys.stderr)
                return 1
            seen[p.returncode] += 1
        print(f"cli fuzz: {CASES} cases, {seen[0]} exited 0 and {seen[2]} exited 2 with a message")
        return 0


sys.exit(main())
