#!/usr/bin/env python3
"""Resume keeps what a run is: for every training recipe (SFT, QAT and QAD in MXFP4 and NVFP4),
a run of N steps and a run stopped part-way (SIGTERM: checkpoint, exit 130) then resumed with only
`--resume-from-checkpoint latest --output-dir RUN` write the same log, row for row (every column
but the clocks), and end as the same kind of run (quantizers, saved state, recipe in the log).
Also: an override that would change the run is refused (exit 2, naming the key), one that does
not (train.threads) is accepted."""
import json
import os
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_util import BIN, fail, run  # noqa: E402
STEPS = 24
COMMON = ["model.path=builtin:tiny", "data.train=builtin:sft", "data.seq_len=64",
          "train.batch_size=4", "train.eval_every=8", "train.eval_batches=1",
          "data.validation_max=8", "train.threads=1", "optim.lr=1e-3", "quant.calib_batches=1",
          f"train.max_steps={STEPS}"]
RECIPES = {
    "sft": ["recipe.name=sft"],
    "qat-mxfp4": ["recipe.name=qat", "quant.format=mxfp4"],
    "qat-nvfp4": ["recipe.name=qat", "quant.format=nvfp4"],
    "qad-mxfp4": ["recipe.name=qad", "quant.format=mxfp4"],
    "qad-nvfp4": ["recipe.name=qad", "quant.format=nvfp4"],
}




def table(run_dir, which):
    """The log's rows without the clock columns (wall_s, tok_per_s)."""
    lines = run(["inspect", run_dir, "--csv", which]).stdout.strip().split("\n")
    header = lines[0].split(",")
    keep = [i for i, h in enumerate(header) if h not in ("wall_s", "tok_per_s")]
    return [[row.split(",")[i] for i in keep] for row in lines[1:]]


def stopped_part_way(run_dir, args, after_step):
    """Starts a run and sends SIGTERM once it reports `after_step`; returns the step it stopped at."""
    p = subprocess.Popen([BIN, "train", "--defaults"] + args +
                         ["--output-dir", run_dir, "--events", "jsonl"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sent = False
    for line in p.stdout:
        event = json.loads(line)
        if not sent and event["event"] == "step" and event["step"] >= after_step:
            p.send_signal(signal.SIGTERM)
            sent = True
    p.wait(timeout=600)
    if p.returncode != 130:
        fail(f"the stopped run exited {p.returncode}, expected 130 (SIGTERM sent: {sent}): "
             f"{p.stderr.read()[-2000:]}")
    with open(os.path.join(run_dir, "status.json")) as f:
        status = f.read()
    if '"cancelled"' not in status:
        fail("a stopped run is not cancelled: " + status)
    return status


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for name, recipe in RECIPES.items():
            args = COMMON + recipe
            whole = os.path.join(tmp, name + "-whole")
            part = os.path.join(tmp, name + "-part")
            run(["train", "--defaults"] + args + ["--output-dir", whole])
            stopped_part_way(part, args, after_step=STEPS // 3)
            # Only the flags: everything else comes from the run's own run.yaml.
            run(["train", "--resume-from-checkpoint", "latest", "--output-dir", part])
            for which in ("train", "eval"):
                a, b = table(whole, which), table(part, which)
                if a != b:
                    for i, (x, y) in enumerate(zip(a, b)):
                        if x != y:
                            fail(f"{name}: /{which} row {i} differs after resume: {x} vs {y}")
                    fail(f"{name}: /{which} has {len(a)} rows uninterrupted, {len(b)} resumed")
            if len(table(part, "train")) != STEPS:
                fail(f"{name}: the resumed log has {len(table(part, 'train'))} steps, not {STEPS}")
            quantized = name != "sft"
            for d in (whole, part):
                has_state = os.path.exists(os.path.join(d, "model", "quant_state.json"))
                if has_state != quantized:
                    fail(f"{name}: {d}/model/quant_state.json present: {has_state}")
            inspect = run(["inspect", part]).stdout
            if "finished" not in inspect or (quantized and "worst quantized layers" not in inspect):
                fail(f"{name}: inspect after resume:\n{inspect}")
            print(f"{name}: {STEPS} steps uninterrupted == stopped, resumed: /train and /eval agree")

        # Overrides on resume: what defines the run is refused, naming the key; the rest applies.
        part = os.path.join(tmp, "qat-nvfp4-part")
        for override in ("train.max_steps=40", "quant.format=mxfp4", "recipe.name=sft",
                         "run.seed=7", "model.path=scratch:tiny", "data.seq_len=32"):
            p = run(["train", "--resume-from-checkpoint", "latest", "--output-dir", part, override],
                    expect=2)
            key = override.split("=")[0]
            if f"'{key}' cannot change when a run resumes" not in p.stderr:
                fail(f"resume with {override}: {p.stderr}")
        p = run(["train", "--resume-from-checkpoint", "latest", "--output-dir", part, "--seed", "9"],
                expect=2)
        if "'run.seed' cannot change" not in p.stderr:
            fail("--seed on resume: " + p.stderr)
        p = run(["train", "--resume-from-checkpoint", "latest", "--output-dir", part,
                 "train.threads=2", "--dry-run"])
        if "resuming from" not in p.stderr:
            fail("a harmless override on resume: " + p.stderr)
    print("resume: all checks passed")


main()
