// Runner: executes one run (a folder with run.yaml, log.h5, status.json, checkpoints/) and
// reports progress as RunEvents. Plain C++: the CLI and the GUI's process model both use it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "fp4lab/common/run_state.h"
#include "fp4lab/run/run_config.h"
#include "fp4lab/run/run_folder.h"

namespace fp4lab::run {

// One progress report. Serialised as one JSON line for `fp4lab train --events jsonl`.
struct RunEvent {
  EventKind kind = EventKind::Step;
  int64_t step = 0;
  int64_t maxSteps = 0;
  int64_t tokens = 0;
  double loss = 0, lr = 0, gradNorm = 0, tokensPerSecond = 0, etaSeconds = 0, wallSeconds = 0;
  std::map<std::string, double> metrics;  // eval: val_loss, val_ppl, ...
  std::string message;                    // warning/failed text, or the run folder for started
  std::string path;                       // checkpoint folder, run folder
  std::string toJson() const;
};

struct RunOptions {
  std::string runDir;  // --output-dir: the run folder itself; empty: run.output_dir/<name>-<utc>
  std::string resumeFrom;  // a checkpoints/step-N folder, or "latest" (needs runDir)
  std::function<void(const RunEvent&)> onEvent;
  const std::atomic<bool>* stopRequested = nullptr;  // set by SIGINT/SIGTERM handlers
  // Check everything that can be checked without training (the config, the resume point, the
  // model, teacher and reference folders, the data, the tasks), write nothing, and return with
  // state Unknown and a summary in message.
  bool dryRun = false;
};

struct RunResult {
  std::string runDir;
  RunState state = RunState::Unknown;  // Finished, Cancelled or Failed
  int64_t steps = 0;
  std::string message;
};

// Runs training end to end. Bad input throws fp4lab::Error before anything is written where
// possible; failures after the run folder exists are recorded in status.json and the log.
RunResult executeRun(const RunConfig& config, const RunOptions& options);

// The run folder executeRun would use (options.runDir; a checkpoint's run; else
// run.output_dir/<name>-<utc now>): what `fp4lab train --nproc` hands every rank.
std::string runFolderFor(const RunConfig& config, const RunOptions& options);

// Data-parallel runs: executeRun reads the launcher's RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT (torchrun's, or those `fp4lab train --nproc N`
// sets for its N processes) and trains as one rank of a Gloo process group: train.batch_size is
// the global batch, and only rank 0 writes the run folder and emits events.

}  // namespace fp4lab::run
