"""`fp4lab analyze --output`: the HDF5 file is written atomically (no temporary file left), an
existing file is refused without --force and replaced with it, bad paths and a missing model give
a clear error (exit code 2) and no file, SIGINT cancels cleanly (exit code 2, a message, no
file), and --json carries the new keys. Plain python3 (no h5py needed: the file's contents are
checked by test_analyze's independent HDF5 C API reading)."""
import json
import os
import random
import signal
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_util  # noqa: E402

BIN = os.environ["FP4LAB_BIN"]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def run(args, **kw):
    return subprocess.run([BIN, "analyze"] + args, capture_output=True, text=True, timeout=300, **kw)


def temporaries(folder):
    return [n for n in os.listdir(folder) if ".tmp-" in n]


def write_model(folder, layers, rows, cols, rng):
    os.makedirs(folder, exist_ok=True)
    tensors = {}
    for l in range(layers):
        values = [rng.gauss(0.0, 0.02) for _ in range(rows * cols)]
        values[rng.randrange(len(values))] = 1.5  # one outlier per layer
        tensors[f"model.layers.{l}.mlp.down_proj.weight"] = (
            "F32", [rows, cols], struct.pack(f"<{len(values)}f", *values))
    safetensors_util.write(os.path.join(folder, "model.safetensors"), tensors)
    with open(os.path.join(folder, "config.json"), "w") as f:
        f.write('{"model_type": "llama"}')


def write_big_model(folder, layers, rows, cols):
    """Random bits (NaN and Inf included): only the analysis time matters here."""
    os.makedirs(folder, exist_ok=True)
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for l in range(layers):
        n = rows * cols * 4
        header[f"model.layers.{l}.mlp.up_proj.weight"] = {
            "dtype": "F32", "shape": [rows, cols], "data_offsets": [offset, offset + n]}
        offset += n
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(os.path.join(folder, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for _ in range(layers):
            f.write(os.urandom(rows * cols * 4))
    with open(os.path.join(folder, "config.json"), "w") as f:
        f.write('{"model_type": "llama"}')


with tempfile.TemporaryDirectory() as tmp:
    rng = random.Random(3)
    model = os.path.join(tmp, "model")
    write_model(model, 3, 32, 128, rng)
    out = os.path.join(tmp, "analysis.h5")

    p = run([model, "--output", out])
    check(p.returncode == 0, f"analyze --output: rc {p.returncode}: {p.stderr}")
    check(os.path.isfile(out), "the output file exists")
    with open(out, "rb") as f:
        check(f.read(8) == b"\x89HDF\r\n\x1a\n", "the output is an HDF5 file")
    check(temporaries(tmp) == [], f"no temporary file left: {temporaries(tmp)}")
    check("wrote " + out in p.stdout, "says where it wrote")
    before = os.stat(out)

    p = run([model, "--output", out])
    check(p.returncode == 2, f"existing output: rc {p.returncode}")
    check("output file exists" in p.stderr and "--force" in p.stderr,
          f"existing output: message: {p.stderr!r}")
    after = os.stat(out)
    check((before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns),
          "the existing file is untouched")

    p = run([model, "--output", out, "--force", "--formats", "nvfp4"])
    check(p.returncode == 0, f"--force: rc {p.returncode}: {p.stderr}")
    check(os.stat(out).st_ino != before.st_ino, "--force replaced the file")
    check(temporaries(tmp) == [], "no temporary file left after --force")

    for bad, message in [(os.path.join(tmp, "missing", "a.h5"), "output folder does not exist"),
                         (tmp, "output is a folder"),
                         ("/proc/fp4lab-analyze-test.h5", "cannot create the analysis file")]:
        p = run([model, "--output", bad])
        check(p.returncode == 2, f"--output {bad}: rc {p.returncode}")
        check(message in p.stderr, f"--output {bad}: message {p.stderr!r}")
        check("Traceback" not in p.stderr and "terminate" not in p.stderr, "no crash")
    check(not os.path.exists("/proc/fp4lab-analyze-test.h5"), "nothing in /proc")

    missing_out = os.path.join(tmp, "none.h5")
    p = run([os.path.join(tmp, "no-model"), "--output", missing_out])
    check(p.returncode == 2 and "model folder does not exist" in p.stderr,
          f"missing model: rc {p.returncode}, {p.stderr!r}")
    check(not os.path.exists(missing_out), "missing model: no output file")

    p = run([model, "--force"])
    check(p.returncode == 2 and "--force without --output" in p.stderr, "--force alone")
    p = run([model, "--output", ""])
    check(p.returncode == 2, "--output ''")

    p = run([model, "--json", "--formats", "mxfp4"])
    check(p.returncode == 0, f"--json: rc {p.returncode}")
    j = json.loads(p.stdout)
    for layer in j["layers"]:
        for key in ("outliers_10rms", "blocks", "worst_block", "worst_block_mse"):
            check(key in layer, f"--json has {key}")
        check(layer["outliers_10rms"] == 1, "--json: the planted outlier")
        check(layer["blocks"] == 32 * 128 // 32, "--json: the block count")

    # SIGINT while the analysis runs: exit code 2, "cancelled", no file, no temporary file.
    smol = os.path.expanduser("~/.cache/fp4lab/models/smollm2-135m-instruct")
    if os.path.isfile(os.path.join(smol, "model.safetensors")):
        big = smol
    else:
        big = os.path.join(tmp, "big")
        write_big_model(big, 24, 1024, 1024)
    cancelled = os.path.join(tmp, "cancelled.h5")
    delay = 0.8
    for attempt in range(6):
        proc = subprocess.Popen([BIN, "analyze", big, "--output", cancelled, "--threads", "1"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=300)
        if proc.returncode == -signal.SIGINT:  # before the handlers (loading LibTorch): later
            delay *= 1.5
            continue
        if proc.returncode == 0:  # finished before the signal: sooner
            os.remove(cancelled)
            delay /= 2
            continue
        check(proc.returncode == 2, f"SIGINT: rc {proc.returncode}: {stderr!r}")
        check("cancelled" in stderr, f"SIGINT: message {stderr!r}")
        check(not os.path.exists(cancelled), "SIGINT: no output file")
        check(temporaries(tmp) == [], "SIGINT: no temporary file")
        break
    else:
        check(False, "the analysis always finished before SIGINT: cannot test cancelling")

if failures:
    print(f"{len(failures)} failure(s)", file=sys.stderr)
    sys.exit(1)
print("analyze CLI: all checks passed")
