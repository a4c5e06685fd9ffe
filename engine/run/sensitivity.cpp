// Layer sensitivity: see fp4lab/run/sensitivity.h. The PTQ recipe attaches and calibrates every
// layer once; each measurement then attaches the quantizers a PTQ run of that layer set would
// (quant.include / quant.exclude), with the calibrated amaxes, and scores the model with the
// trainer's evaluation pass. Calibration passes the activations through unquantized, so a layer
// set's amaxes are the ones its own PTQ run would calibrate.
#include "fp4lab/common/system.h"
#include "fp4lab/run/sensitivity.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <map>
#include <thread>

#include "fp4lab/error.h"
#include "fp4lab/kernels/fp4.h"
#include "quant/quantize_model.h"
#include "run/model_source.h"
#include "run/run_gemm.h"
#include "train/recipe.h"
#include "train/trainer.h"

namespace fp4lab::run {
namespace {

// The keys the command's own options set.
bool ownKey(const std::string& key) {
  static const std::vector<std::string> own = {"model.path",
                                               "model.bf16_weights",
                                               "data.train",
                                               "data.validation",
                                               "data.validation_fraction",
                                               "data.validation_max",
                                               "recipe.name",
                                               "quant.format",
                                               "quant.scale_rule",
                                               "quant.blocks_2d",
                                               "quant.activations",
                                               "train.eval_batches",
                                               "train.threads",
                                               "eval.reference",
                                               "eval.tasks"};
  return std::find(own.begin(), own.end(), key) != own.end();
}

RunConfig sensitivityConfig(const SensitivityOptions& o) {
  if (o.modelDir.empty()) throw Error("no model given", "fp4lab sensitivity", "pass MODEL_DIR");
  if (o.data.empty())
    throw Error("--data FILE.jsonl is required", "fp4lab sensitivity",
                "the rows the loss is measured on (chat, prompt/completion or input_ids)");
  RunConfig c;
  c.name = "sensitivity";
  for (const std::string& assignment : o.overrides) {
    const std::string key = assignment.substr(0, assignment.find('='));
    if (ownKey(key))
      throw Error("'" + key + "' is set by fp4lab sensitivity itself", assignment,
                  "use MODEL_DIR, --data, --format, --w4a4, --max-batches or --threads");
    c.applyOverride(assignment);
  }
  c.modelPath = o.modelDir;
  c.bf16Weights = true;
  c.trainData = o.data;       // calibration batches
  c.validationData = o.data;  // the measured rows
  c.validationMax = int64_t(1) << 40;
  c.recipe = "ptq";
  c.reference.clear();
  c.tasks.clear();
  if (o.format == "nvfp4" || o.format == "nvfp4-2d") {
    c.quantFormat = "nvfp4";
    c.blocks2d = o.format == "nvfp4-2d";
  } else if (o.format == "mxfp4" || o.format == "mxfp4-floor") {
    c.quantFormat = "mxfp4";
    c.scaleRule = o.format == "mxfp4-floor" ? "floor" : "ceil";
  } else {
    throw Error("unknown format '" + o.format + "'", "--format",
                "use nvfp4, nvfp4-2d, mxfp4 or mxfp4-floor");
  }
  c.quantActivations = o.w4a4;
  c.threads = o.threads;
  c.validate();
  return c;
}

// Bytes of a weight [rows, cols] as an FP4 checkpoint stores it (docs/numerics.md): two codes a
// byte, one scale byte per block (E4M3 / E8M0), and for NVFP4 the FP32 weight_scale_2 (and
// input_scale with W4A4).
int64_t fp4Bytes(int64_t rows, int64_t cols, const quant::QuantOptions& o) {
  const int64_t n = rows * cols;
  int64_t bytes = (n + 1) / 2 + n / fp4_block_size(o.format);
  if (o.format == FP4_FORMAT_NVFP4) bytes += 4 + (o.activations ? 4 : 0);
  return bytes;
}

void detachAll(model::CausalLM& model) {
  for (auto& [name, linear] : model->quantLinears()) {
    linear->weightQuantizer = nullptr;
    linear->inputQuantizer = nullptr;
  }
  quant::forgetSharedInput();
}

std::string joinList(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : ",") + i;
  return s;
}

}  // namespace

std::vector<std::string> sensitivityFormats() {
  return {"nvfp4", "nvfp4-2d", "mxfp4", "mxfp4-floor"};
}

SensitivityResult measureSensitivity(
    const SensitivityOptions& options,
    const std::function<void(const SensitivityProgress&)>& progress,
    const std::atomic<bool>* cancel) {
  const auto started = std::chrono::steady_clock::now();
  SensitivityResult r;
  r.config = sensitivityConfig(options);
  const RunConfig& config = r.config;
  r.model = options.modelDir;
  r.data = options.data;
  r.formatName = options.format;
  r.w4a4 = options.w4a4;
  r.threads = config.threads > 0 ? config.threads : usableCores();
  torch::set_num_threads(r.threads);
  fp4_set_num_threads(r.threads);
  torch::manual_seed(config.seed);

  ModelBundle bundle = loadModelBundle(config.modelPath, torch::kFloat32, config.seed, true);
  model::CausalLM model = bundle.model;
  // The GEMM a PTQ run of this config uses, so that the plans score what such a run would.
  if (config.computeDtype == "bf16") chooseRunGemm(model, config, nullptr);
  const int64_t contextLength = model->config().maxPositionEmbeddings;
  if (config.seqLen > contextLength)
    throw Error("'data.seq_len' is " + std::to_string(config.seqLen) +
                    ", beyond the model's context of " + std::to_string(contextLength) + " tokens",
                config.originOf("data.seq_len"), "use at most " + std::to_string(contextLength));
  DataBundle data = loadTrainingData(config, bundle);
  if (data.validation.empty())
    throw Error("no sequences to score", options.data,
                "rows need assistant turns or input_ids (and a tokenizer for chat rows)");
  const int64_t available = int64_t(data.validation.size());
  const int64_t allBatches = (available + config.batchSize - 1) / config.batchSize;
  r.config.evalBatches =
      options.maxBatches > 0 ? std::min(options.maxBatches, allBatches) : allBatches;
  r.sequences = std::min(available, r.config.evalBatches * config.batchSize);
  for (int64_t i = 0; i < r.sequences; ++i)
    for (int64_t j = 0; j < config.seqLen; ++j)
      r.tokens += data.validation[size_t(i)].lossMask[size_t(j + 1)] != 0;
  if (r.tokens == 0)
    throw Error("no tokens to score", options.data, "rows need assistant turns or input_ids");

  model::CausalLM reference{nullptr};
  if (options.kl) {
    // The same weights computed the same way (fp32 under the run's autocast), so that the KL
    // measures what quantizing costs and nothing else. A BF16 copy would differ by its BF16
    // residual stream alone: a KL of 2.5e-3 on SmolLM2-135M with no layer quantized, as large
    // as most single layers' (5e-5 on the built-in model).
    ModelBundle b = loadModelBundle(config.modelPath, torch::kFloat32, config.seed, true);
    reference = b.model;
    for (auto& p : reference->parameters()) p.set_requires_grad(false);
    reference->eval();
  }

  // The PTQ recipe: every layer attached and calibrated, as `fp4lab train recipe.name=ptq`.
  std::unique_ptr<train::Recipe> recipe = train::makeRecipe(config);
  train::RecipeContext context;
  context.autocast = config.computeDtype == "bf16";
  context.loadFrozenModel = [](const std::string&) -> model::CausalLM {
    throw Error("internal: ptq loads no frozen model");
  };
  context.calibrationBatch = [&](int64_t i) {
    std::vector<const data::Sequence*> picked;
    for (int64_t k = 0; k < config.batchSize; ++k)
      picked.push_back(&data.train[size_t(i * config.batchSize + k) % data.train.size()]);
    return train::makeBatch(picked, config.seqLen, model->device());
  };
  const quant::QuantOptions base = quant::QuantOptions::fromConfig(config);
  r.format = base.describe();

  // The one evaluation pass: the trainer's.
  train::TrainerListener quiet;
  train::Trainer trainer(r.config, model, *recipe, data.train, data.validation, {}, quiet,
                         [](const std::string&) {});
  if (reference) trainer.setReference(reference);

  std::vector<std::string> names;  // set after prepare
  int64_t done = 0, total = 2;
  auto step = [&](const std::string& what) {
    if (cancel && cancel->load())
      throw Error("sensitivity cancelled", r.model, "nothing was written");
    if (progress) progress({done, total, what});
    ++done;
  };

  step("bf16");
  const train::EvalReport bf16 = trainer.evaluate();
  r.bf16Loss = bf16.valLoss;

  step("calibration");
  recipe->prepare(model, context);
  std::vector<quant::QuantizedLayer>& all = recipe->quantizedLayers();
  std::map<std::string, std::pair<float, float>> amax;
  for (const auto& l : all) {
    names.push_back(l.name);
    amax[l.name] = {l.weight->amax(), l.input ? l.input->amax() : NAN};
  }
  const int64_t n = int64_t(names.size());

  // The plans to measure: keep 0 (PTQ) and N (BF16) always.
  std::vector<int64_t> keeps;
  for (int64_t k = 0; k <= n; ++k) {
    const int64_t stride = std::max<int64_t>(1, (n - 16 + 7) / 8);
    if (options.allPlans || k <= 16 || k == n || (k - 16) % stride == 0) keeps.push_back(k);
  }
  for (int64_t k : options.extraPlans) {
    if (k < 0 || k > n)
      throw Error("--keep " + std::to_string(k) + " is out of range", "--keep",
                  "the model has " + std::to_string(n) + " quantizable layers: use 0 to " +
                      std::to_string(n));
    keeps.push_back(k);
  }
  std::sort(keeps.begin(), keeps.end());
  keeps.erase(std::unique(keeps.begin(), keeps.end()), keeps.end());
  total = 2 + 1 + n + int64_t(keeps.size()) - 2;

  // Sizes: every parameter in BF16 (tied weights once), the quantized weights in the format.
  for (const auto& p : model->parameters()) r.bf16Bytes += 2 * p.numel();
  std::map<std::string, int64_t> saving;
  for (const auto& l : all) {
    LayerSensitivity s;
    s.name = l.name;
    s.rows = l.linear->outFeatures(), s.cols = l.linear->inFeatures();
    s.bf16Bytes = 2 * s.rows * s.cols;
    s.fp4Bytes = fp4Bytes(s.rows, s.cols, base);
    saving[s.name] = s.bf16Bytes - s.fp4Bytes;
    r.layers.push_back(s);
  }
  r.ptqBytes = r.bf16Bytes;
  for (const auto& l : r.layers) r.ptqBytes -= saving[l.name];

  step("ptq (all layers)");
  const train::EvalReport ptq = trainer.evaluate();
  r.ptqLoss = ptq.valLoss, r.ptqKl = ptq.valKl;
  detachAll(model);

  // A PTQ run's quantizers for a layer set, with the calibrated amaxes; evaluated, detached.
  auto measure = [&](const quant::QuantOptions& o) {
    std::vector<quant::QuantizedLayer> layers = quant::attachQuantizers(model, o);
    for (auto& l : layers) {
      const auto& a = amax.at(l.name);
      l.weight->setAmax(a.first);
      if (l.input) l.input->setAmax(a.second);
    }
    const train::EvalReport e = trainer.evaluate();
    detachAll(model);
    return e;
  };

  for (LayerSensitivity& s : r.layers) {
    step(s.name);
    quant::QuantOptions o = base;
    o.include = {s.name};
    const train::EvalReport e = measure(o);
    s.loss = e.valLoss, s.kl = e.valKl;
  }
  std::vector<size_t> order(r.layers.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const double da = r.layers[a].loss, db = r.layers[b].loss;
    if (std::isnan(da) != std::isnan(db)) return std::isnan(da);  // NaN: the most sensitive
    return da > db;
  });
  for (size_t i = 0; i < order.size(); ++i) r.layers[order[i]].rank = int64_t(i) + 1;

  for (int64_t k : keeps) {
    SensitivityPlan p;
    p.keep = k;
    std::vector<std::string> exclude = splitList(config.quantExclude);
    p.bytes = r.ptqBytes;
    for (int64_t i = 0; i < k; ++i) {
      const LayerSensitivity& s = r.layers[order[size_t(i)]];
      p.kept.push_back(s.name);
      exclude.push_back(s.name);
      p.bytes += saving[s.name];
    }
    p.exclude = joinList(exclude);
    if (k == 0) {
      p.loss = r.ptqLoss, p.kl = r.ptqKl;
    } else if (k == n) {
      p.loss = r.bf16Loss, p.kl = bf16.valKl;
    } else {
      step("keep " + std::to_string(k) + " in BF16");
      quant::QuantOptions o = base;
      o.exclude = exclude;
      const train::EvalReport e = measure(o);
      p.loss = e.valLoss, p.kl = e.valKl;
    }
    r.plans.push_back(std::move(p));
  }
  if (progress) progress({total, total, "done"});
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return r;
}

int64_t chooseKeep(const SensitivityResult& r, double tolerance) {
  const double limit = r.bf16Loss + tolerance * std::fabs(r.bf16Loss);
  for (const SensitivityPlan& p : r.plans)
    if (p.loss <= limit) return p.keep;
  return r.plans.empty() ? 0 : r.plans.back().keep;
}

const SensitivityPlan& planWithKeep(const SensitivityResult& r, int64_t keep) {
  for (const SensitivityPlan& p : r.plans)
    if (p.keep == keep) return p;
  throw Error("no plan keeping " + std::to_string(keep) + " layers was measured", "--keep");
}

std::string sensitivityTable(const SensitivityResult& r, int64_t chosenKeep) {
  std::string out;
  char line[512];
  auto mib = [](int64_t bytes) { return double(bytes) / (1024.0 * 1024.0); };
  std::snprintf(line, sizeof line, "%s, %s: %" PRId64 " sequences, %" PRId64 " scored tokens\n",
                r.model.c_str(), r.format.c_str(), r.sequences, r.tokens);
  out += line;
  std::snprintf(line, sizeof line, "bf16  loss %.6f  size %.3f MiB\n", r.bf16Loss,
                mib(r.bf16Bytes));
  out += line;
  std::snprintf(line, sizeof line, "ptq   loss %.6f  kl %.6f  size %.3f MiB (every layer)\n\n",
                r.ptqLoss, r.ptqKl, mib(r.ptqBytes));
  out += line;
  out +=
      "rank  layer                                          rows x cols        loss      "
      "delta         kl\n";
  std::vector<const LayerSensitivity*> byRank;
  for (const auto& l : r.layers) byRank.push_back(&l);
  std::sort(byRank.begin(), byRank.end(),
            [](const LayerSensitivity* a, const LayerSensitivity* b) { return a->rank < b->rank; });
  for (const LayerSensitivity* l : byRank) {
    const std::string shape = std::to_string(l->rows) + " x " + std::to_string(l->cols);
    std::snprintf(line, sizeof line, "%4" PRId64 "  %-45.45s  %-13s  %10.6f  %+9.6f  %9.6f\n",
                  l->rank, l->name.c_str(), shape.c_str(), l->loss, l->loss - r.bf16Loss, l->kl);
    out += line;
  }
  out += "\nkeep  size MiB   of bf16        loss      delta         kl  kept in BF16 (added)\n";
  for (size_t i = 0; i < r.plans.size(); ++i) {
    const SensitivityPlan& p = r.plans[i];
    std::string added;
    const size_t from = i == 0 ? 0 : r.plans[i - 1].kept.size();
    for (size_t j = from; j < p.kept.size(); ++j) added += (added.empty() ? "" : ", ") + p.kept[j];
    if (added.size() > 60) added = added.substr(0, 57) + "...";
    std::snprintf(line, sizeof line, "%4" PRId64 "%s %8.3f  %7.1f%%  %10.6f  %+9.6f  %9.6f  %s\n",
                  p.keep, p.keep == chosenKeep ? "*" : " ", mib(p.bytes),
                  100.0 * double(p.bytes) / double(r.bf16Bytes), p.loss, p.loss - r.bf16Loss, p.kl,
                  added.c_str());
    out += line;
  }
  return out;
}

analyze::SensitivityFile sensitivityFile(const SensitivityResult& r, int64_t chosenKeep,
                                         double tolerance) {
  analyze::SensitivityFile f;
  f.model = r.model, f.data = r.data, f.format = r.format, f.formatName = r.formatName;
  f.w4a4 = r.w4a4;
  f.sequences = r.sequences, f.tokens = r.tokens;
  f.seqLen = r.config.seqLen, f.batchSize = r.config.batchSize;
  f.evalBatches = r.config.evalBatches;
  f.bf16Loss = r.bf16Loss, f.ptqLoss = r.ptqLoss, f.ptqKl = r.ptqKl;
  f.bf16Bytes = r.bf16Bytes, f.ptqBytes = r.ptqBytes;
  f.layers = r.layers, f.plans = r.plans;
  f.chosenKeep = chosenKeep, f.tolerance = tolerance;
  f.seconds = r.seconds, f.threads = r.threads;
  return f;
}

}  // namespace fp4lab::run
