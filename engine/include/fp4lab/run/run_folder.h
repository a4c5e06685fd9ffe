// A run folder as any process sees it: its state (status.json; "running" with a dead pid reads
// as crashed), its configuration (run.yaml) and its checkpoints; and the configuration a resumed
// run continues with. Plain C++: the CLI, the experiment and the GUI read runs through it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fp4lab/common/run_state.h"
#include "fp4lab/run/run_config.h"

namespace fp4lab::run {

struct RunFolder {
  std::string dir;
  // Unknown: no status.json, or one that cannot be read (statusError says why). "queued" whose
  // writer (the workbench that queued it) is gone reads as Cancelled: it never started.
  RunState state = RunState::Unknown;
  std::string statusError;  // why status.json could not be read ("not a JSON object"), if so
  int pid = 0;
  int64_t step = 0, maxSteps = 0;
  std::string message, updatedUtc;
  bool hasConfig = false;  // run.yaml was read into config
  RunConfig config;
  std::string configError;       // why run.yaml could not be read, when it exists
  std::string latestCheckpoint;  // the newest complete checkpoints/step-N, "" if none
};

// Never throws for a damaged folder: what cannot be read is left empty (and said in
// configError for run.yaml).
RunFolder readRunFolder(const std::string& dir);
RunState readRunState(const std::string& dir);

// Writes dir/status.json atomically: the state, this process's identity (pid, start time, boot)
// and the step. The runner writes it as it trains; the GUI writes "queued" for a run it has
// prepared but not started, and "cancelled" for one taken off the queue. Throws fp4lab::Error.
void writeRunStatus(const std::string& dir, RunState state, int64_t step, int64_t maxSteps,
                    const std::string& message = {});

// The newest complete checkpoint folder (one with trainer_state.json) under `checkpointsDir`,
// "" if none.
std::string latestCheckpointIn(const std::string& checkpointsDir);

// The configuration a run resumes with: its run.yaml, then `configFile` (when given) and the
// `overrides` in order. Keys that define the run (ConfigKey::definesRun: recipe, quantization,
// model, data, seed, schedule, batch) must keep run.yaml's values: a change throws fp4lab::Error
// naming the key, both values and where the new one came from. Other keys (threads, checkpoint
// cadence) apply.
RunConfig resumeConfig(const std::string& runDir, const std::vector<std::string>& overrides,
                       const std::string& configFile = "");

}  // namespace fp4lab::run
