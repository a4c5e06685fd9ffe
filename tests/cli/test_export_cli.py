#!/usr/bin/env python3
"""`fp4lab export` against the libraries that read its formats. Tiny QAT runs (builtin:tiny,
NVFP4 W4A4, NVFP4 W4A16, MXFP4 W4A4) are exported in every format, then:
- safetensors.safe_open reads every shard ({"format": "pt"} metadata);
- compressed_tensors' own QuantizationConfig parses the quantization_config;
- transformers loads the compressed-tensors exports on CPU and decompresses them: its decoded
  linear weights are compared with an independent numpy decode of the layout (MXFP4: bit for bit;
  NVFP4: compressed-tensors decodes as bf16(e2m1 * (scale / global_scale)) with the reciprocal
  global scale, so it is compared bit for bit with that formula and within 2 BF16 ulps of
  fp4lab's fp32 decode e2m1 * (scale * weight_scale_2));
- training sees what deployment loads (quant.shared_group_scale, on by default for NVFP4): the
  NVFP4 exports decoded independently in numpy (ModelOpt: E2M1 * (scale * weight_scale_2);
  compressed-tensors: its codes and scales are ModelOpt's bytes, its global scale 2688 / the
  group amax) into an fp32 Hugging Face folder give, under `fp4lab eval`, the same per-row loss
  bit for bit as `fp4lab eval` of the run's model/ (W4A16: the decoded folder plain; W4A4: with
  the run's quant_state.json, whose weight requantization of decoded weights is the identity);
  with quant.shared_group_scale=false (per-layer scales, the old behaviour) they differ;
- the loss of transformers' model on fixed rows is close to `fp4lab eval` of the run's model:
  MXFP4 W4A16 (exact weights, fp32): |dCE| < 1e-4 per row; NVFP4 W4A16: mean |dCE| < 0.05, per
  row 0.1 (transformers holds the decoded weights in BF16); W4A4 with
  compressed-tensors' own activation fake quantization, in BF16: NVFP4 mean < 0.15, row 0.25;
  MXFP4 mean < 0.2, row 0.3 (its activation scale rule differs from fp4lab's ceil:
  compressed_tensors.quantization.utils.mxfp_utils.generate_mx_scales takes
  floor(log2(amax rounded to a power of two once its significand reaches 1.75)) - 2, which
  clips blocks whose amax is in [6, 7) x 2^k; fp4lab's ceil never clips);
- fp4lab reads its exports back (decoded on load, fake-quantized with the file's scales):
  `fp4lab eval` of every NVFP4 and MXFP4 export folder gives the run's model's per-row loss bit
  for bit (compressed-tensors NVFP4: whenever its reciprocal global scales 2688 / amax name one
  scale amax / 2688, which about one amax in seven does not; then within 1e-5), and says
  "scored: ... decoded from a <format> export folder";
- the ModelOpt layout, field by field (modelopt itself is not installable here);
- a non-empty output folder is refused and left untouched; --exclude keeps layers in BF16;
- --calib-data: the built-in BF16 model exported as NVFP4 W4A4 with input scales calibrated on
  builtin:sft gives, under `fp4lab eval`, the loss of a PTQ run with the same calibration, bit
  for bit; weight-only layouts and models that carry their quantizers are refused.
Needs the venv with transformers, compressed-tensors, safetensors and torch (PYTHON in CTest)."""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from safetensors import safe_open

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_util import BIN, fail, run  # noqa: E402
COMMON = ["model.path=builtin:tiny", "data.train=builtin:sft", "data.seq_len=64",
          "train.batch_size=4", "train.eval_every=8", "train.eval_batches=1",
          "data.validation_max=8", "train.threads=1", "optim.lr=1e-3", "quant.calib_batches=1",
          "train.max_steps=6", "recipe.name=qat"]
RUNS = {
    "nvfp4-w4a4": ["quant.format=nvfp4"],
    "nvfp4-w4a16": ["quant.format=nvfp4", "quant.activations=false"],
    "mxfp4-w4a4": ["quant.format=mxfp4"],
    "mxfp4-w4a16": ["quant.format=mxfp4", "quant.activations=false"],
}
FORMATS = {"nvfp4": ["modelopt-nvfp4", "compressed-tensors-nvfp4", "bf16"],
           "mxfp4": ["compressed-tensors-mxfp4", "bf16"]}
TEXTS = ["The quick brown fox jumps over the lazy dog.",
         "Quantization to four bits keeps the model small.",
         "What is 12 plus 30? The answer is 42."]
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float32)




def tensors(folder):
    """Every tensor of an export, through safe_open, and the shards' metadata."""
    out = {}
    for f in sorted(os.listdir(folder)):
        if not f.endswith(".safetensors"):
            continue
        with safe_open(os.path.join(folder, f), "pt") as st:
            if st.metadata() != {"format": "pt"}:
                fail(f"{folder}/{f}: metadata {st.metadata()}")
            for k in st.keys():
                out[k] = st.get_tensor(k)
    return out


def unpack(packed):
    p = packed.numpy()
    codes = np.stack([p & 0xF, p >> 4], axis=-1).reshape(p.shape[0], p.shape[1] * 2)
    return E2M1[codes]


def decode_nvfp4(packed, scale, s2):
    """fp4lab's decode: E2M1 * (float(sf) * s2), in fp32, in that order."""
    sf = scale.float().numpy().astype(np.float32)
    block = np.repeat((sf * np.float32(s2)).astype(np.float32), 16, axis=1)
    return (unpack(packed) * block).astype(np.float32)


def decode_mxfp4(packed, scale):
    e = scale.numpy().astype(np.int32) - 127
    block = np.repeat(np.ldexp(np.float32(1), e).astype(np.float32), 32, axis=1)
    return (unpack(packed) * block).astype(np.float32)


def bf16(x):
    return torch.from_numpy(np.ascontiguousarray(x)).to(torch.bfloat16).float().numpy()


def eval_rows(tmp):
    path = os.path.join(tmp, "rows.jsonl")
    with open(path, "w") as f:
        for t in TEXTS:
            f.write(json.dumps({"input_ids": list(t.encode())}) + "\n")
    return path


def fp4lab_loss(model_dir, rows):
    out = run(["eval", model_dir, "--data", rows, "--per-example"]).stdout
    return [json.loads(line)["loss"] for line in out.strip().split("\n")]


def run_loss_bf16(model_dir, rows):
    out = run(["eval", model_dir, "--data", rows, "--per-example", "--bf16"]).stdout
    return [json.loads(line)["loss"] for line in out.strip().split("\n")]


def hf_loss(model):
    losses = []
    with torch.no_grad():
        for t in TEXTS:
            ids = torch.tensor([list(t.encode())])
            logits = model(ids).logits.float()[0, :-1]
            losses.append(torch.nn.functional.cross_entropy(logits, ids[0, 1:]).item())
    return losses


def check_modelopt(folder, run_dir, w4a4):
    hf = json.load(open(os.path.join(folder, "hf_quant_config.json")))
    algo = "NVFP4" if w4a4 else "W4A16_NVFP4"
    if hf["producer"]["name"] != "fp4lab" or "version" not in hf["producer"]:
        fail(f"hf_quant_config producer: {hf}")
    q = hf["quantization"]
    if (q["quant_algo"] != algo or q["group_size"] != 16 or q["kv_cache_quant_algo"] is not None
            or not q["exclude_modules"] or "lm_head" not in q["exclude_modules"]):
        fail(f"hf_quant_config quantization: {q}")
    qc = json.load(open(os.path.join(folder, "config.json")))["quantization_config"]
    if qc["quant_method"] != "modelopt" or qc["quant_algo"] != algo:
        fail(f"config.json quantization_config: {qc}")
    state = json.load(open(os.path.join(run_dir, "model", "quant_state.json")))["layers"]
    t = tensors(folder)
    for layer, amax in state.items():
        w, s, s2 = t[layer + ".weight"], t[layer + ".weight_scale"], t[layer + ".weight_scale_2"]
        if w.dtype != torch.uint8 or s.dtype != torch.float8_e4m3fn or s2.dtype != torch.float32:
            fail(f"{layer}: dtypes {w.dtype} {s.dtype} {s2.dtype}")
        if s2.shape != () or s.shape[1] * 8 != w.shape[1] or s.shape[0] != w.shape[0]:
            fail(f"{layer}: shapes {w.shape} {s.shape} {s2.shape}")
        if (layer + ".input_scale" in t) != w4a4:
            fail(f"{layer}: input_scale present: {layer + '.input_scale' in t}")
        if w4a4:
            want = np.float32(amax["input_amax"]) / np.float32(2688)
            if t[layer + ".input_scale"].item() != want:
                fail(f"{layer}: input_scale {t[layer + '.input_scale'].item()} != {want}")
    # q/k/v and gate/up share weight_scale_2 = the group's largest calibrated amax / 2688.
    for prefix in {k.rsplit(".", 2)[0] for k in state}:
        for group in (["q_proj", "k_proj", "v_proj"], ["gate_proj", "up_proj"]):
            names = [f"{prefix}.{g}" for g in group if f"{prefix}.{g}" in state]
            if not names:
                continue
            want = np.float32(max(state[n]["weight_amax"] for n in names)) / np.float32(2688)
            for n in names:
                if t[n + ".weight_scale_2"].item() != want:
                    fail(f"{n}: weight_scale_2 {t[n + '.weight_scale_2'].item()} != {want}")
    base = tensors(os.path.join(run_dir, "model"))
    for name in ("model.embed_tokens.weight", "model.norm.weight",
                 "model.layers.0.input_layernorm.weight"):
        if t[name].dtype != base[name].dtype or not torch.equal(t[name], base[name]):
            fail(f"{name} is not copied unchanged")
    return t


def check_compressed(folder, rows, run_dir, fmt, w4a4, modelopt_tensors):
    from compressed_tensors.quantization import QuantizationConfig
    from transformers import AutoModelForCausalLM
    from transformers.utils.quantization_config import CompressedTensorsConfig
    qc = json.load(open(os.path.join(folder, "config.json")))["quantization_config"]
    parsed = QuantizationConfig.model_validate(qc)
    want_format = "nvfp4-pack-quantized" if "nvfp4" in fmt else "mxfp4-pack-quantized"
    if parsed.format != want_format or "lm_head" not in parsed.ignore:
        fail(f"compressed_tensors parsed {parsed}")
    t = tensors(folder)
    model = AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float32, quantization_config=CompressedTensorsConfig(dequantize=True))
    state = json.load(open(os.path.join(run_dir, "model", "quant_state.json")))["layers"]
    worst_ulp = 0
    for layer in state:
        got = model.get_submodule(layer).weight.detach().float().numpy()
        packed, scale = t[layer + ".weight_packed"], t[layer + ".weight_scale"]
        if "nvfp4" in fmt:
            mo = modelopt_tensors
            ours = decode_nvfp4(mo[layer + ".weight"], mo[layer + ".weight_scale"],
                                mo[layer + ".weight_scale_2"].item())
            if not (torch.equal(packed, mo[layer + ".weight"])
                    and torch.equal(scale.view(torch.uint8), mo[layer + ".weight_scale"].view(
                        torch.uint8))):
                fail(f"{layer}: compressed-tensors and ModelOpt codes/scales differ")
            # compressed-tensors' formula: bf16(e2m1 * (float(sf) / global)), fp32 arithmetic.
            g = t[layer + ".weight_global_scale"]
            block = (scale.float() / g).repeat_interleave(16, dim=1)
            theirs = (torch.from_numpy(unpack(packed)) * block).to(torch.bfloat16).float().numpy()
            if not np.array_equal(got, theirs):
                fail(f"{layer}: transformers' decode is not compressed-tensors' BF16 formula")
            ulp = np.abs(got - bf16(ours)) / np.maximum(np.abs(bf16(ours)), 1e-30) * 128
            worst_ulp = max(worst_ulp, float(ulp.max()))
            if ulp.max() > 2.0:
                fail(f"{layer}: transformers' decode is {ulp.max()} BF16 ulps from fp4lab's")
        else:
            ours = decode_mxfp4(packed, scale)
            if not np.array_equal(got.view(np.uint32), ours.view(np.uint32)):
                fail(f"{layer}: transformers' MXFP4 decode differs from fp4lab's")
    fp4 = fp4lab_loss(os.path.join(run_dir, "model"), rows)
    if w4a4:
        # Activations fake-quantized by compressed-tensors itself: its compressed (default)
        # mode, which runs in BF16 on CPU (fp4lab's model is fp32), so FP4 codes of the
        # activations flip here and there: a loose tolerance.
        # compressed-tensors' MXFP4 activation scales are not fp4lab's ceil rule (its E8M0
        # scale is floor(log2) of amax / 6): looser still for MXFP4 W4A4.
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16)
        # NVFP4: the weights are the run's bit for bit (check_decoded_eval), so the gap is only
        # the activation quantization; measured with shared tensor scales: 0.10 mean, 0.16 row.
        row_tol, mean_tol = (0.25, 0.15) if "nvfp4" in fmt else (0.3, 0.2)
    elif "mxfp4" in fmt:
        # MXFP4 weight-only: no tensor scale, the decode is exact in fp32 and transformers' is
        # bit-identical: the export is the model fp4lab evaluates.
        row_tol, mean_tol = 1e-4, 1e-4
    else:
        # transformers holds the decoded weights rounded to BF16 (the fp32 decode is checked bit
        # for bit against fp4lab eval in check_decoded_eval).
        row_tol, mean_tol = 0.1, 0.05
    hf = hf_loss(model)
    diff = max(abs(a - b) for a, b in zip(fp4, hf))
    mean_diff = abs(np.mean(fp4) - np.mean(hf))
    print(f"  {fmt}: transformers CE {np.mean(hf):.5f} vs fp4lab eval {np.mean(fp4):.5f} "
          f"(|d| mean {mean_diff:.2e}, per row max {diff:.2e}; tolerance {mean_tol}, {row_tol}); "
          f"NVFP4 decode within {worst_ulp:.2f} BF16 ulp of fp4lab's")
    if diff > row_tol or mean_diff > mean_tol:
        fail(f"{fmt}: CE differs by {mean_diff} mean, {diff} per row: {fp4} vs {hf}")


def fused_group(module):
    """fp4lab/export/fused_groups.h: the layers the inference engines fuse into one GEMM."""
    parent, _, leaf = module.rpartition(".")
    for group in (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"), ("w1", "w3")):
        if leaf in group:
            return parent + "/" + group[0]
    return None


def decoded_folder(run_dir, out, modelopt, ct, with_state):
    """An fp32 Hugging Face folder with the export's quantized weights decoded in numpy (from the
    ModelOpt layout; the compressed-tensors layout must hold the same codes and scales and the
    reciprocal of the same tensor scale), every other tensor the run's model's."""
    from safetensors.numpy import save_file
    model_dir = os.path.join(run_dir, "model")
    state = json.load(open(os.path.join(model_dir, "quant_state.json")))
    base = tensors(model_dir)
    out_t = {}
    for name, value in base.items():
        out_t[name] = value.float().numpy() if value.dtype == torch.bfloat16 else value.numpy()
    for layer, amax in state["layers"].items():
        w, sc, s2 = (modelopt[layer + ".weight"], modelopt[layer + ".weight_scale"],
                     modelopt[layer + ".weight_scale_2"])
        if not (torch.equal(ct[layer + ".weight_packed"], w) and torch.equal(
                ct[layer + ".weight_scale"].view(torch.uint8), sc.view(torch.uint8))):
            fail(f"{layer}: compressed-tensors and ModelOpt codes/scales differ")
        group = [n for n in state["layers"] if fused_group(n) == fused_group(layer)] \
            if fused_group(layer) else [layer]
        amax = np.float32(max(state["layers"][n]["weight_amax"] for n in group))
        g = ct[layer + ".weight_global_scale"]
        if (s2.item() != np.float32(amax / np.float32(2688))
                or g.item() != np.float32(np.float32(2688) / amax)):
            fail(f"{layer}: tensor scales {s2.item()}, {g.item()} are not from the group amax")
        out_t[layer + ".weight"] = decode_nvfp4(w, sc, s2.item())
    os.makedirs(out)
    save_file({k: np.ascontiguousarray(v) for k, v in out_t.items()},
              os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    for f in os.listdir(model_dir):
        if f.endswith(".json") and f != "quant_state.json" and "safetensors" not in f:
            with open(os.path.join(model_dir, f)) as src, open(os.path.join(out, f), "w") as dst:
                dst.write(src.read())
    if with_state:
        with open(os.path.join(out, "quant_state.json"), "w") as dst:
            json.dump(state, dst)
    return out


def check_decoded_eval(tmp, rows, run_dir, name, modelopt, ct, shared=True):
    """`fp4lab eval` of the run's model and of the export decoded: bit for bit when the run
    trained with the shared tensor scales, different with per-layer ones."""
    w4a4 = name.endswith("w4a4")
    folder = decoded_folder(run_dir, os.path.join(tmp, f"{name}-decoded"), modelopt, ct,
                            with_state=w4a4)
    want = fp4lab_loss(os.path.join(run_dir, "model"), rows)
    got = fp4lab_loss(folder, rows)
    same = [np.float32(a).view(np.uint32) == np.float32(b).view(np.uint32) and a == b
            for a, b in zip(want, got)]
    print(f"  {name}: fp4lab eval of the run's model {want} vs of the decoded export {got}")
    if shared and not all(same):
        fail(f"{name}: the decoded export does not evaluate to the run's loss: {want} vs {got}")
    if not shared and all(same):
        fail(f"{name}: per-layer tensor scales evaluate like the export's shared ones")


def reciprocal_ambiguous(g):
    """Whether two fp32 amaxes give compressed-tensors' 2688 / amax == g but differ in amax / 2688
    (the scale fp4lab decodes with): the file cannot say which one it was."""
    g, d = np.float32(g), np.float32(2688)
    a = np.float32(2688.0 / float(g))
    for _ in range(16):
        a = np.nextafter(a, np.float32(0))
    scales = set()
    for _ in range(33):
        if d / a == g:
            scales.add(float(a / d))
        a = np.nextafter(a, np.float32(np.inf))
    return len(scales) > 1


def check_export_eval(rows, run_dir, name, folder, fmt):
    """`fp4lab eval` of the export folder itself (decoded on load) against the run's model."""
    want = fp4lab_loss(os.path.join(run_dir, "model"), rows)
    got = fp4lab_loss(folder, rows)
    same = all(np.float32(a).view(np.uint32) == np.float32(b).view(np.uint32) and a == b
               for a, b in zip(want, got))
    ambiguous = 0
    if fmt == "compressed-tensors-nvfp4":
        t = tensors(folder)
        ambiguous = sum(reciprocal_ambiguous(v.item()) for k, v in t.items()
                        if k.endswith("global_scale"))
    print(f"  {name} -> {fmt}: fp4lab eval of the export folder {got} vs of the run's model "
          f"{want} ({'bit for bit' if same else 'differ'}; {ambiguous} ambiguous global scales)")
    if not same and (ambiguous == 0 or max(abs(a - b) for a, b in zip(want, got)) > 1e-5):
        fail(f"{name} -> {fmt}: the export folder does not evaluate to the run's loss")
    scored = run(["eval", folder, "--data", rows]).stdout
    if f"decoded from a {fmt} export folder" not in scored or "fake-quantized" not in scored:
        fail(f"{fmt}: eval's scored line does not say it is an export folder: {scored}")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        rows = eval_rows(tmp)
        for name, recipe in RUNS.items():
            run_dir = os.path.join(tmp, "run-" + name)
            run(["train", "--defaults"] + COMMON + recipe + ["--output-dir", run_dir])
            w4a4 = name.endswith("w4a4")
            mo = None
            for fmt in FORMATS[name.split("-")[0]]:
                out = os.path.join(tmp, f"{name}-{fmt}")
                p = run(["export", os.path.join(run_dir, "model"), "--format", fmt,
                         "--output-dir", out])
                if "bit for bit" not in p.stdout and fmt != "bf16":
                    fail(f"export summary: {p.stdout}")
                tensors(out)
                if fmt != "bf16":
                    check_export_eval(rows, run_dir, name, out, fmt)
                if fmt == "modelopt-nvfp4":
                    mo = check_modelopt(out, run_dir, w4a4)
                elif fmt.startswith("compressed-tensors"):
                    if fmt == "compressed-tensors-nvfp4":
                        check_decoded_eval(tmp, rows, run_dir, name, mo, tensors(out))
                    check_compressed(out, rows, run_dir, fmt, w4a4, mo)
                else:
                    t = tensors(out)
                    if any(v.dtype != torch.bfloat16 for v in t.values()):
                        fail("the bf16 export holds non-BF16 tensors")
                print(f"{name} -> {fmt}: ok")

        # The old behaviour, per-layer tensor scales: the export (shared scales) is not the
        # model the run evaluated.
        run_dir = os.path.join(tmp, "run-nvfp4-per-layer")
        run(["train", "--defaults"] + COMMON + RUNS["nvfp4-w4a16"] +
            ["quant.shared_group_scale=false", "--output-dir", run_dir])
        if json.load(open(os.path.join(run_dir, "model", "quant_state.json")))["options"][
                "shared_group_scale"] is not False:
            fail("quant_state.json does not record shared_group_scale=false")
        exp = {}
        for fmt in ("modelopt-nvfp4", "compressed-tensors-nvfp4"):
            exp[fmt] = os.path.join(tmp, f"per-layer-{fmt}")
            run(["export", os.path.join(run_dir, "model"), "--format", fmt, "--output-dir",
                 exp[fmt]])
        check_decoded_eval(tmp, rows, run_dir, "nvfp4-per-layer-w4a16",
                           tensors(exp["modelopt-nvfp4"]),
                           tensors(exp["compressed-tensors-nvfp4"]), shared=False)

        # A non-empty OUT is refused and left untouched; --force replaces it.
        model = os.path.join(tmp, "run-nvfp4-w4a16", "model")
        out = os.path.join(tmp, "busy")
        os.makedirs(out)
        with open(os.path.join(out, "mine.txt"), "w") as f:
            f.write("keep")
        p = run(["export", model, "--format", "bf16", "--output-dir", out], expect=2)
        if "not empty" not in p.stderr or os.listdir(out) != ["mine.txt"]:
            fail(f"non-empty OUT: {p.stderr} {os.listdir(out)}")
        run(["export", model, "--format", "bf16", "--output-dir", out, "--force"])
        if "mine.txt" in os.listdir(out) or "model.safetensors" not in os.listdir(out):
            fail(f"--force: {os.listdir(out)}")
        # --exclude keeps layers in BF16 and lists them; --max-shard-size shards.
        out = os.path.join(tmp, "excluded")
        run(["export", model, "--format", "modelopt-nvfp4", "--output-dir", out,
             "--exclude", "*.0.mlp.*", "--exclude", "model.layers.3.self_attn.o_proj",
             "--max-shard-size", "500KB"])
        t = tensors(out)
        hf = json.load(open(os.path.join(out, "hf_quant_config.json")))
        excl = hf["quantization"]["exclude_modules"]
        for layer in ("model.layers.0.mlp.down_proj", "model.layers.3.self_attn.o_proj"):
            if t[layer + ".weight"].dtype == torch.uint8 or layer + ".weight_scale" in t:
                fail(f"--exclude: {layer} is quantized")
            if layer not in excl:
                fail(f"--exclude: {layer} not in exclude_modules {excl}")
        if t["model.layers.1.mlp.down_proj.weight"].dtype != torch.uint8:
            fail("--exclude excluded too much")
        index = json.load(open(os.path.join(out, "model.safetensors.index.json")))
        if set(index["weight_map"]) != set(t):
            fail("the index does not name every tensor")
        p = run(["export", model, "--format", "gpt-oss-mxfp4", "--output-dir",
                 os.path.join(tmp, "gptoss")], expect=2)
        if "gpt-oss" not in p.stderr or os.path.exists(os.path.join(tmp, "gptoss")):
            fail("gpt-oss-mxfp4: " + p.stderr)

        # --calib-data: a BF16 folder exported W4A4 with input scales calibrated on the rows is,
        # bit for bit in the loss, the PTQ run of the same calibration.
        base = run(["base-model"]).stdout.strip().splitlines()[-1]
        out = os.path.join(tmp, "calibrated")
        p = run(["export", base, "--format", "modelopt-nvfp4", "--output-dir", out,
                 "--calib-data", "builtin:sft", "--calib-batches", "2"])
        if "calibrated on    builtin:sft" not in p.stdout or "(NVFP4)" not in p.stdout:
            fail(f"--calib-data summary: {p.stdout}")
        hf = json.load(open(os.path.join(out, "hf_quant_config.json")))["quantization"]
        t = tensors(out)
        scales = [k for k in t if k.endswith(".weight_scale_2")]
        if hf["quant_algo"] != "NVFP4" or not scales or any(
                k.replace("weight_scale_2", "input_scale") not in t for k in scales):
            fail(f"--calib-data: quant_algo {hf['quant_algo']}, input scales missing")
        if [f for f in os.listdir(tmp) if ".calib-" in f]:
            fail("--calib-data left its calibration folder behind")
        ptq = os.path.join(tmp, "run-ptq")
        run(["train", "--defaults", f"model.path={base}", "data.train=builtin:sft",
             "recipe.name=ptq", "quant.format=nvfp4", "quant.calib_batches=2",
             "train.eval_batches=1", "data.validation_max=8", "--output-dir", ptq])
        want, got = fp4lab_loss(os.path.join(ptq, "model"), rows), fp4lab_loss(out, rows)
        if want != got:
            fail(f"--calib-data export {got} is not the PTQ run's model {want}")
        for args, words in [(["--format", "bf16"], "weight-only"),
                            (["--format", "gpt-oss-mxfp4"], "weight-only")]:
            p = run(["export", base, "--output-dir", os.path.join(tmp, "refused"),
                     "--calib-data", "builtin:sft"] + args, expect=2)
            if words not in p.stderr or os.path.exists(os.path.join(tmp, "refused")):
                fail(f"--calib-data {args}: {p.stderr}")
        p = run(["export", model, "--format", "modelopt-nvfp4", "--output-dir",
                 os.path.join(tmp, "refused"), "--calib-data", "builtin:sft"], expect=2)
        if "quant_state.json" not in p.stderr:
            fail(f"--calib-data on a run's model: {p.stderr}")
        print(f"--calib-data: {len(scales)} input scales; the loss is the PTQ run's, bit for bit")

        # Another tool's NVFP4 checkpoint (no fp4lab producer) whose codes no fp4lab quantizer
        # reproduces (one block's codes all set to 0.5): it loads as its decoded weights, without
        # fake quantizers, and eval says so.
        src = os.path.join(tmp, "nvfp4-w4a16-modelopt-nvfp4")
        foreign = os.path.join(tmp, "foreign-nvfp4")
        os.makedirs(foreign)
        t = {k: v.clone() for k, v in tensors(src).items()}
        layer = "model.layers.0.mlp.down_proj"
        codes = t[layer + ".weight"]
        codes[0, :8] = 0x11  # 16 elements of +0.5 (E2M1 code 1, two a byte)
        from safetensors.torch import save_file
        save_file(t, os.path.join(foreign, "model.safetensors"), metadata={"format": "pt"})
        config = json.load(open(os.path.join(src, "config.json")))
        del config["quantization_config"]["producer"]
        json.dump(config, open(os.path.join(foreign, "config.json"), "w"))
        scored = run(["eval", foreign, "--data", rows]).stdout
        if "decoded weights of a modelopt-nvfp4 folder, without fake quantizers" not in scored:
            fail(f"a foreign NVFP4 checkpoint: {scored}")
        if fp4lab_loss(foreign, rows) != run_loss_bf16(foreign, rows):
            fail("a foreign NVFP4 checkpoint is not scored as its decoded weights")
        with open(os.path.join(foreign, "config.json"), "w") as f:  # fp4lab's: a bug, refused
            json.dump(json.load(open(os.path.join(src, "config.json"))), f)
        p = run(["eval", foreign, "--data", rows], expect=2)
        if "please report" not in p.stderr:
            fail(f"fp4lab's own export that does not re-quantize: {p.stderr}")
    print("export: all checks passed")


main()
