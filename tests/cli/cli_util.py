"""What the CLI tests share: the fp4lab binary under test, failing with a message, and running a
command that must exit with a given code (its output tail in the failure message)."""
import os
import subprocess
import sys

BIN = os.environ["FP4LAB_BIN"]


def fail(message):
    print("FAIL: " + message, file=sys.stderr)
    sys.exit(1)


def run(args, expect=0, env=None, timeout=600):
    """Runs `fp4lab ARGS`; fails unless it exits `expect` (None: any code). `env` adds variables."""
    p = subprocess.run([BIN] + args, capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, **(env or {})))
    if expect is not None and p.returncode != expect:
        fail(f"{' '.join(args)} exited {p.returncode}, expected {expect}:\n"
             f"{p.stdout[-1000:]}{p.stderr[-3000:]}")
    return p
