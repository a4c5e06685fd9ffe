"""`fp4lab sensitivity` on a copy of the built-in tiny model with one layer made fragile: layer 1's
MLP rescaled by powers of two so that the model's function is unchanged (up_proj's even rows
times 1/64, down_proj's even columns times 64: exact in BF16) but every NVFP4/MXFP4 block of
down_proj holds columns 64x larger than their neighbours, whose codes then flush to zero. The
sensitivity ranking must put that down_proj first, and the plan keeping it in BF16 must have a
lower loss than the all-quantized plan. The plan's --emit-exclude, given to a real PTQ run
(`fp4lab train recipe.name=ptq`), must evaluate to the loss the plan reports. Bad input (no
model, no data, empty data, unknown format, an existing output) exits 2 with a message and
writes nothing; SIGINT cancels (exit 2, no output file). The HDF5 output is read with h5py (its
own HDF5 build: an independent reader), the JSON output as JSON; both must say the same as the
--json print. The venv's python (FP4LAB_PYTHON in CTest)."""
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

import h5py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_util  # noqa: E402

BIN = os.environ["FP4LAB_BIN"]
FRAGILE = "model.layers.1.mlp.down_proj"
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def run(args, **kw):
    return subprocess.run([BIN] + args, capture_output=True, text=True, timeout=300, **kw)


def read_h5(path):
    """The HDF5 sensitivity file (docs/log-schema.md, "Sensitivity files") as the JSON's dict."""
    def text(v):
        return v.decode() if isinstance(v, bytes) else str(v)

    def num(v):
        v = float(v[0] if hasattr(v, "__len__") else v)
        return None if v != v else v  # NaN is null in the JSON

    with h5py.File(path, "r") as f:
        a = f.attrs
        check(text(a["kind"]) == "fp4lab-sensitivity", "HDF5: kind attribute")
        fmt = text(a["format_name"])
        q = f["quant"][fmt]
        names = [text(n) for n in q["layers"][()]]
        check(list(q["step"][()]) == [0], "HDF5: /quant/<format> holds one row, step 0")
        loss, kl = q["loss"][()], q["kl"][()]
        check(loss.shape == (1, len(names)), f"HDF5: loss is [1, L], got {loss.shape}")
        sg = f["sensitivity"]
        shape, nbytes, rank = sg["layer_shape"][()], sg["layer_bytes"][()], sg["layer_rank"][()]
        layers = [{"name": n, "rows": int(shape[i][0]), "cols": int(shape[i][1]),
                   "bf16_bytes": int(nbytes[i][0]), "fp4_bytes": int(nbytes[i][1]),
                   "rank": int(rank[i]), "loss": num(loss[0][i]), "kl": num(kl[0][i]),
                   "delta_loss": num(q["delta_loss"][0][i])} for i, n in enumerate(names)]
        plans = [{"keep": int(k), "bytes": int(b), "loss": num(lo), "kl": num(k_),
                  "kept": [x for x in text(kept).split(",") if x], "exclude": text(ex)}
                 for k, b, lo, k_, kept, ex in zip(sg["plan_keep"][()], sg["plan_bytes"][()],
                                                  sg["plan_loss"][()], sg["plan_kl"][()],
                                                  sg["plan_kept"][()], sg["plan_exclude"][()])]
        return {"model": text(a["model"]), "format_name": fmt,
                "eval_batches": int(a["eval_batches"]), "sequences": int(a["sequences"]),
                "tokens": int(a["tokens"]), "chosen_keep": int(a["chosen_keep"]),
                "bf16": {"loss": num(a["bf16_loss"]), "bytes": int(a["bf16_bytes"])},
                "ptq": {"loss": num(a["ptq_loss"]), "kl": num(a["ptq_kl"]),
                        "bytes": int(a["ptq_bytes"])},
                "layers": layers, "plans": plans}


def same_content(h5, js, what):
    """The HDF5 file says what the JSON says (the HDF5 loss of a layer alone is float64 too)."""
    for key in ("model", "format_name", "eval_batches", "sequences", "tokens", "chosen_keep",
                "bf16", "ptq", "layers", "plans"):
        got, want = h5[key], js[key]
        if key == "layers":
            want = [{k: l[k] for k in h5["layers"][0]} for l in want]
        check(got == want, f"{what}: {key} differs: {str(got)[:200]} vs {str(want)[:200]}")


def bf16_values(raw):
    return [struct.unpack("<f", struct.pack("<I", h << 16))[0]
            for h in struct.unpack("<%dH" % (len(raw) // 2), raw)]


def make_fragile(src, dst):
    shutil.copytree(src, dst)
    path = os.path.join(dst, "model.safetensors")
    _, tensors = safetensors_util.read(path)
    up_name, down_name = "model.layers.1.mlp.up_proj.weight", FRAGILE + ".weight"
    dtype, (rows, cols), raw = tensors[up_name]
    assert dtype == "BF16", dtype
    up = bf16_values(raw)
    for j in range(0, rows, 2):  # even intermediate channels: 64x smaller
        for i in range(cols):
            up[j * cols + i] /= 64.0
    tensors[up_name] = ("BF16", [rows, cols], safetensors_util.bf16_bytes(up))
    dtype, (drows, dcols), raw = tensors[down_name]
    assert dcols == rows
    down = bf16_values(raw)
    for r in range(drows):
        for j in range(0, dcols, 2):  # ... and their down_proj columns 64x larger
            down[r * dcols + j] *= 64.0
    tensors[down_name] = ("BF16", [drows, dcols], safetensors_util.bf16_bytes(down))
    safetensors_util.write(path, tensors)


TEXTS = ["The quick brown fox jumps over the lazy dog.",
         "Quantization to four bits keeps the model small.",
         "What is 12 plus 30? The answer is 42.",
         "Paris is the capital of France.",
         "Seven times six is forty-two.",
         "Blocks of sixteen share one scale."]


def write_rows(path, count):
    with open(path, "w") as f:
        for i in range(count):
            t = TEXTS[i % len(TEXTS)]
            f.write(json.dumps({"messages": [{"role": "user", "content": f"Repeat: {t}"},
                                             {"role": "assistant", "content": t}]}) + "\n")


def eval_loss(model, rows):
    p = run(["eval", model, "--data", rows])
    check(p.returncode == 0, f"eval {model}: {p.stderr}")
    return float(p.stdout.split("cross-entropy ")[1].split()[0]) if p.returncode == 0 else None


with tempfile.TemporaryDirectory() as tmp:
    shipped = run(["base-model"]).stdout.strip()
    model = os.path.join(tmp, "fragile")
    make_fragile(shipped, model)
    rows = os.path.join(tmp, "rows.jsonl")
    write_rows(rows, 24)
    SETTINGS = ["data.seq_len=64", "train.batch_size=4", "quant.calib_batches=2"]

    # The rescaling leaves the BF16 model as it was.
    a, b = eval_loss(shipped, rows), eval_loss(model, rows)
    check(a is not None and b is not None and abs(a - b) <= 1e-3 * abs(a),
          f"the fragile model's BF16 loss {b} equals the original's {a}")

    # nvfp4 with KL and --keep 1 into an HDF5 file, the same printed as --json; mxfp4 without KL,
    # the default plan, into a JSON file, the table printed.
    for fmt, extra in (("nvfp4", ["--keep", "1", "--json"]), ("mxfp4", ["--no-kl"])):
        out = os.path.join(tmp, f"sens-{fmt}" + (".h5" if "--json" in extra else ".json"))
        emit = os.path.join(tmp, f"plan-{fmt}.txt")
        t0 = time.time()
        p = run(["sensitivity", model, "--data", rows, "--format", fmt, "--max-batches", "2",
                 "--emit-exclude", emit, "--threads", "1", "--output", out] + extra + SETTINGS)
        print(f"sensitivity {fmt} {' '.join(extra)}: {time.time() - t0:.1f} s")
        check(p.returncode == 0, f"sensitivity {fmt}: rc {p.returncode}: {p.stderr}")
        if p.returncode != 0:
            continue
        if "--json" in extra:
            check(open(out, "rb").read(8) == b"\x89HDF\r\n\x1a\n", "--output .h5 is HDF5")
            r = json.loads(p.stdout)
            same_content(read_h5(out), r, f"{fmt}: the HDF5 file and the --json print")
        else:
            check(FRAGILE in p.stdout and "keep" in p.stdout, "the table names layers and plans")
            r = json.load(open(out))
        check(r["eval_batches"] == 2 and r["sequences"] == 8, "--max-batches 2: 8 sequences")
        layers = {l["name"]: l for l in r["layers"]}
        check(len(layers) == 28, f"28 quantizable layers (4 blocks x 7), got {len(layers)}")
        check(layers[FRAGILE]["rank"] == 1,
              f"{fmt}: {FRAGILE} ranks first, got {layers[FRAGILE]['rank']}: "
              + str(sorted((l["rank"], l["name"]) for l in r["layers"])[:3]))
        others = [l["loss"] for n, l in layers.items() if n != FRAGILE]
        check(layers[FRAGILE]["loss"] > max(others), f"{fmt}: the fragile layer loses the most")
        plans = {p_["keep"]: p_ for p_ in r["plans"]}
        check(0 in plans and 1 in plans and 28 in plans, f"plans 0, 1 and N: {sorted(plans)}")
        check(plans[1]["kept"] == [FRAGILE], f"plan 1 keeps {FRAGILE}: {plans[1]['kept']}")
        check(plans[1]["loss"] < plans[0]["loss"],
              f"{fmt}: keeping it in BF16 lowers the loss: {plans[1]['loss']} < {plans[0]['loss']}")
        check(abs(plans[0]["loss"] - r["ptq"]["loss"]) < 1e-12, "plan 0 is the PTQ model")
        check(abs(plans[28]["loss"] - r["bf16"]["loss"]) < 1e-12, "plan N is the BF16 model")
        check(r["bf16"]["loss"] < r["ptq"]["loss"], "PTQ loses to BF16")
        if "--no-kl" in extra:
            check(all(pl["kl"] is None for pl in r["plans"]), "--no-kl: no KL")
        else:
            check(plans[1]["kl"] < plans[0]["kl"], "keeping it lowers the KL too")
            # The reference is the same model computed the same way: nothing quantized, KL 0.
            check(plans[28]["kl"] == 0, f"the BF16 plan's KL is 0, got {plans[28]['kl']}")
        # Sizes: each quantized weight as codes (n/2) and a scale byte per block.
        block = 16 if fmt == "nvfp4" else 32
        fl = layers[FRAGILE]
        n = fl["rows"] * fl["cols"]
        check(fl["bf16_bytes"] == 2 * n, "BF16 bytes")
        check(n // 2 + n // block <= fl["fp4_bytes"] <= n // 2 + n // block + 8,
              f"{fmt} bytes {fl['fp4_bytes']} for {n} weights")
        check(plans[1]["bytes"] - plans[0]["bytes"] == fl["bf16_bytes"] - fl["fp4_bytes"],
              "keeping a layer adds its BF16 bytes less its FP4 bytes")
        sizes = [plans[k]["bytes"] for k in sorted(plans)]
        check(sizes == sorted(sizes), "size grows with k")
        if "--keep" in extra:
            check(r["chosen_keep"] == 1, "--keep 1 is the chosen plan")
        else:  # the default: the smallest measured k within 1 % of the BF16 loss
            ok = [pl["keep"] for pl in r["plans"] if pl["loss"] <= r["bf16"]["loss"] * 1.01]
            check(r["chosen_keep"] == min(ok), f"default keep {r['chosen_keep']}, not {min(ok)}")
        chosen = plans[r["chosen_keep"]]
        # The emitted exclude, as a PTQ run's quant.exclude, evaluates to the plan's loss.
        exclude = open(emit).read().strip()
        check(exclude == chosen["exclude"] and "*lm_head*" in exclude and
              all(k in exclude.split(",") for k in chosen["kept"]), f"the exclude list: {exclude}")
        if fmt != "nvfp4":
            continue
        runs = os.path.join(tmp, "runs-" + fmt)
        q = run(["train", "--defaults", "recipe.name=ptq", "model.path=" + model,
                 "data.train=" + rows, "data.validation=" + rows, "data.validation_max=100000",
                 f"train.eval_batches={r['eval_batches']}", "quant.format=" + fmt,
                 "quant.activations=false", "quant.exclude=" + exclude, "train.threads=1",
                 "--output-dir", runs, "--events", "jsonl"] + SETTINGS)
        check(q.returncode == 0, f"ptq run with the plan: {q.stderr}")
        evals = [json.loads(l) for l in q.stdout.splitlines() if '"eval"' in l]
        check(len(evals) == 1 and abs(evals[0]["val_loss"] - chosen["loss"]) <= 1e-5,
              f"{fmt}: the PTQ run's val_loss {evals and evals[0]['val_loss']} is the plan's "
              f"{chosen['loss']}")

    # Bad input: exit 2, a message, no output file.
    out = os.path.join(tmp, "bad.json")
    empty = os.path.join(tmp, "empty.jsonl")
    open(empty, "w").close()
    for args, what in ((["/nonexistent", "--data", rows], "missing model"),
                       ([model, "--data", "/nonexistent.jsonl"], "missing data"),
                       ([model, "--data", empty], "empty data"),
                       ([model], "no --data"),
                       ([model, "--data", rows, "--format", "fp8"], "unknown format"),
                       ([model, "--data", rows, "model.path=x"], "a key the command sets"),
                       ([model, "--data", rows, "--keep", "99"], "--keep beyond N")):
        p = run(["sensitivity"] + args + ["--output", out, "--max-batches", "1"] + SETTINGS)
        check(p.returncode == 2 and "error" in p.stderr,
              f"{what}: rc {p.returncode}, stderr {p.stderr[-300:]}")
        check(not os.path.exists(out), f"{what}: no output file")
    for existing in (os.path.join(tmp, "sens-nvfp4.h5"), os.path.join(tmp, "sens-mxfp4.json")):
        before = open(existing, "rb").read() if os.path.exists(existing) else None
        p = run(["sensitivity", model, "--data", rows, "--output", existing])
        check(p.returncode == 2 and "exists" in p.stderr, f"{existing}: existing output needs --force")
        check(before is not None and open(existing, "rb").read() == before,
              f"{existing}: left as it was")

    # SIGINT cancels between evaluations: exit 2, no output file.
    out = os.path.join(tmp, "cancelled.json")
    proc = subprocess.Popen([BIN, "sensitivity", model, "--data", "builtin:sft", "--all-plans",
                             "--output", out, "--threads", "1", "--max-batches", "2",
                             "data.seq_len=128"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3)
    t0 = time.time()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    print(f"SIGINT: stopped {time.time() - t0:.1f} s after the signal")
    check(proc.returncode == 2 and "cancelled" in err, f"SIGINT: rc {proc.returncode}: {err}")
    check(not os.path.exists(out), "SIGINT: no output file")

if failures:
    print(f"{len(failures)} failure(s)", file=sys.stderr)
    sys.exit(1)
print("cli sensitivity: ok")
