// Names of run states and event kinds.
#include "fp4lab/common/run_state.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

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

namespace {

// Fields of /proc/<pid>/stat after the parenthesised command name (which may hold spaces):
// field 3 is the state, field 22 the start time in clock ticks. Empty if unreadable.
std::vector<std::string> statFields(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return {};
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 > stat.size()) return {};
  std::istringstream fields(stat.substr(close + 2));
  std::vector<std::string> out;
  for (std::string field; out.size() < 20 && fields >> field;) out.push_back(field);
  return out;
}

int64_t startTicksOf(int pid) {
  const std::vector<std::string> f = statFields(pid);
  return f.size() >= 20 ? std::strtoll(f[19].c_str(), nullptr, 10) : -1;
}

std::string bootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

}  // namespace

ProcessIdentity thisProcess() {
  ProcessIdentity id;
  id.pid = int(::getpid());
  id.startTicks = startTicksOf(id.pid);
  id.bootId = bootId();
  return id;
}

bool isAlive(const ProcessIdentity& id) {
  if (id.pid <= 0) return false;
  if (::kill(id.pid, 0) != 0 && errno == ESRCH) return false;
  if (!id.bootId.empty() && !bootId().empty() && id.bootId != bootId()) return false;
  const std::vector<std::string> f = statFields(id.pid);
  // A zombie (killed, not yet reaped by its parent) is gone: kill(pid, 0) still succeeds on it.
  if (!f.empty() && (f[0] == "Z" || f[0] == "X")) return false;
  if (id.startTicks >= 0 && f.size() >= 20) {
    const int64_t now = std::strtoll(f[19].c_str(), nullptr, 10);
    if (now != id.startTicks) return false;
  }
  return true;
}

}  // namespace fp4lab
