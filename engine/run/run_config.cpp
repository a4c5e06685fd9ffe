// RunConfig's YAML reading and writing through one table of keys, so parsing, overrides,
// printing and validation can never disagree about which keys exist.
#include "fp4lab/run/run_config.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <functional>
#include <limits>
#include <fstream>
#include <sstream>

#include "fp4lab/error.h"

namespace fp4lab::run {
namespace {

struct Field {
  const char* key;
  std::function<void(RunConfig&, const YAML::Node&, const std::string& where)> set;
  std::function<YAML::Node(const RunConfig&)> get;
};

template <class T>
T convert(const YAML::Node& node, const std::string& key, const std::string& where,
          const char* typeName) {
  if (!node.IsScalar())
    throw Error(
        "'" + key + "' must be a " + typeName + ", not a " + (node.IsMap() ? "map" : "list"),
        where);
  try {
    return node.as<T>();
  } catch (const YAML::Exception&) {
    throw Error("'" + key + "' must be a " + typeName + ", got '" + node.Scalar() + "'", where);
  }
}

template <class T>
Field field(const char* key, T RunConfig::*member, const char* typeName) {
  return Field{key,
               [=](RunConfig& c, const YAML::Node& n, const std::string& where) {
                 T v = convert<T>(n, key, where, typeName);
                 if constexpr (std::is_floating_point_v<T>)
                   if (!std::isfinite(v))
                     throw Error("'" + std::string(key) + "' must be finite", where);
                 c.*member = v;
               },
               [=](const RunConfig& c) { return YAML::Node(c.*member); }};
}

const std::vector<Field>& fields() {
  static const std::vector<Field> f = {
      field("run.name", &RunConfig::name, "string"),
      field("run.output_dir", &RunConfig::outputDir, "string"),
      field("run.seed", &RunConfig::seed, "non-negative integer"),
      field("model.path", &RunConfig::modelPath, "string"),
      field("model.compute_dtype", &RunConfig::computeDtype, "string"),
      field("data.train", &RunConfig::trainData, "string"),
      field("data.validation", &RunConfig::validationData, "string"),
      field("data.validation_fraction", &RunConfig::validationFraction, "number"),
      field("data.validation_max", &RunConfig::validationMax, "integer"),
      field("data.seq_len", &RunConfig::seqLen, "integer"),
      field("data.pack", &RunConfig::pack, "boolean"),
      field("data.seed", &RunConfig::dataSeed, "non-negative integer"),
      field("recipe.name", &RunConfig::recipe, "string"),
      field("recipe.teacher", &RunConfig::teacher, "string"),
      field("recipe.temperature", &RunConfig::temperature, "number"),
      field("recipe.ce_weight", &RunConfig::ceWeight, "number"),
      field("quant.format", &RunConfig::quantFormat, "string"),
      field("quant.scale_rule", &RunConfig::scaleRule, "string"),
      field("quant.blocks_2d", &RunConfig::blocks2d, "boolean"),
      field("quant.activations", &RunConfig::quantActivations, "boolean"),
      field("quant.backward", &RunConfig::quantBackward, "string"),
      field("quant.amax", &RunConfig::amaxMode, "string"),
      field("quant.calib_batches", &RunConfig::calibBatches, "integer"),
      field("quant.include", &RunConfig::quantInclude, "string"),
      field("quant.exclude", &RunConfig::quantExclude, "string"),
      field("optim.lr", &RunConfig::lr, "number"),
      field("optim.min_lr_ratio", &RunConfig::minLrRatio, "number"),
      field("optim.warmup_ratio", &RunConfig::warmupRatio, "number"),
      field("optim.weight_decay", &RunConfig::weightDecay, "number"),
      field("optim.beta1", &RunConfig::beta1, "number"),
      field("optim.beta2", &RunConfig::beta2, "number"),
      field("optim.eps", &RunConfig::eps, "number"),
      field("optim.grad_clip", &RunConfig::gradClip, "number"),
      field("train.batch_size", &RunConfig::batchSize, "integer"),
      field("train.grad_accum", &RunConfig::gradAccum, "integer"),
      field("train.max_steps", &RunConfig::maxSteps, "integer"),
      field("train.eval_every", &RunConfig::evalEvery, "integer"),
      field("train.eval_batches", &RunConfig::evalBatches, "integer"),
      field("train.checkpoint_every", &RunConfig::checkpointEvery, "integer"),
      field("train.keep_checkpoints", &RunConfig::keepCheckpoints, "integer"),
      field("train.threads", &RunConfig::threads, "integer"),
      field("eval.reference", &RunConfig::reference, "string"),
      field("eval.tasks", &RunConfig::tasks, "string"),
      field("eval.task_items", &RunConfig::taskItems, "integer"),
      field("eval.task_every", &RunConfig::taskEvery, "integer"),
      field("eval.max_new_tokens", &RunConfig::maxNewTokens, "integer"),
  };
  return f;
}

const Field* findField(const std::string& key) {
  for (const auto& f : fields())
    if (key == f.key) return &f;
  return nullptr;
}

// The closest known key, for "did you mean" hints (edit distance).
std::string closestKey(const std::string& key) {
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      cur[0] = i;
      for (size_t j = 1; j <= b.size(); ++j)
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
      std::swap(prev, cur);
    }
    return prev[b.size()];
  };
  std::string best;
  size_t bestDistance = std::numeric_limits<size_t>::max();
  for (const auto& f : fields()) {
    size_t d = distance(key, f.key);
    if (d < bestDistance) bestDistance = d, best = f.key;
  }
  return bestDistance <= 3 ? best : std::string();
}

[[noreturn]] void unknownKey(const std::string& key, const std::string& where) {
  std::string hint = closestKey(key);
  throw Error(
      "unknown key '" + key + "'", where,
      hint.empty() ? "see docs/user-guide.md for the keys" : "did you mean '" + hint + "'?");
}

void applyNode(RunConfig& c, const YAML::Node& node, const std::string& prefix,
               const std::string& origin) {
  if (!node.IsMap())
    throw Error("expected a map of sections (run, model, data, recipe, quant, optim, train, eval)",
                origin);
  for (const auto& kv : node) {
    std::string key =
        prefix.empty() ? kv.first.as<std::string>() : prefix + "." + kv.first.as<std::string>();
    std::string where = origin + ":" + std::to_string(kv.first.Mark().line + 1);
    if (const Field* f = findField(key)) {
      f->set(c, kv.second, where);
    } else if (kv.second.IsMap()) {
      bool isSection = false;
      for (const auto& f : fields())
        if (std::string(f.key).rfind(key + ".", 0) == 0) isSection = true;
      if (!isSection) unknownKey(key, where);
      applyNode(c, kv.second, key, origin);
    } else {
      unknownKey(key, where);
    }
  }
}

}  // namespace

RunConfig RunConfig::fromYamlText(const std::string& text,
                                  const std::vector<std::string>& overrides,
                                  const std::string& origin) {
  RunConfig c;
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw Error("invalid YAML: " + e.msg, origin + ":" + std::to_string(e.mark.line + 1));
  }
  if (root && !root.IsNull()) applyNode(c, root, "", origin);
  for (const auto& o : overrides) c.applyOverride(o);
  c.validate();
  return c;
}

RunConfig RunConfig::fromYamlFile(const std::string& path,
                                  const std::vector<std::string>& overrides) {
  YAML::Node probe;
  std::ifstream in(path);
  if (!in) throw Error("cannot read the config file", path, "check the path");
  std::stringstream ss;
  ss << in.rdbuf();
  return fromYamlText(ss.str(), overrides, path);
}

void RunConfig::applyOverride(const std::string& assignment) {
  size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw Error("override '" + assignment + "' is not key=value", "command line",
                "e.g. optim.lr=1e-4");
  std::string key = assignment.substr(0, eq), value = assignment.substr(eq + 1);
  const Field* f = findField(key);
  if (!f) unknownKey(key, "command line");
  YAML::Node node;
  try {
    node = YAML::Load(value);
  } catch (const YAML::Exception&) {
    node = YAML::Node(value);
  }
  if (!node || node.IsNull()) node = YAML::Node(value);
  f->set(*this, node, "command line");
}

std::string RunConfig::toYaml() const {
  YAML::Node root;
  for (const auto& f : fields()) {
    std::string key = f.key;
    size_t dot = key.find('.');
    root[key.substr(0, dot)][key.substr(dot + 1)] = f.get(*this);
  }
  YAML::Emitter out;
  out.SetDoublePrecision(17);
  out << root;
  return std::string(out.c_str()) + "\n";
}

std::vector<std::pair<std::string, std::string>> RunConfig::flatten() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& f : fields()) {
    YAML::Emitter e;
    e.SetDoublePrecision(17);
    e << f.get(*this);
    out.emplace_back(f.key, e.c_str());
  }
  return out;
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
  auto require = [](bool ok, const char* key, const std::string& what) {
    if (!ok) throw Error("'" + std::string(key) + "' " + what, "run config");
  };
  require(seqLen >= 8, "data.seq_len", "must be at least 8");
  require(batchSize >= 1, "train.batch_size", "must be at least 1");
  require(gradAccum >= 1, "train.grad_accum", "must be at least 1");
  require(maxSteps >= 0, "train.max_steps", "must be >= 0 (0: evaluate and save only)");
  require(evalEvery >= 0, "train.eval_every", "must be >= 0");
  require(evalBatches >= 1, "train.eval_batches", "must be at least 1");
  require(checkpointEvery >= 0, "train.checkpoint_every", "must be >= 0");
  require(keepCheckpoints >= 1, "train.keep_checkpoints", "must be at least 1");
  require(threads >= 0, "train.threads", "must be >= 0");
  require(lr > 0, "optim.lr", "must be positive");
  require(minLrRatio >= 0 && minLrRatio <= 1, "optim.min_lr_ratio", "must be in [0, 1]");
  require(warmupRatio >= 0 && warmupRatio < 1, "optim.warmup_ratio", "must be in [0, 1)");
  require(weightDecay >= 0, "optim.weight_decay", "must be >= 0");
  require(beta1 >= 0 && beta1 < 1, "optim.beta1", "must be in [0, 1)");
  require(beta2 >= 0 && beta2 < 1, "optim.beta2", "must be in [0, 1)");
  require(eps > 0, "optim.eps", "must be positive");
  require(gradClip >= 0, "optim.grad_clip", "must be >= 0 (0 disables clipping)");
  require(validationFraction >= 0 && validationFraction < 1, "data.validation_fraction",
          "must be in [0, 1)");
  require(computeDtype == "bf16" || computeDtype == "fp32", "model.compute_dtype",
          "must be bf16 or fp32");
  require(recipe == "sft" || recipe == "ptq" || recipe == "qat" || recipe == "qad", "recipe.name",
          "must be sft, ptq, qat or qad");
  require(quantFormat == "none" || quantFormat == "mxfp4" || quantFormat == "nvfp4", "quant.format",
          "must be none, mxfp4 or nvfp4");
  if (recipe == "sft")
    require(quantFormat == "none", "quant.format",
            "must be none for recipe sft (train with fake quantization: recipe.name=qat)");
  else
    require(quantFormat != "none", "quant.format", "must be mxfp4 or nvfp4 for recipe " + recipe);
  require(scaleRule == "ceil" || scaleRule == "floor", "quant.scale_rule", "must be ceil or floor");
  require(quantBackward == "auto" || quantBackward == "ste" || quantBackward == "clipped_ste",
          "quant.backward", "must be auto, ste or clipped_ste");
  require(amaxMode == "frozen" || amaxMode == "dynamic", "quant.amax", "must be frozen or dynamic");
  require(calibBatches >= (amaxMode == "frozen" && quantFormat != "none" ? 1 : 0),
          "quant.calib_batches", "must be at least 1 with quant.amax=frozen");
  require(temperature > 0, "recipe.temperature", "must be positive");
  require(ceWeight >= 0, "recipe.ce_weight", "must be >= 0");
  require(taskItems >= 1, "eval.task_items", "must be at least 1");
  require(taskEvery >= 0, "eval.task_every", "must be >= 0");
  require(maxNewTokens >= 1, "eval.max_new_tokens", "must be at least 1");
  require(!name.empty() && name.find('/') == std::string::npos, "run.name",
          "must be a non-empty name without '/'");
}

}  // namespace fp4lab::run
