// Names of run states and event kinds.
#include "fp4lab/common/run_state.h"

namespace fp4lab {

const char* toString(RunState state) {
  switch (state) {
    case RunState::Queued:
      return "queued";
    case RunState::Running:
      return "running";
    case RunState::Finished:
      return "finished";
    case RunState::Failed:
      return "failed";
    case RunState::Cancelled:
      return "cancelled";
    case RunState::Crashed:
      return "crashed";
    case RunState::Unknown:
      break;
  }
  return "unknown";
}

RunState parseRunState(const std::string& text) {
  for (RunState s : {RunState::Queued, RunState::Running, RunState::Finished, RunState::Failed,
                     RunState::Cancelled, RunState::Crashed})
    if (text == toString(s)) return s;
  return RunState::Unknown;
}

const char* toString(EventKind kind) {
  switch (kind) {
    case EventKind::Started:
      return "started";
    case EventKind::Step:
      return "step";
    case EventKind::Eval:
      return "eval";
    case EventKind::Checkpoint:
      return "checkpoint";
    case EventKind::Warning:
      return "warning";
    case EventKind::Finished:
      return "finished";
    case EventKind::Failed:
      return "failed";
    case EventKind::Cancelled:
      return "cancelled";
  }
  return "unknown";
}

}  // namespace fp4lab
