// RunConfig's YAML reading and writing through one table of keys, so parsing, overrides,
// printing and validation can never disagree about which keys exist.
#include "fp4lab/run/run_config.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <fstream>
#include <sstream>

#include "fp4lab/common/files.h"
#include "fp4lab/error.h"
#include "run/key_table.h"

namespace fp4lab::run {
namespace {

using Binding = keys::Binding<RunConfig>;
constexpr double kInf = std::numeric_limits<double>::infinity();

using keys::boolean;
using keys::choice;
using keys::integer;
using keys::real;
using keys::text;

// A file or folder ("exp/sft/model" and "./exp/sft/model" are the same value).
ConfigKey path(ConfigKey k) {
  k.isPath = true;
  return k;
}
// Keys that may change on resume and do not change what the run computes.
ConfigKey operational(ConfigKey k) {
  k.definesRun = false;
  return k;
}

constexpr double kMaxSeed = 18446744073709551615.0;
constexpr double kMaxSteps = 1e9;

const std::vector<Binding>& table() {
  using C = RunConfig;
  using keys::bind;
  static const std::vector<Binding> t = {
      bind(&C::name, text("run.name",
                          "the run's name; the folder is run.output_dir/<name>-<UTC time> unless "
                          "--output-dir names it")),
      bind(&C::outputDir, operational(text("run.output_dir", "where run folders go"))),
      bind(&C::seed,
           integer("run.seed", 0, kMaxSeed,
                   "seeds the training order (and calibration batches), random initialisation and "
                   "sampling: what a repeated run varies (--seed sets it too)")),
      bind(&C::modelPath,
           path(text(
               "model.path",
               "a Hugging Face folder (config.json, model.safetensors or shards, tokenizer.json), "
               "a run's model/ or checkpoint (loaded with its quantizers), builtin:tiny (the "
               "shipped base model), builtin:smollm2-135m (SmolLM2-135M-Instruct, downloaded by "
               "the setup script), scratch:tiny (same shape as builtin:tiny, random weights), or "
               "scratch:100m (a ~125 M-parameter Llama with random weights, for scaling "
               "benchmarks)"))),
      bind(
          &C::bf16Weights,
          boolean("model.bf16_weights",
                  "true: load model.path, recipe.teacher and eval.reference as their BF16 weights, "
                  "ignoring a saved quant_state.json (default: as saved, fake-quantized)")),
      bind(&C::computeDtype, choice("model.compute_dtype", {"bf16", "fp32"},
                                    "bf16: autocast to bfloat16 with fp32 master weights; fp32")),
      bind(&C::trainData,
           path(text("data.train",
                     "a JSONL file or builtin:pretrain, builtin:sft, builtin:tasks-val, "
                     "builtin:sft-math-json, or random:tokens (uniformly random token ids, every "
                     "position scored; needs data.validation)"))),
      bind(&C::validationData,
           path(text("data.validation",
                     "a JSONL file, a builtin: source, or heldout:SOURCE (the rows a run "
                     "training on SOURCE holds out, e.g. heldout:builtin:sft); without one, "
                     "data.validation_fraction of the training rows are held out"))),
      bind(&C::validationFraction, real("data.validation_fraction", 0, 1,
                                        "the fraction of the training rows held out for validation "
                                        "when data.validation is empty",
                                        false, true)),
      bind(&C::validationMax,
           integer("data.validation_max", 0, 1e9, "at most this many validation rows")),
      bind(&C::seqLen,
           integer("data.seq_len", 8, 1 << 20,
                   "tokens per training sequence (at most the model's context length)")),
      bind(&C::pack,
           boolean("data.pack",
                   "concatenate rows into full sequences (false: one row per sequence, padded)")),
      bind(
          &C::dataSeed,
          integer("data.seed", 0, kMaxSeed,
                  "which examples a builtin: source generates, which rows data.validation_fraction "
                  "holds out, the random:tokens data and the task items graded; runs that differ "
                  "only in run.seed are evaluated on the same rows and items")),
      bind(&C::recipe, choice("recipe.name", {"sft", "ptq", "qat", "qad"},
                              "sft, ptq, qat or qad (docs/user-guide.md, Quantization recipes)")),
      bind(&C::teacher,
           path(text("recipe.teacher",
                     "qad: the frozen teacher, normally the BF16 SFT model (empty: model.path)"))),
      bind(&C::temperature,
           real("recipe.temperature", 0, 1e3,
                "qad: KL(p_teacher || p_student) at this temperature (the loss is scaled by T^2)",
                true)),
      bind(&C::ceWeight,
           real("recipe.ce_weight", 0, 1e6, "qad: loss = KL + ce_weight x cross-entropy")),
      bind(&C::quantFormat, choice("quant.format", {"none", "mxfp4", "nvfp4"},
                                   "mxfp4 or nvfp4 (required by ptq, qat, qad); none for sft")),
      bind(&C::scaleRule, choice("quant.scale_rule", {"ceil", "floor"},
                                 "MXFP4 block scales: ceil (never clips) or floor (OCP MX)")),
      bind(&C::blocks2d,
           boolean("quant.blocks_2d", "NVFP4 weights in 16x16 tiles (one scale per tile)")),
      bind(&C::quantActivations,
           boolean("quant.activations",
                   "W4A4: quantize every selected layer's input too; false: W4A16 (weights only)")),
      bind(&C::quantBackward,
           choice("quant.backward", {"auto", "ste", "clipped_ste"},
                  "ste, clipped_ste (zero gradient where |x| > the calibrated amax), or auto: "
                  "clipped for NVFP4, plain for MXFP4 (ModelOpt's defaults)")),
      bind(&C::amaxMode,
           choice(
               "quant.amax", {"frozen", "dynamic"},
               "per-tensor amax: frozen after max calibration, or dynamic (measured every call)")),
      bind(
          &C::sharedGroupScale,
          boolean("quant.shared_group_scale",
                  "NVFP4: one weight tensor scale per group the inference engines fuse into one "
                  "GEMM (q/k/v_proj, gate/up_proj, w1/w3), the group's largest amax, as the export "
                  "writes it; false: each layer its own (MXFP4 ignores it)")),
      bind(&C::calibBatches,
           integer("quant.calib_batches", 0, 1e6, "training batches for max calibration")),
      bind(&C::quantInclude,
           text("quant.include",
                "comma-separated globs over Hugging Face module names (* crosses dots); auto: "
                "the decoder layers' linears (gpt-oss: its experts)")),
      bind(&C::quantExclude,
           text("quant.exclude", "never quantized: the output layer, embeddings, MoE routers")),
      bind(&C::lr,
           real("optim.lr", 0, 10, "peak learning rate (AdamW, decoupled weight decay)", true)),
      bind(&C::minLrRatio,
           real("optim.min_lr_ratio", 0, 1, "the cosine schedule ends at lr x min_lr_ratio")),
      bind(&C::warmupRatio, real("optim.warmup_ratio", 0, 1,
                                 "linear warmup over this fraction of the steps", false, true)),
      bind(&C::weightDecay, real("optim.weight_decay", 0, 1e3, "AdamW's decoupled weight decay")),
      bind(&C::beta1, real("optim.beta1", 0, 1, "AdamW's first-moment decay", false, true)),
      bind(&C::beta2, real("optim.beta2", 0, 1, "AdamW's second-moment decay", false, true)),
      bind(&C::eps, real("optim.eps", 0, 1, "AdamW's epsilon", true)),
      bind(&C::gradClip,
           real("optim.grad_clip", 0, kInf, "global gradient-norm clipping (0 disables)")),
      bind(&C::batchSize, integer("train.batch_size", 1, 1 << 16, "sequences per micro-batch")),
      bind(&C::gradAccum,
           integer("train.grad_accum", 1, 1 << 16, "micro-batches per optimizer step")),
      bind(&C::maxSteps, integer("train.max_steps", 0, kMaxSteps,
                                 "optimizer steps (0: evaluate and save only; ptq never trains)")),
      bind(&C::evalEvery, integer("train.eval_every", 0, kMaxSteps,
                                  "validation loss before the first step, every N steps and at the "
                                  "end (0: only at the end)")),
      bind(&C::evalBatches,
           integer("train.eval_batches", 1, 1e6, "validation batches per evaluation")),
      bind(&C::checkpointEvery,
           operational(integer(
               "train.checkpoint_every", 0, kMaxSteps,
               "checkpoint every N steps (and always at the end and on stop; 0: only then)"))),
      bind(&C::keepCheckpoints,
           operational(integer("train.keep_checkpoints", 0, 1e4,
                               "keep the newest N checkpoints (0: the newest while the run is "
                               "unfinished, none once it has finished and saved its model/)"))),
      bind(&C::threads, operational(integer("train.threads", 0, 4096,
                                            "CPU threads (0: up to every core the process may run "
                                            "on, fewer while other programs keep cores busy)"))),
      bind(&C::device,
           operational(text("train.device",
                            "cpu, cuda (the first GPU; rank r of a data-parallel run: GPU "
                            "LOCAL_RANK) or cuda:N; CUDA needs a CUDA build of LibTorch and, for "
                            "quantized runs, fp4lab built with its CUDA kernels"))),
      bind(&C::distProcesses,
           operational(integer("dist.processes", 1, 1024,
                               "data-parallel processes fp4lab train starts on this machine (Gloo; "
                               "train.batch_size is the global batch; --nproc N overrides)"))),
      bind(&C::distTimeoutSeconds,
           operational(real("dist.timeout_s", 1, 86400,
                            "data-parallel runs: seconds to wait for every rank to join, and for "
                            "each collective (a rank that died or hangs fails the run after it)"))),
      bind(&C::reference,
           path(text("eval.reference",
                     "a model folder: every evaluation logs val_kl, the KL from it to "
                     "the trained model (default: none; the teacher for qad)"))),
      bind(&C::tasks, text("eval.tasks",
                           "comma-separated built-in tasks (reasoning_language, false_refusal, "
                           "math_in_language, json_answer) graded by generation")),
      bind(&C::taskItems, integer("eval.task_items", 1, 1e6, "held-out items per task")),
      bind(&C::taskEvery,
           integer("eval.task_every", 0, kMaxSteps,
                   "grade the tasks every N steps; 0: at the final evaluation only")),
      bind(&C::maxNewTokens,
           integer("eval.max_new_tokens", 1, 1 << 20,
                   "generation budget per task item (greedy; at most the model's context length)")),
  };
  return t;
}

const char* kKeysHint = "fp4lab train --list-keys prints every key (docs/user-guide.md)";

}  // namespace

const std::vector<ConfigKey>& runConfigKeys() {
  static const std::vector<ConfigKey> k = keys::describe(table());
  return k;
}

std::string RunConfig::originOf(const std::string& key) const {
  auto it = origins.find(key);
  return it == origins.end() ? std::string("run config (default value)") : it->second;
}

RunConfig RunConfig::fromYamlText(const std::string& text,
                                  const std::vector<std::string>& overrides,
                                  const std::string& origin) {
  RunConfig c;
  keys::applyYaml(c, table(), text, origin, true, "key", kKeysHint);
  for (const auto& o : overrides) c.applyOverride(o);
  c.validate();
  return c;
}

RunConfig RunConfig::fromYamlFile(const std::string& path,
                                  const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) throw Error("cannot read the config file", path, "check the path");
  std::stringstream ss;
  ss << in.rdbuf();
  return fromYamlText(ss.str(), overrides, path);
}

void RunConfig::applyOverride(const std::string& assignment) {
  keys::applyOverride(*this, table(), assignment, "command line", "key", kKeysHint,
                      "optim.lr=1e-4");
}

std::string RunConfig::toYaml() const {
  YAML::Node root;
  for (const auto& b : table()) {
    const std::string& key = b.key.name;
    size_t dot = key.find('.');
    root[key.substr(0, dot)][key.substr(dot + 1)] = b.get(*this);
  }
  YAML::Emitter out;
  out << root;
  return std::string(out.c_str()) + "\n";
}

std::vector<std::pair<std::string, std::string>> RunConfig::flatten() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& b : table()) {
    YAML::Emitter e;
    e << b.get(*this);
    out.emplace_back(b.key.name, e.c_str());
  }
  return out;
}

std::string RunConfig::valueOf(const std::string& key) const {
  for (const auto& [k, v] : flatten())
    if (k == key) return v;
  return "";
}

std::vector<std::string> differingKeys(const RunConfig& a, const RunConfig& b, bool all) {
  const auto fa = a.flatten(), fb = b.flatten();
  std::vector<std::string> out;
  for (size_t i = 0; i < fa.size(); ++i) {
    const ConfigKey& key = table()[i].key;
    if (fa[i].second == fb[i].second || !(all || key.definesRun)) continue;
    if (key.isPath && files::samePath(table()[i].get(a).Scalar(), table()[i].get(b).Scalar()))
      continue;
    // Runs from before quant.include=auto recorded its meaning for every architecture fp4lab
    // had then (all but gpt-oss): model.layers.*. They are the same runs.
    if (fa[i].first == "quant.include") {
      const auto legacy = [](const std::string& v) { return v == "auto" ? "model.layers.*" : v; };
      if (legacy(a.quantInclude) == legacy(b.quantInclude)) continue;
    }
    out.push_back(fa[i].first);
  }
  return out;
}

std::vector<std::string> quantIncludePatterns(const std::string& include,
                                              const std::string& architecture) {
  if (include != "auto") return splitList(include);
  if (architecture == "GptOssForCausalLM") return {"model.layers.*.mlp.experts.*"};
  return {"model.layers.*"};
}

std::vector<std::string> splitList(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(start, end - start);
    const size_t a = item.find_first_not_of(" \t"), b = item.find_last_not_of(" \t");
    if (a != std::string::npos) out.push_back(item.substr(a, b - a + 1));
    start = end + 1;
  }
  return out;
}

void RunConfig::validate() const {
  // Single values are checked as they are read (their type and bounds, with file:line); these are
  // the checks across keys, reported where the key they name was set.
  auto require = [&](bool ok, const char* key, const std::string& what,
                     const std::string& hint = {}) {
    if (!ok) throw Error("'" + std::string(key) + "' " + what, originOf(key), hint);
  };
  require(!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..",
          "run.name", "must be a non-empty name without '/'");
  if (recipe == "sft")
    require(quantFormat == "none", "quant.format",
            "must be none for recipe sft (train with fake quantization: recipe.name=qat)");
  else
    require(quantFormat != "none", "quant.format", "must be mxfp4 or nvfp4 for recipe " + recipe);
  require(calibBatches >= (amaxMode == "frozen" && quantFormat != "none" ? 1 : 0),
          "quant.calib_batches", "must be at least 1 with quant.amax=frozen");
  require(batchSize % distProcesses == 0, "dist.processes",
          "must divide train.batch_size (" + std::to_string(batchSize) +
              "): the global batch is split evenly over the processes",
          "use a batch size that is a multiple of the number of processes");
  require(int64_t(batchSize) * gradAccum <= (int64_t(1) << 20), "train.grad_accum",
          "times train.batch_size must be at most 1048576 sequences per step");
  require(parseDevice(device).has_value(), "train.device",
          "must be cpu, cuda or cuda:N (N a GPU index), not '" + device + "'",
          "e.g. train.device=cuda:0");
}

std::optional<DeviceSpec> parseDevice(const std::string& text) {
  if (text == "cpu") return DeviceSpec{false, -1};
  if (text == "cuda") return DeviceSpec{true, -1};
  const std::string prefix = "cuda:";
  if (text.size() <= prefix.size() || text.compare(0, prefix.size(), prefix) != 0)
    return std::nullopt;
  int index = 0;
  for (size_t i = prefix.size(); i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9' || index > 100000) return std::nullopt;
    index = index * 10 + (text[i] - '0');
  }
  return DeviceSpec{true, index};
}

}  // namespace fp4lab::run
