// The states of a run and the kinds of its events, as enums with the names status.json, the
// JSON events and the log use. Plain C++: the engine writes them, the CLI and the GUI read them.
#pragma once

#include <cstdint>
#include <string>

namespace fp4lab {

enum class RunState { Queued, Running, Finished, Failed, Cancelled, Crashed, Unknown };
// "queued", "running", ...; parse gives Unknown for any other text.
const char* toString(RunState state);
RunState parseRunState(const std::string& text);

enum class EventKind { Started, Step, Eval, Checkpoint, Warning, Finished, Failed, Cancelled };
const char* toString(EventKind kind);

// Who wrote a status file: a pid alone is reused (in a container every fp4lab may be pid 1), so
// the process's start time (clock ticks since boot, /proc/<pid>/stat) and the boot's id
// (/proc/sys/kernel/random/boot_id) say whether that pid is still the same process.
struct ProcessIdentity {
  int pid = 0;
  int64_t startTicks = -1;  // -1: unknown
  std::string bootId;       // "": unknown
};
ProcessIdentity thisProcess();
// True when the process `id` names is alive now: its pid exists and, where the start time and
// boot are known, they match (a reused pid or a reboot reads as gone).
bool isAlive(const ProcessIdentity& id);

}  // namespace fp4lab
