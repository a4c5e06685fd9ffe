// The built-in experiment: from a base model, SFT in BF16, then PTQ, QAT and QAD to MXFP4 and
// NVFP4 from the SFT model, and QAT straight from the base model; every stage a run folder with its
// log, and a report (markdown + CSV) that compares them and checks the published findings.
// Plain C++ (the GUI can drive it): runs go through executeRun, results are read from the logs.
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "fp4lab/run/runner.h"

namespace fp4lab::run {

struct ExperimentConfig {
  std::string baseModel = "builtin:tiny";
  std::string trainData = "builtin:sft";
  uint64_t seed = 1234;      // every run's run.seed (training order, initialisation)
  uint64_t dataSeed = 1234;  // every run's data.seed (examples, validation split, task items)
  int batchSize = 16;
  int seqLen = 256;
  int threads = 0;             // 0: every core the process may use
  std::string device = "cpu";  // train.device of every run
  int64_t sftSteps = 600;
  double sftLr = 1e-3;
  // 200 steps of QAT and of QAD: on this project's 2-core machine the whole experiment then takes
  // about 10 minutes (docs/results.md), inside its 20-minute budget.
  int64_t qatSteps = 200;
  double qatLr = 1e-4;
  int64_t qadSteps = 200;
  double qadLr = 1e-4;  // as QAT: the two recipes compared at equal steps and learning rate
  int64_t evalEvery = 25;
  int64_t evalBatches = 8;
  int64_t taskItems = 300;  // a pass rate near 95% then has a standard error of ~1.3 points
  std::string tasks = "reasoning_language,false_refusal";  // the built-in tasks graded
  std::string formats = "mxfp4,nvfp4";
  bool activations = true;              // W4A4; false: W4A16
  std::string baseQatFormat = "mxfp4";  // the QAT-from-base run (no BF16 stage)
  int64_t baseQatSteps = -1;            // -1: sftSteps + qatSteps (the same training budget)
  // The PTQ, QAT and QAD runs from the SFT model at this many run seeds (seed, seed + 1, ...; the
  // data seed stays), so that the report can give each comparison's mean and spread: at this
  // scale one run's gap recovered moves by tens of points with the seed (docs/results.md).
  int repeats = 1;
  // The QAD report's robustness setting: QAT and QAD from the SFT model on other data than the
  // SFT data (empty: not run), and QAD on uniformly random tokens, in one format. They are scored
  // on the SFT data's own validation rows (data.validation=heldout:<train_data>), so their KL to
  // the SFT model says how far each recipe drifts from the model it started from.
  std::string offdomainData;
  bool randomTokens = false;
  std::string offdomainFormat = "nvfp4";

  // The --quick variant the tests use (a few minutes on two cores): fewer steps and items.
  static ExperimentConfig quick();
  // A named starting point (keys given after it override it): tiny (the default), tiny-quick
  // (= quick()), smollm2 (SmolLM2-135M-Instruct on its two tasks, with the off-domain runs: hours
  // on two cores) and smollm2-quick (the same runs, small; under 30 minutes). Unknown names throw.
  static ExperimentConfig preset(const std::string& name);
  static std::vector<std::string> presetNames();
  // YAML (flat keys, e.g. `sft_steps: 200`) then key=value overrides; unknown keys, wrong types
  // and values out of bounds are errors naming the key, file:line and the closest known key.
  void applyYamlFile(const std::string& path);
  void applyOverride(const std::string& assignment);
  // Checks across keys (formats); throws fp4lab::Error naming the experiment key.
  void validate() const;
  std::string toYaml() const;

  // Where each key was set, for messages (not part of the configuration).
  std::map<std::string, std::string> origins;
};

struct ExperimentRun {
  std::string name;          // base, sft, ptq-mxfp4, qat-nvfp4, qad-nvfp4, qat-from-base-mxfp4, ...
                             // and for repeats qat-nvfp4-seed1235, ...
  std::string group;         // the name without the seed suffix
  uint64_t seed = 0;         // run.seed
  std::string recipe;        // sft, ptq, qat, qad
  std::string format;        // bf16, mxfp4, nvfp4
  std::string from;          // base or sft
  std::string data = "sft";  // what it trained on: the SFT data ("sft"), "offdomain" or "random"
  std::string runDir, state;
  std::map<std::string, double> passRate;  // task -> pass rate (NaN: not measured)
  double valLoss = NAN, valKl = NAN, gapRecovered = NAN, seconds = NAN;
  int64_t steps = 0, tokens = 0;
  bool reused = false;  // finished in an earlier invocation and read back
  // train.max_steps from the run's own run.yaml (what it ran, which may differ from the
  // experiment's keys when reused with ExperimentOptions::changedRuns = Reuse).
  int64_t maxSteps = 0;
  // Keys whose values in the run's run.yaml differ from what the experiment would run now
  // (only for runs reused despite them).
  std::vector<std::string> differingKeys;
};

struct ExperimentGoal {
  std::string goal, measured;
  bool met = false;
};

// One group's runs over the seeds: means, and sample standard deviations (NaN for one run).
struct ExperimentSummary {
  ExperimentRun mean;  // name = group; passRate, valLoss, valKl, gapRecovered are means
  std::map<std::string, double> passRateSd;
  double valLossSd = NAN, valKlSd = NAN, gapSd = NAN, gapMin = NAN, gapMax = NAN;
  int count = 0;
};

struct ExperimentResult {
  std::string dir;
  std::vector<ExperimentRun> runs;
  std::vector<ExperimentSummary> summaries;  // one per group, in run order; goals are read here
  std::vector<ExperimentGoal> goals;
  std::string reportMarkdown, reportCsv;  // also written to dir/report.md and dir/report.csv
  double seconds = 0;
};

// What to do with a finished run in the folder whose run.yaml differs from what would run now.
enum class ChangedRuns {
  Refuse,  // stop before running anything, naming the runs and the keys (the default)
  Rerun,   // move the run to DIR/replaced/<name>-<utc> and run it again
  Reuse,   // report it as it ran (the report lists the keys that differ)
};

struct ExperimentOptions {
  std::string dir;          // the experiment folder; finished runs already in it are reused
  std::string commandLine;  // recorded in the report
  std::function<void(const std::string& runName, const RunEvent&)> onEvent;
  const std::atomic<bool>* stopRequested = nullptr;
  // Called once every run is assessed; what it returns is appended to report.md (the app's PNG
  // plots section). If it throws, report.md is written without it and the error propagates.
  std::function<std::string(const ExperimentResult&)> reportAppendix;
  ChangedRuns changedRuns = ChangedRuns::Refuse;
};

// One run of the experiment and what runExperiment will do with it.
struct PlannedRun {
  std::string name, runDir;
  std::string action;  // run, reuse, resume (unfinished, same config), rerun, reuse-changed
  std::string detail;  // why: the keys that differ, the checkpoint resumed, ...
};

// The runs in order and what will happen to each, without writing anything: finished runs that
// ran another configuration show as "changed" (with ChangedRuns::Refuse, runExperiment stops on
// them). Throws fp4lab::Error for a configuration error and for unfinished runs in the way.
std::vector<PlannedRun> planExperiment(const ExperimentConfig& config,
                                       const ExperimentOptions& options);

ExperimentResult runExperiment(const ExperimentConfig& config, const ExperimentOptions& options);

// The report of finished runs (exposed for tests): fills gapRecovered (against the PTQ run of the
// same format and seed), the summaries and the goals (on the means over seeds), reportCsv and
// reportMarkdown (which records commandLine).
void assessExperiment(ExperimentResult& result, const ExperimentConfig& config,
                      const std::string& commandLine = "");

}  // namespace fp4lab::run
