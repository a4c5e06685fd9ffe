// The states of a run and the kinds of its events, as enums with the names status.json, the
// JSON events and the log use. Plain C++: the engine writes them, the CLI and the GUI read them.
#pragma once

#include <string>

namespace fp4lab {

enum class RunState { Queued, Running, Finished, Failed, Cancelled, Crashed, Unknown };
// "queued", "running", ...; parse gives Unknown for any other text.
const char* toString(RunState state);
RunState parseRunState(const std::string& text);

enum class EventKind { Started, Step, Eval, Checkpoint, Warning, Finished, Failed, Cancelled };
const char* toString(EventKind kind);

}  // namespace fp4lab
