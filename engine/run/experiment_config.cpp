// The experiment's own keys (sft_steps, qat_lr, formats, ...): one table, read from YAML and
// key=value through the same machinery as the run config (run/key_table.h).
#include <algorithm>
#include <fstream>
#include <sstream>

#include "fp4lab/data/builtin_tasks.h"
#include "fp4lab/error.h"
#include "fp4lab/run/experiment.h"
#include "run/key_table.h"

namespace fp4lab::run {
namespace {

using Binding = keys::Binding<ExperimentConfig>;

using keys::integer;
using keys::text;
ConfigKey rate(const char* name, const char* help) {
  return keys::real(name, 0, 10, help, true);
}

constexpr double kMaxSeed = 18446744073709551615.0;

const std::vector<Binding>& table() {
  using C = ExperimentConfig;
  using keys::bind;
  static const std::vector<Binding> t = {
      bind(&C::baseModel,
           text("base_model", "the base model every run starts from (a folder or builtin:tiny)")),
      bind(&C::trainData,
           text("train_data",
                "the SFT data, also the QAT and QAD data (a JSONL file, builtin:sft or "
                "builtin:sft-math-json)")),
      bind(&C::seed,
           integer("seed", 0, kMaxSeed, "every run's run.seed (training order, initialisation)")),
      bind(&C::dataSeed, integer("data_seed", 0, kMaxSeed,
                                 "every run's data.seed (examples, validation split, task items)")),
      bind(&C::batchSize, integer("batch_size", 1, 1 << 16, "sequences per step")),
      bind(&C::seqLen, integer("seq_len", 8, 1 << 20, "tokens per sequence")),
      bind(&C::threads,
           integer("threads", 0, 4096, "CPU threads per run (0: every core the process may use)")),
      bind(&C::device,
           text("device", "where every run trains: cpu, cuda or cuda:N (train.device)")),
      bind(&C::sftSteps, integer("sft_steps", 1, 1e9, "SFT steps from the base model")),
      bind(&C::sftLr, rate("sft_lr", "SFT peak learning rate")),
      bind(&C::qatSteps, integer("qat_steps", 1, 1e9, "QAT steps from the SFT model")),
      bind(&C::qatLr, rate("qat_lr", "QAT peak learning rate")),
      bind(&C::qadSteps, integer("qad_steps", 1, 1e9, "QAD steps from the SFT model")),
      bind(&C::qadLr, rate("qad_lr", "QAD peak learning rate")),
      bind(&C::evalEvery, integer("eval_every", 0, 1e9,
                                  "validation before the first step, every N steps and at the end "
                                  "(0: at the end only)")),
      bind(&C::evalBatches, integer("eval_batches", 1, 1e6, "validation batches per evaluation")),
      bind(&C::taskItems,
           integer("task_items", 1, 1e6, "held-out items per task, graded by generation")),
      bind(&C::tasks, text("tasks",
                           "the built-in tasks every run is graded on (comma-separated; "
                           "math_in_language,json_answer for a real model)")),
      bind(&C::formats, text("formats", "mxfp4, nvfp4 or both (comma-separated)")),
      bind(&C::activations,
           keys::boolean("activations",
                         "true: W4A4 (weights and input activations); false: W4A16 (--w4a16)")),
      bind(&C::baseQatFormat, keys::choice("base_qat_format", {"mxfp4", "nvfp4"},
                                           "the format of the QAT-from-base run")),
      bind(&C::baseQatSteps,
           integer("base_qat_steps", -1, 1e9,
                   "steps of the QAT-from-base run (-1: sft_steps + qat_steps, the same budget)")),
      bind(&C::offdomainData,
           text("offdomain_data",
                "QAT and QAD from the SFT model also on this other data (e.g. builtin:pretrain), "
                "scored on the SFT data's validation rows (empty: not run)")),
      bind(&C::randomTokens,
           keys::boolean("random_tokens",
                         "true: QAD from the SFT model also on uniformly random tokens")),
      bind(&C::offdomainFormat, keys::choice("offdomain_format", {"mxfp4", "nvfp4"},
                                             "the format of the off-domain and random-token runs")),
      bind(&C::repeats, integer("repeats", 1, 100,
                                "PTQ, QAT and QAD at this many run seeds (seed, seed + 1, ...), "
                                "reported as mean and spread")),
  };
  return t;
}

const char* kKeysHint = "fp4lab experiment --list-keys prints every key";

}  // namespace

const std::vector<ConfigKey>& experimentConfigKeys() {
  static const std::vector<ConfigKey> k = keys::describe(table());
  return k;
}

ExperimentConfig ExperimentConfig::quick() {
  ExperimentConfig c;
  c.sftSteps = 60;
  c.qatSteps = 15;
  c.qadSteps = 15;
  c.evalEvery = 15;
  c.evalBatches = 2;
  c.taskItems = 10;
  c.batchSize = 8;
  c.seqLen = 128;
  return c;
}

std::vector<std::string> ExperimentConfig::presetNames() {
  return {"tiny", "tiny-quick", "smollm2", "smollm2-quick"};
}

// SmolLM2-135M-Instruct: an SFT learning rate a tenth of the tiny model's (a pretrained model
// fine-tuned, not trained), and the off-domain runs the tiny model cannot show.
ExperimentConfig ExperimentConfig::preset(const std::string& name) {
  if (name == "tiny") return ExperimentConfig();
  if (name == "tiny-quick") return quick();
  ExperimentConfig c;
  c.baseModel = "builtin:smollm2-135m";
  c.trainData = "builtin:sft-math-json";
  c.tasks = "math_in_language,json_answer";
  c.offdomainData = "builtin:pretrain";
  c.randomTokens = true;
  c.sftLr = 1e-4;
  // 200 SFT steps reached 84% / 77% on the tasks (docs/results.md): the full study trains 600.
  if (name == "smollm2") {
    c.batchSize = 8;
    c.seqLen = 256;
    c.sftSteps = 600;
    c.qatSteps = 60;
    c.qadSteps = 60;
    c.qatLr = 5e-5;
    c.qadLr = 5e-5;
    c.evalEvery = 50;
    c.evalBatches = 8;
    c.taskItems = 100;
    return c;
  }
  // Under 30 minutes on two cores (docs/results.md). W4A4 costs this model far more than the tiny
  // one, so its few QAT and QAD steps take SFT's learning rate: at 1e-5, 10 steps barely moved.
  if (name == "smollm2-quick") {
    c.batchSize = 4;
    c.seqLen = 256;
    c.sftSteps = 40;
    c.qatSteps = 8;
    c.qadSteps = 8;
    c.qatLr = 1e-4;
    c.qadLr = 1e-4;
    c.baseQatSteps = 12;
    c.evalEvery = 0;
    c.evalBatches = 4;
    c.taskItems = 10;
    return c;
  }
  std::string names;
  for (const auto& n : presetNames()) names += (names.empty() ? "" : ", ") + n;
  throw Error("unknown experiment preset '" + name + "'", "--preset", "the presets are " + names);
}

void ExperimentConfig::applyOverride(const std::string& assignment) {
  keys::applyOverride(*this, table(), assignment, "fp4lab experiment", "experiment key", kKeysHint,
                      "qat_steps=200");
}

void ExperimentConfig::applyYamlFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot read the experiment config", path, "check the path");
  std::stringstream text;
  text << in.rdbuf();
  keys::applyYaml(*this, table(), text.str(), path, false, "experiment key", kKeysHint);
}

void ExperimentConfig::validate() const {
  auto where = [&](const char* key) {
    auto it = origins.find(key);
    return it == origins.end() ? std::string("experiment config") : it->second;
  };
  const std::vector<std::string> list = splitList(formats);
  if (list.empty())
    throw Error("'formats' must name mxfp4, nvfp4 or both", where("formats"), "e.g. formats=nvfp4");
  for (const auto& f : list)
    if (f != "mxfp4" && f != "nvfp4")
      throw Error("'formats' names an unknown format '" + f + "'", where("formats"),
                  "use mxfp4, nvfp4 or both (formats=mxfp4,nvfp4)");
  if (offdomainData.rfind("random:", 0) == 0)
    throw Error("'offdomain_data' names random tokens", where("offdomain_data"),
                "random tokens have their own key: random_tokens=true");
  if (!offdomainData.empty() && offdomainData == trainData)
    throw Error("'offdomain_data' is the SFT data itself (" + trainData + ")",
                where("offdomain_data"), "name other data, e.g. offdomain_data=builtin:pretrain");
  if (trainData.rfind("random:", 0) == 0)
    throw Error("'train_data' cannot be random tokens: the SFT model learns the tasks from it",
                where("train_data"), "e.g. train_data=builtin:sft");
  const std::vector<std::string> taskList = splitList(tasks);
  if (taskList.empty())
    throw Error("'tasks' names no task", where("tasks"), "e.g. tasks=reasoning_language");
  const std::vector<std::string> known = data::builtinTaskNames();
  for (const auto& t : taskList)
    if (std::find(known.begin(), known.end(), t) == known.end())
      throw Error("'tasks' names an unknown task '" + t + "'", where("tasks"),
                  "the built-in tasks are reasoning_language, false_refusal, math_in_language "
                  "and json_answer");
}

std::string ExperimentConfig::toYaml() const {
  std::string out;
  for (const auto& b : table()) {
    YAML::Emitter e;
    e << b.get(*this);
    out += b.key.name + ": " + e.c_str() + "\n";
  }
  return out;
}

}  // namespace fp4lab::run
