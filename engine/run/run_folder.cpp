// Reading run folders (state, config, checkpoints) and the configuration of a resumed run.
#include "fp4lab/run/run_folder.h"

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <nlohmann/json.hpp>

#include "fp4lab/common/files.h"
#include "fp4lab/common/time.h"
#include "fp4lab/error.h"
#include "fp4lab/run/config_keys.h"

namespace fp4lab::run {

std::string latestCheckpointIn(const std::string& checkpointsDir) {
  if (!files::isDirectory(checkpointsDir)) return "";
  int64_t best = -1;
  std::string bestPath;
  for (const auto& name : files::listDirectory(checkpointsDir)) {
    if (name.rfind("step-", 0) != 0 || name.size() == 5) continue;
    if (name.find_first_not_of("0123456789", 5) != std::string::npos || name.size() > 20) continue;
    const std::string path = files::join(checkpointsDir, name);
    if (!files::isRegularFile(files::join(path, "trainer_state.json"))) continue;
    const int64_t step = std::stoll(name.substr(5));
    if (step > best) best = step, bestPath = path;
  }
  return bestPath;
}

void writeRunStatus(const std::string& dir, RunState state, int64_t step, int64_t maxSteps,
                    const std::string& message) {
  static const ProcessIdentity self = thisProcess();
  nlohmann::json s = {
      {"state", toString(state)},     {"pid", self.pid}, {"pid_start_ticks", self.startTicks},
      {"boot_id", self.bootId},       {"step", step},    {"max_steps", maxSteps},
      {"updated_utc", utcTimestamp()}};
  if (!message.empty()) s["message"] = message;
  files::writeFileAtomically(files::join(dir, "status.json"), s.dump(2) + "\n");
}

RunFolder readRunFolder(const std::string& dir) {
  RunFolder f;
  f.dir = dir;
  std::ifstream in(files::join(dir, "status.json"));
  if (in) {
    const nlohmann::json s = nlohmann::json::parse(in, nullptr, false);
    if (s.is_discarded() || !s.is_object())
      f.statusError = "not a JSON object (damaged, or written by another program)";
    else if (!s.contains("state") || !s["state"].is_string())
      f.statusError = "no \"state\" text in it";
    else if (parseRunState(s["state"].get<std::string>()) == RunState::Unknown)
      f.statusError = "an unknown state '" + s["state"].get<std::string>() + "'";
    if (f.statusError.empty()) {
      f.state = parseRunState(s["state"].get<std::string>());
      auto integer = [&](const char* key) {
        return s.contains(key) && s[key].is_number_integer() ? s[key].get<int64_t>() : 0;
      };
      auto text = [&](const char* key) {
        return s.contains(key) && s[key].is_string() ? s[key].get<std::string>() : std::string();
      };
      f.pid = int(integer("pid"));
      f.step = integer("step");
      f.maxSteps = integer("max_steps");
      f.message = text("message");
      f.updatedUtc = text("updated_utc");
      // A running run whose writer is gone crashed. Pids are reused (in a container every
      // fp4lab may be pid 1): where status.json records the writer's start time and boot, a
      // pid now held by another process reads as gone; without them (older runs), a pid that
      // is this very process cannot be the writer of a run this process is reading.
      ProcessIdentity writer;
      writer.pid = f.pid;
      writer.startTicks = integer("pid_start_ticks") > 0 ? integer("pid_start_ticks") : -1;
      writer.bootId = text("boot_id");
      const bool identified = writer.startTicks >= 0;
      if (f.state == RunState::Running &&
          (!isAlive(writer) || (!identified && f.pid == int(::getpid()))))
        f.state = RunState::Crashed;
      // The workbench writes "queued" and starts the run later; when that workbench is gone
      // (closed by kill -9, or a machine that rebooted), nothing will start it.
      if (f.state == RunState::Queued && identified && !isAlive(writer)) {
        f.state = RunState::Cancelled;
        f.message =
            "never started: the workbench that queued it closed (Duplicate as new run "
            "to run it)";
      }
    }
  }
  const std::string yaml = files::join(dir, "run.yaml");
  if (files::exists(yaml)) {
    try {
      f.config = RunConfig::fromYamlFile(yaml);
      f.hasConfig = true;
    } catch (const Error& e) {
      f.configError = e.what();
    }
  }
  f.latestCheckpoint = latestCheckpointIn(files::join(dir, "checkpoints"));
  return f;
}

RunState readRunState(const std::string& dir) {
  return readRunFolder(dir).state;
}

RunConfig resumeConfig(const std::string& runDir, const std::vector<std::string>& overrides,
                       const std::string& configFile) {
  const std::string yaml = files::join(runDir, "run.yaml");
  if (!files::isDirectory(runDir))
    throw Error("no run to resume: the folder does not exist", runDir,
                "pass the folder of the run to resume with --output-dir");
  if (!files::isRegularFile(yaml))
    throw Error("no run to resume: no run.yaml (not a run folder, or its configuration was lost)",
                runDir, "pass the folder of the run to resume with --output-dir");
  const RunConfig ran = RunConfig::fromYamlFile(yaml);
  RunConfig c = ran;
  // `onlySet`: compare only the keys the candidate's source set (a --config file need not repeat
  // every key; the ones it leaves out keep the run's values).
  auto refuseChanges = [&](const RunConfig& candidate, const std::string& source, bool onlySet) {
    for (const auto& key : differingKeys(ran, candidate)) {
      if (onlySet && !candidate.origins.count(key)) continue;
      throw Error("'" + key + "' cannot change when a run resumes: the run has " +
                      ran.valueOf(key) + ", " + source + " says " + candidate.valueOf(key),
                  candidate.originOf(key),
                  "resume without changing it, or start a new run in another --output-dir");
    }
  };
  if (!configFile.empty()) {
    // The file's values must agree with the run's on every key that defines it.
    RunConfig fromFile = RunConfig::fromYamlFile(configFile);
    refuseChanges(fromFile, configFile, true);
    // ... and its other keys (threads, checkpoint cadence) apply where the file sets them.
    const auto values = fromFile.flatten();
    for (size_t i = 0; i < values.size(); ++i) {
      const ConfigKey& key = runConfigKeys()[i];
      if (key.definesRun || !fromFile.origins.count(key.name)) continue;
      c.applyOverride(key.name + "=" + values[i].second);
      c.origins[key.name] = fromFile.originOf(key.name);
    }
  }
  for (const auto& o : overrides) {
    RunConfig next = c;
    next.applyOverride(o);
    refuseChanges(next, "the command line", false);
    c = next;
  }
  c.validate();
  return c;
}

}  // namespace fp4lab::run
