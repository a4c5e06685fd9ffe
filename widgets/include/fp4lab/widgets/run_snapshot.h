// What the workbench knows about one run at one moment: its folder (state, config), its curves as
// read so far, and the summary numbers the runs table shows. The log worker builds snapshots in
// its own thread and hands them to the GUI thread whole; a snapshot never changes after that, and
// the curves of a run that did not grow are shared with the previous snapshot (shared_ptr), so
// publishing 20 finished runs copies 20 pointers. Plain C++ (no Qt), so tests and benchmarks can
// build snapshots directly.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fp4lab/run/run_folder.h"
#include "fp4lab/widgets/run_curves.h"

namespace fp4lab::widgets {

struct RunSummary {
  int64_t step = 0, maxSteps = 0;  // last training step logged (or status.json's), planned total
  double lastTrainLoss = NAN, lastValLoss = NAN, bestValLoss = NAN, lastKl = NAN;
  double tokensPerSecond = NAN;             // of the last training row
  double wallSeconds = NAN;                 // wall time of the last row written (train or eval)
  std::map<std::string, double> passRates;  // task -> last logged pass rate in [0, 1]
  std::string createdUtc;  // the log's created_utc, or status.json's first sighting
};

struct RunSnapshot {
  std::string id;         // the run folder's absolute path: the key every view uses
  std::string name;       // the folder's name
  std::string root;       // the run root it was found under
  run::RunFolder folder;  // status.json and run.yaml as read (state Crashed for a dead writer)
  std::shared_ptr<const RunCurves> curves;  // null until a readable log exists
  std::string logError;  // why the log could not be read ("" when fine or absent)
  RunSummary summary;
  // This workbench started its process, which has not yet said "running" (loading LibTorch and
  // the model takes seconds): status.json still says "queued", the window says "starting".
  bool starting = false;

  RunState state() const { return folder.state; }
  bool damaged() const {
    return !logError.empty() || !folder.configError.empty() || !folder.statusError.empty();
  }
  const std::string& recipe() const { return folder.config.recipe; }
};

// Queued or running: a run the window must not delete and whose state can still change.
inline bool isActive(RunState s) {
  return s == RunState::Running || s == RunState::Queued;
}

// Published by the worker: every run of every root, sorted by id.
using RunSnapshots = std::vector<RunSnapshot>;
using RunSnapshotsPtr = std::shared_ptr<const RunSnapshots>;

// The state as the window shows it: "starting" (see above), "finished (damaged)" (a file of the run
// cannot be read; damageText says which and why), "unknown" for a folder without status.json.
std::string stateLabel(const RunSnapshot& run);
// One line per damaged file ("status.json: ...", "log: ...", "run.yaml: ..."), "" when none.
std::string damageText(const RunSnapshot& run);

// The summary numbers of a run from its curves (and its folder's status for the step and total).
RunSummary summarize(const run::RunFolder& folder, const RunCurves* curves);

// "NVFP4 W4A4", "MXFP4 W4A16 floor", "NVFP4 2D W4A4", "BF16": the format column of a run's
// config.
std::string formatLabel(const run::RunConfig& config);

}  // namespace fp4lab::widgets
