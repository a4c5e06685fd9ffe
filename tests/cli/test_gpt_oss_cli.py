#!/usr/bin/env python3
"""gpt-oss (GptOssForCausalLM) in fp4lab against Hugging Face transformers, on a tiny random model
that transformers itself builds (sinks, alternating sliding/full layers, YaRN, the clamped SwiGLU
of the experts, biases everywhere), with weights of order one so that every ingredient matters:
- `fp4lab eval` of transformers' fp32 folder: the per-row losses equal transformers' within
  2e-6 relative (fp32 both, eager attention);
- SFT, QAT (MXFP4 W4A16, the experts quantized: quant.include=auto) and QAD (NVFP4) run on it,
  and SFT runs from the MXFP4 export upcast to BF16 (model.bf16_weights), the seeds' pipeline;
  the SFT model fp4lab writes loads in transformers with the same per-row losses (fp4lab's
  config.json and tensor names are transformers');
- `fp4lab export --format gpt-oss-mxfp4` of the QAT model: the layout (`_blocks` U8
  [E, rows, in/32, 16], `_scales` U8 [E, rows, in/32], biases kept, quantization_config
  {quant_method: mxfp4, modules_to_not_convert}); transformers loads it with
  Mxfp4Config(dequantize=True) and its dequantized experts equal an independent numpy decode of
  the blocks bit for bit; transformers' per-row losses on the export equal `fp4lab eval` of the
  export within 2e-6; and `fp4lab eval` of the export equals `fp4lab eval` of the run's model bit
  for bit (training sees what deployment loads);
- a gpt-oss MXFP4 checkpoint from another tool (block scales fp4lab's rule would not choose, no
  fp4lab producer, as OpenAI's) loads directly: `fp4lab eval` equals transformers' within 2e-6;
- `fp4lab import` of the export: a BF16 folder whose tensors are the BF16 rounding of
  transformers' dequantization, bit for bit; `fp4lab analyze` of the export runs (MXFP4: exact);
- refusals (exit 2, nothing written): W4A4 runs (the layout is weight-only), the run's quantized
  attention, NVFP4/compressed-tensors layouts for gpt-oss, gpt-oss-mxfp4 for a llama model.
Needs the venv with transformers (5.x, which has GptOss) and torch; exits 77 (skipped) without."""
import json
import os
import random
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_util import fail, run  # noqa: E402

try:
    import numpy as np
    import torch
    import transformers
    from safetensors import safe_open
    from transformers import GptOssConfig, GptOssForCausalLM, Mxfp4Config
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

VOCAB = 300
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float32)


def make_model(folder):
    torch.manual_seed(0)
    config = GptOssConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=64, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=4,
        num_experts_per_tok=2, sliding_window=8,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        rope_parameters={"rope_type": "yarn", "rope_theta": 1000.0, "factor": 4.0,
                         "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                         "original_max_position_embeddings": 64},
        max_position_embeddings=256, swiglu_limit=2.0, bos_token_id=1, eos_token_id=2)
    model = GptOssForCausalLM(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.3 * torch.randn_like(p))
            elif name.endswith("bias") or name.endswith("sinks"):
                p.copy_(0.5 * torch.randn_like(p))
            elif "embed" in name:
                p.copy_(torch.randn_like(p))
            else:  # fan-in: dim -2 of the [E, in, out] experts, dim -1 of [out, in] linears
                p.copy_(torch.randn_like(p) / p.shape[-2 if p.dim() == 3 else -1] ** 0.5)
    model.float().save_pretrained(folder)


def write_rows(path, count, lengths, seed):
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(count):
            n = lengths[i % len(lengths)]
            f.write(json.dumps({"input_ids": [rng.randrange(VOCAB) for _ in range(n)]}) + "\n")
    return path


def fp4lab_losses(folder, rows):
    out = run(["eval", folder, "--data", rows, "--per-example"]).stdout
    return [json.loads(line)["loss"] for line in out.strip().split("\n")]


def hf_losses(model, rows):
    losses = []
    with torch.no_grad():
        for line in open(rows):
            ids = torch.tensor([json.loads(line)["input_ids"]])
            logits = model(ids).logits.float()[0, :-1]
            losses.append(torch.nn.functional.cross_entropy(logits, ids[0, 1:]).item())
    return losses


def close(ours, theirs, rel, what):
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if not abs(a - b) <= rel * abs(b):
            fail(f"{what}: row {i}: fp4lab {a!r}, transformers {b!r}")
    if len(ours) != len(theirs):
        fail(f"{what}: {len(ours)} rows scored, expected {len(theirs)}")
    return max(abs(a - b) for a, b in zip(ours, theirs))


def train(folder, out, rows, recipe):
    run(["train", "--defaults", f"model.path={folder}", f"data.train={rows}", "data.seq_len=32",
         "train.batch_size=4", "train.eval_every=2", "train.eval_batches=1",
         "data.validation_max=8", "train.threads=1", "optim.lr=1e-3", "quant.calib_batches=1",
         "train.max_steps=2", "--output-dir", out] + recipe)
    return os.path.join(out, "model")


def load_hf(folder, **kwargs):
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                              **kwargs)
    model.eval()
    return model


def decode_blocks(blocks, scales):
    """Hugging Face's gpt-oss MXFP4 layout, decoded from its definition: two E2M1 codes a byte
    (even element low), times 2^(scale - 127), rows [E, out, in] back to [E, in, out]."""
    lo, hi = E2M1[blocks & 0x0F], E2M1[blocks >> 4]
    values = np.stack([lo, hi], axis=-1).reshape(*blocks.shape[:-1], 32)
    values = values * np.exp2(scales.astype(np.float32) - 127)[..., None]
    e, rows, groups, _ = values.shape
    return values.reshape(e, rows, groups * 32).transpose(0, 2, 1)


def check_layout(folder, run_model):
    config = json.load(open(os.path.join(folder, "config.json")))
    q = config.get("quantization_config", {})
    if q.get("quant_method") != "mxfp4":
        fail(f"quantization_config: {q}")
    for m in ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
              "lm_head"]:
        if m not in q.get("modules_to_not_convert", []):
            fail(f"modules_to_not_convert lacks {m}: {q}")
    decoded = {}
    with safe_open(os.path.join(folder, "model.safetensors"), "pt") as f, \
            safe_open(os.path.join(run_model, "model.safetensors"), "pt") as r:
        names = set(f.keys())
        for layer in range(3):
            for proj, rows in [("gate_up_proj", 128), ("down_proj", 64)]:
                base = f"model.layers.{layer}.mlp.experts.{proj}"
                if base in names:
                    fail(f"{base} is still there in BF16")
                blocks, scales = f.get_tensor(base + "_blocks"), f.get_tensor(base + "_scales")
                if (blocks.dtype != torch.uint8 or list(blocks.shape) != [4, rows, 2, 16]
                        or scales.dtype != torch.uint8 or list(scales.shape) != [4, rows, 2]):
                    fail(f"{base}: blocks {blocks.dtype} {list(blocks.shape)}, scales "
                         f"{scales.dtype} {list(scales.shape)}")
                decoded[base] = decode_blocks(blocks.numpy(), scales.numpy())
                bias = base + "_bias"
                if not torch.equal(f.get_tensor(bias), r.get_tensor(bias)):
                    fail(f"{bias} differs from the run's")
        for name in r.keys():  # every tensor not quantized is the run's, byte for byte
            if ".mlp.experts." in name and not name.endswith("_bias"):
                continue
            if not torch.equal(f.get_tensor(name), r.get_tensor(name)):
                fail(f"{name} differs from the run's model")
    return decoded


def write_foreign_checkpoint(ex, out):
    os.makedirs(out)
    tensors = {}
    with safe_open(os.path.join(ex, "model.safetensors"), "pt") as f:
        for name in f.keys():
            t = f.get_tensor(name)
            if name.endswith("_blocks"):
                b = t.numpy()
                lo, hi = b & 0x0F, b >> 4
                half = lambda c: (c & 0x8) | ((c & 0x7) >> 1)  # noqa: E731 (magnitude index / 2)
                t = torch.from_numpy((half(lo) | (half(hi) << 4)).astype(np.uint8))
            elif name.endswith("_scales"):
                t = t + 1
            tensors[name] = t.contiguous()
    from safetensors.torch import save_file
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    config = json.load(open(os.path.join(ex, "config.json")))
    del config["quantization_config"]["producer"]
    json.dump(config, open(os.path.join(out, "config.json"), "w"))


def expect_refusal(args, out, words):
    p = run(args + ["--output-dir", out], expect=2)
    if words not in p.stderr:
        fail(f"{' '.join(args)}: expected '{words}' in: {p.stderr}")
    if os.path.exists(out) and os.listdir(out):
        fail(f"{out} was written by a refused command")


def main():
    with tempfile.TemporaryDirectory(prefix="fp4lab-gpt-oss-") as tmp:
        hf = os.path.join(tmp, "hf")
        make_model(hf)
        rows = write_rows(os.path.join(tmp, "rows.jsonl"), 5, [5, 12, 30, 17, 9], 1)
        data = write_rows(os.path.join(tmp, "train.jsonl"), 48, [40], 2)

        # 1. The architecture: fp4lab's forward is transformers'.
        theirs = hf_losses(load_hf(hf), rows)
        d_eval = close(fp4lab_losses(hf, rows), theirs, 2e-6, "eval of transformers' model")

        # 2. The recipes run; what fp4lab saves, transformers loads as the same model.
        sft = train(hf, os.path.join(tmp, "sft"), data, ["recipe.name=sft"])
        d_sft = close(fp4lab_losses(sft, rows), hf_losses(load_hf(sft), rows), 2e-6,
                      "the SFT model fp4lab saved, in transformers")
        qat = train(hf, os.path.join(tmp, "qat"), data,
                    ["recipe.name=qat", "quant.format=mxfp4", "quant.activations=false"])
        state = json.load(open(os.path.join(qat, "quant_state.json")))["layers"]
        if sorted(state) != sorted(f"model.layers.{i}.mlp.experts.{p}" for i in range(3)
                                   for p in ["gate_up_proj", "down_proj"]):
            fail(f"quant.include=auto on gpt-oss quantized {sorted(state)}, not its experts")
        train(hf, os.path.join(tmp, "qad"), data, ["recipe.name=qad", "quant.format=nvfp4"])

        # 3. gpt-oss-mxfp4: the layout, transformers' reading of it, and the bit-exact loop.
        ex = os.path.join(tmp, "export")
        out = run(["export", qat, "--format", "gpt-oss-mxfp4", "--output-dir", ex]).stdout
        if "bit for bit" not in out:
            fail(f"export summary: {out}")
        decoded = check_layout(ex, qat)
        hf_ex = load_hf(ex, quantization_config=Mxfp4Config(dequantize=True))
        params = dict(hf_ex.named_parameters())
        for name, value in decoded.items():
            if not np.array_equal(params[name].detach().numpy(), value):
                fail(f"{name}: transformers' dequantization differs from the layout's decode")
        ours_ex = fp4lab_losses(ex, rows)
        d_export = close(ours_ex, hf_losses(hf_ex, rows), 2e-6, "transformers on the export")
        if ours_ex != fp4lab_losses(qat, rows):
            fail("fp4lab eval of the export differs from the run's model (not bit for bit)")

        # 3b. A gpt-oss checkpoint from another tool (as OpenAI's): block scales that fp4lab's
        # rule would not choose (one larger, the codes' magnitudes halved), no fp4lab producer.
        # Any block on an E2M1 grid re-quantizes to itself under the ceil rule, so it loads
        # fake-quantized like fp4lab's own, and scores as transformers does.
        other = os.path.join(tmp, "other")
        write_foreign_checkpoint(ex, other)
        scored = run(["eval", other, "--data", rows]).stdout
        if "decoded from a gpt-oss-mxfp4 export folder" not in scored:
            fail(f"a foreign gpt-oss checkpoint: eval says {scored}")
        d_foreign = close(fp4lab_losses(other, rows),
                          hf_losses(load_hf(other, quantization_config=Mxfp4Config(dequantize=True)),
                                    rows), 2e-6, "a foreign gpt-oss checkpoint")

        # 3c. The seeds' pipeline: from the MXFP4 checkpoint, upcast (model.bf16_weights), SFT.
        p = run(["train", "--defaults", f"model.path={ex}", f"data.train={data}",
                 "recipe.name=sft", "train.max_steps=1", "--output-dir",
                 os.path.join(tmp, "refused-sft")], expect=2)
        if "model.bf16_weights=true" not in p.stderr:
            fail(f"SFT from the MXFP4 checkpoint without bf16_weights: {p.stderr}")
        train(ex, os.path.join(tmp, "sft-from-mxfp4"), data,
              ["recipe.name=sft", "model.bf16_weights=true"])

        # 4. import and analyze take the export folder.
        imported = os.path.join(tmp, "imported")
        run(["import", ex, "--output-dir", imported])
        bf16 = transformers.AutoModelForCausalLM.from_pretrained(imported)
        if bf16.dtype != torch.bfloat16:
            fail(f"the import is {bf16.dtype}, not bfloat16")
        for name, p in bf16.named_parameters():
            if not torch.equal(p, params[name].to(torch.bfloat16)):
                fail(f"import: {name} is not the BF16 rounding of the exact decode")
        analysis = json.loads(run(["analyze", ex, "--json", "--formats", "mxfp4"]).stdout)
        layers = analysis["layers"]
        if len(layers) != 6 or any(l["format"] != "mxfp4" or l["mse"] != 0 for l in layers):
            fail(f"analyze of the export: expected 6 exact MXFP4 layers: {str(layers)[:300]}")

        # 5. What the layout cannot hold is refused, and nothing is written.
        w4a4 = train(hf, os.path.join(tmp, "w4a4"), data,
                     ["recipe.name=ptq", "quant.format=mxfp4"])
        expect_refusal(["export", w4a4, "--format", "gpt-oss-mxfp4"], os.path.join(tmp, "r1"),
                       "weight-only")
        attn = train(hf, os.path.join(tmp, "attn"), data,
                     ["recipe.name=ptq", "quant.format=mxfp4", "quant.activations=false",
                      "quant.include=model.layers.*"])
        expect_refusal(["export", attn, "--format", "gpt-oss-mxfp4"], os.path.join(tmp, "r2"),
                       "self_attn")
        expect_refusal(["export", hf, "--format", "modelopt-nvfp4"], os.path.join(tmp, "r3"),
                       "gpt-oss")
        expect_refusal(["export", hf, "--format", "compressed-tensors-mxfp4"],
                       os.path.join(tmp, "r4"), "gpt-oss")
        llama = run(["base-model"]).stdout.strip().splitlines()[-1]
        expect_refusal(["export", llama, "--format", "gpt-oss-mxfp4"], os.path.join(tmp, "r5"),
                       "gpt-oss models")
        print(f"gpt-oss: eval |dCE| {d_eval:.2g} vs transformers, SFT model {d_sft:.2g}, "
              f"gpt-oss-mxfp4 export {d_export:.2g} (and bit for bit vs the run), foreign "
              f"checkpoint {d_foreign:.2g}; "
              f"{len(decoded)} expert tensors decode identically; import exact; refusals ok")


if __name__ == "__main__":
    main()
