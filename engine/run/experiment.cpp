// The built-in experiment: a fixed sequence of runs through executeRun, each read back from its
// HDF5 log (the one source of truth, as for the GUI), then the assessment and the report.
#include "fp4lab/run/experiment.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iomanip>
#include <chrono>
#include <cmath>
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "fp4lab/common/files.h"
#include "fp4lab/common/time.h"
#include "fp4lab/data/builtin_tasks.h"
#include "fp4lab/error.h"
#include "fp4lab/log/run_log.h"
#include "fp4lab/run/run_folder.h"
#include "fp4lab/common/files.h"

namespace fp4lab::run {
namespace {

namespace fs = std::filesystem;

// "2026-11-30T11:24:54.416Z kind text" -> seconds since the epoch.
double eventTime(const std::string& line) {
  std::tm tm{};
  int ms = 0;
  if (std::sscanf(line.c_str(), "%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) < 6)
    return NAN;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return double(timegm(&tm)) + ms / 1000.0;
}

// Final metrics of a finished run, from its log.
void readBack(ExperimentRun& r) {
  log::RunLogReader reader((fs::path(r.runDir) / "log.h5").string());
  const log::RunLogSchema schema = reader.schema();
  auto column = [&](const std::string& name) {
    for (size_t i = 0; i < schema.evalColumns.size(); ++i)
      if (schema.evalColumns[i] == name) return int(i);
    return -1;
  };
  const auto rows = reader.readEval(0, reader.evalRows());
  auto last = [&](const std::string& name) {
    const int c = column(name);
    double v = NAN;
    if (c >= 0)
      for (const auto& row : rows)
        if (std::isfinite(row.values[size_t(c)])) v = row.values[size_t(c)];
    return v;
  };
  r.valLoss = last("val_loss");
  r.valKl = last("val_kl");
  for (const auto& task : data::builtinTaskNames()) r.passRate[task] = last("pass_rate_" + task);
  const auto train = reader.readTrain(0, reader.trainRows());
  r.steps = train.empty() ? 0 : train.back().step;
  r.tokens = train.empty() ? 0 : train.back().tokens;
  const auto events = reader.events();
  if (!events.empty()) r.seconds = eventTime(events.back()) - eventTime(events.front());
}

}  // namespace

namespace {

// One run of the experiment: what it is, its configuration, and what will happen to it.
struct Step {
  ExperimentRun run;
  RunConfig config;
  PlannedRun plan;
};

// The experiment's runs in order, with the configuration each would run now.
std::vector<Step> experimentSteps(const ExperimentConfig& config, const std::string& dir) {
  std::string tasks;
  for (const auto& t : splitList(config.tasks)) tasks += (tasks.empty() ? "" : ",") + t;
  auto common = [&](const std::string& name) {
    return std::vector<std::string>{"run.name=" + name,
                                    "data.seed=" + std::to_string(config.dataSeed),
                                    "data.train=" + config.trainData,
                                    "data.seq_len=" + std::to_string(config.seqLen),
                                    "train.batch_size=" + std::to_string(config.batchSize),
                                    "train.threads=" + std::to_string(config.threads),
                                    "train.device=" + config.device,
                                    "train.eval_every=" + std::to_string(config.evalEvery),
                                    "train.eval_batches=" + std::to_string(config.evalBatches),
                                    "train.keep_checkpoints=0",
                                    "eval.tasks=" + tasks,
                                    "eval.task_items=" + std::to_string(config.taskItems)};
  };
  const std::string sftModel = (fs::path(dir) / "sft" / "model").string();
  std::vector<Step> steps;
  auto add = [&](const std::string& group, const std::string& recipe, const std::string& format,
                 const std::string& from, std::vector<std::string> overrides, int repeat = 0) {
    Step s;
    ExperimentRun& r = s.run;
    r.seed = config.seed + uint64_t(repeat);
    const std::string name = repeat == 0 ? group : group + "-seed" + std::to_string(r.seed);
    r.name = name, r.group = group, r.recipe = recipe, r.format = format, r.from = from;
    r.data = "sft";
    r.runDir = (fs::path(dir) / name).string();
    std::vector<std::string> all = common(name);
    all.push_back("run.seed=" + std::to_string(r.seed));
    all.push_back("recipe.name=" + recipe);
    // Only the quantizing runs take the activations key: SFT and the base model's evaluation are
    // the same runs in a W4A4 and a W4A16 experiment.
    if (format != "bf16") {
      all.push_back("quant.format=" + format);
      all.push_back("quant.activations=" + std::string(config.activations ? "true" : "false"));
    }
    all.insert(all.end(), overrides.begin(), overrides.end());
    s.config = RunConfig::fromYamlText("", all, "experiment run " + name);
    // Errors found later (a sequence longer than the model's context, ...) name the experiment's
    // own key, not only the run config's.
    static const std::pair<const char*, const char*> fromExperimentKey[] = {
        {"data.seq_len", "seq_len"},
        {"train.batch_size", "batch_size"},
        {"data.train", "train_data"},
        {"data.seed", "data_seed"},
        {"run.seed", "seed"},
        {"train.threads", "threads"},
        {"train.device", "device"},
        {"eval.task_items", "task_items"},
        {"train.eval_batches", "eval_batches"},
        {"train.eval_every", "eval_every"}};
    for (const auto& [runKey, experimentKey] : fromExperimentKey)
      s.config.origins[runKey] =
          "experiment key '" + std::string(experimentKey) + "' (run " + name + ")";
    s.plan.name = name, s.plan.runDir = r.runDir;
    steps.push_back(std::move(s));
  };
  auto stepCount = [](int64_t n) { return "train.max_steps=" + std::to_string(n); };
  auto lr = [](double v) {
    std::ostringstream s;
    s << std::setprecision(17) << "optim.lr=" << v;
    return s.str();
  };
  add("sft", "sft", "bf16", "base",
      {"model.path=" + config.baseModel, stepCount(config.sftSteps), lr(config.sftLr)});
  add("base", "sft", "bf16", "base",
      {"model.path=" + config.baseModel, stepCount(0), "eval.reference=" + sftModel});
  const std::vector<std::string> formats = splitList(config.formats);
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), {"model.path=" + sftModel, "eval.reference=" + sftModel});
    return extra;
  };
  auto fromSft = [&](int repeat) {
    for (const auto& f : formats) {
      add("ptq-" + f, "ptq", f, "sft", with({}), repeat);
      add("qat-" + f, "qat", f, "sft", with({stepCount(config.qatSteps), lr(config.qatLr)}),
          repeat);
      add("qad-" + f, "qad", f, "sft",
          with({stepCount(config.qadSteps), lr(config.qadLr), "recipe.teacher=" + sftModel}),
          repeat);
    }
  };
  fromSft(0);
  const int64_t baseSteps =
      config.baseQatSteps >= 0 ? config.baseQatSteps : config.sftSteps + config.qatSteps;
  add("qat-from-base-" + config.baseQatFormat, "qat", config.baseQatFormat, "base",
      {"model.path=" + config.baseModel, "eval.reference=" + sftModel, stepCount(baseSteps),
       lr(config.sftLr)});
  // Other data than the SFT data, scored on the SFT data's validation rows.
  const std::string f = config.offdomainFormat;
  auto otherData = [&](const std::string& name, const std::string& recipe, const std::string& data,
                       const std::string& kind, std::vector<std::string> extra) {
    extra.insert(extra.begin(),
                 {"data.train=" + data, "data.validation=heldout:" + config.trainData});
    add(name, recipe, f, "sft", with(std::move(extra)));
    steps.back().run.data = kind;
    steps.back().config.origins["data.train"] =
        "experiment key '" + std::string(kind == "random" ? "random_tokens" : "offdomain_data") +
        "' (run " + name + ")";
  };
  const std::vector<std::string> qat = {stepCount(config.qatSteps), lr(config.qatLr)};
  const std::vector<std::string> qad = {stepCount(config.qadSteps), lr(config.qadLr),
                                        "recipe.teacher=" + sftModel};
  if (!config.offdomainData.empty()) {
    otherData("qat-" + f + "-offdomain", "qat", config.offdomainData, "offdomain", qat);
    otherData("qad-" + f + "-offdomain", "qad", config.offdomainData, "offdomain", qad);
  }
  if (config.randomTokens) otherData("qad-" + f + "-random", "qad", "random:tokens", "random", qad);
  // The repeats last, so that one pass of every comparison is in the report early.
  for (int k = 1; k < config.repeats; ++k) fromSft(k);
  return steps;
}

// "train.max_steps (run.yaml: 15, now: 400)" for each key that differs.
std::string describeDifferences(const RunConfig& ran, const RunConfig& now,
                                const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys)
    out +=
        (out.empty() ? "" : ", ") + k + " (ran " + ran.valueOf(k) + ", now " + now.valueOf(k) + ")";
  return out;
}

// Decides each step's action from what its folder holds. Every run but sft reads the SFT model
// (as its start, teacher or reference), so a fresh SFT run makes every finished run stale.
void plan(std::vector<Step>& steps, const ExperimentOptions& options, bool refuseChanged) {
  std::vector<std::string> stale;
  bool sftRuns = false;
  for (Step& s : steps) {
    PlannedRun& p = s.plan;
    const fs::path dir(p.runDir);
    const RunState runState = readRunState(p.runDir);
    const std::string state = toString(runState);
    if (!fs::exists(dir)) {
      p.action = "run";
    } else if (state == "finished" && fs::exists(dir / "log.h5")) {
      std::vector<std::string> keys;
      try {
        const RunConfig ran = RunConfig::fromYamlFile((dir / "run.yaml").string());
        keys = differingKeys(ran, s.config);
        p.detail = describeDifferences(ran, s.config, keys);
      } catch (const Error& e) {
        keys = {"run.yaml"};
        p.detail = std::string("its run.yaml cannot be read: ") + e.what();
      }
      if (keys.empty() && sftRuns && s.run.name != "sft") {
        keys = {"model"};
        p.detail = "the SFT model it reads runs again";
      }
      p.action = keys.empty() ? "reuse" : "changed";
      s.run.differingKeys = keys;
    } else {
      // Unfinished (cancelled, failed, crashed, or still running): resumed when it ran this
      // configuration and has a checkpoint; otherwise in the way.
      std::string detail;
      bool resumable = false;
      if (state != "running") {
        try {
          const RunConfig ran = RunConfig::fromYamlFile((dir / "run.yaml").string());
          const auto keys = differingKeys(ran, s.config);
          const std::string checkpoint = latestCheckpointIn((dir / "checkpoints").string());
          resumable = keys.empty() && !checkpoint.empty() && !(sftRuns && s.run.name != "sft");
          const bool stale = sftRuns && s.run.name != "sft";
          detail = !keys.empty()        ? "it ran " + describeDifferences(ran, s.config, keys)
                   : stale              ? std::string("the SFT model it read runs again")
                   : checkpoint.empty() ? std::string("it has no checkpoint")
                                        : "from " + checkpoint;
        } catch (const Error& e) {
          detail = std::string("its run.yaml cannot be read: ") + e.what();
        }
      } else {
        detail = "it is running (pid in status.json)";
      }
      if (resumable) {
        p.action = "resume", p.detail = detail;
      } else if (options.changedRuns == ChangedRuns::Rerun && state != "running") {
        p.action = "rerun", p.detail = "unfinished (" + state + "): " + detail;
      } else {
        throw Error("an unfinished run (" + state + ") is in the way: " + detail, p.runDir,
                    state == "running" ? "wait for it or stop it, then run the experiment again"
                                       : "finish it with fp4lab train --output-dir " + p.runDir +
                                             " --resume-from-checkpoint latest, delete it, or pass "
                                             "--rerun-changed to move it aside and run it again");
      }
    }
    if (p.action == "changed") {
      if (options.changedRuns == ChangedRuns::Rerun)
        p.action = "rerun";
      else if (options.changedRuns == ChangedRuns::Reuse)
        p.action = "reuse-changed";
      else
        stale.push_back(p.name + ": " + p.detail);
    }
    if (s.run.name == "sft" && (p.action == "run" || p.action == "rerun" || p.action == "resume"))
      sftRuns = true;
    if (p.action != "reuse-changed") s.run.differingKeys.clear();
  }
  if (!stale.empty() && refuseChanged) {
    std::string list;
    for (const auto& line : stale) list += "\n  " + line;
    throw Error(std::to_string(stale.size()) + " finished run" + (stale.size() > 1 ? "s" : "") +
                    " ran another configuration than this one:" + list,
                options.dir,
                "pass --rerun-changed to move them to " +
                    (fs::path(options.dir) / "replaced").string() +
                    "/ and run them again, --reuse-changed to report them as they ran, or choose "
                    "another --output-dir");
  }
}

}  // namespace

std::vector<PlannedRun> planExperiment(const ExperimentConfig& config,
                                       const ExperimentOptions& options) {
  config.validate();
  std::vector<Step> steps = experimentSteps(config, options.dir);
  plan(steps, options, false);
  std::vector<PlannedRun> out;
  for (const auto& s : steps) out.push_back(s.plan);
  return out;
}

ExperimentResult runExperiment(const ExperimentConfig& config, const ExperimentOptions& options) {
  const auto started = std::chrono::steady_clock::now();
  ExperimentResult result;
  result.dir = options.dir;
  config.validate();
  std::vector<Step> steps = experimentSteps(config, options.dir);
  plan(steps, options, true);  // throws before anything is written
  files::createDirectories(options.dir);
  files::writeFileAtomically((fs::path(options.dir) / "experiment.yaml").string(), config.toYaml());

  for (Step& s : steps) {
    ExperimentRun& r = s.run;
    const std::string& action = s.plan.action;
    if (action == "rerun") {
      const fs::path replaced = fs::path(options.dir) / "replaced";
      files::createDirectories(replaced.string());
      const fs::path aside = replaced / (r.name + "-" + utcCompactTimestamp());
      if (::rename(r.runDir.c_str(), aside.c_str()) != 0)
        throw Error("cannot move the run aside to " + aside.string() + ": " + std::strerror(errno),
                    r.runDir, "move or delete it yourself, then run the experiment again");
    }
    if (action == "reuse" || action == "reuse-changed") {
      r.reused = true;
    } else {
      RunOptions o;
      o.runDir = r.runDir;
      if (action == "resume") o.resumeFrom = "latest";
      o.stopRequested = options.stopRequested;
      const std::string name = r.name;
      o.onEvent = [&](const RunEvent& e) {
        if (options.onEvent) options.onEvent(name, e);
      };
      const RunConfig runConfig = action == "resume" ? resumeConfig(r.runDir, {}) : s.config;
      RunResult rr = executeRun(runConfig, o);
      if (rr.state != RunState::Finished)
        throw Error("run " + name + " " + toString(rr.state) +
                        (rr.message.empty() ? "" : ": " + rr.message),
                    r.runDir, "finished runs are reused when the experiment is run again");
    }
    r.state = "finished";
    // What the run itself ran: its run.yaml.
    const RunConfig ran = RunConfig::fromYamlFile((fs::path(r.runDir) / "run.yaml").string());
    r.maxSteps = ran.maxSteps;
    readBack(r);
    result.runs.push_back(r);
  }

  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  assessExperiment(result, config, options.commandLine);
  const std::string reportPath = (fs::path(options.dir) / "report.md").string();
  files::writeFileAtomically((fs::path(options.dir) / "report.csv").string(), result.reportCsv);
  // If the appendix fails, the tables are still worth keeping (a rerun with the same folder
  // reuses every run); the error propagates after they are written.
  std::exception_ptr appendixError;
  if (options.reportAppendix) {
    try {
      result.reportMarkdown += options.reportAppendix(result);
    } catch (...) {
      appendixError = std::current_exception();
    }
  }
  files::writeFileAtomically(reportPath, result.reportMarkdown);
  if (appendixError) std::rethrow_exception(appendixError);
  return result;
}

}  // namespace fp4lab::run
