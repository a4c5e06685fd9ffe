// readRunFolder decides a run's state as the GUI and the experiment will see it: "running" only
// while the process that wrote status.json is alive, which a reused pid must not fake.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../temp_dir.h"
#include "fp4lab/common/run_state.h"
#include "fp4lab/run/run_folder.h"

using namespace fp4lab;

namespace {
RunState stateWith(const testing::TempDir& dir, const nlohmann::json& status) {
  std::ofstream(dir.file("status.json")) << status.dump();
  return run::readRunFolder(dir.path.string()).state;
}
}  // namespace

TEST_CASE("A running state holds only while its writer is alive", "[run][folder]") {
  testing::TempDir dir;
  const ProcessIdentity self = thisProcess();
  nlohmann::json status = {
      {"state", "running"},     {"pid", self.pid}, {"pid_start_ticks", self.startTicks},
      {"boot_id", self.bootId}, {"step", 3},       {"max_steps", 10}};
  CHECK(stateWith(dir, status) == RunState::Running);  // this process wrote it: alive
  CHECK(run::readRunFolder(dir.path.string()).step == 3);
  status["pid_start_ticks"] = self.startTicks + 1;  // the pid now belongs to another process
  CHECK(stateWith(dir, status) == RunState::Crashed);
  status["pid_start_ticks"] = self.startTicks;
  status["boot_id"] = "another boot";
  CHECK(stateWith(dir, status) == RunState::Crashed);
  // An older status.json with the pid alone: this very process cannot be its writer.
  CHECK(stateWith(dir, {{"state", "running"}, {"pid", self.pid}}) == RunState::Crashed);
  CHECK(stateWith(dir, {{"state", "running"}, {"pid", 999999999}}) == RunState::Crashed);
  CHECK(stateWith(dir, {{"state", "cancelled"}, {"pid", 999999999}}) == RunState::Cancelled);
  std::ofstream(dir.file("status.json")) << "garbage";
  CHECK(run::readRunFolder(dir.path.string()).state == RunState::Unknown);
}

TEST_CASE("A damaged status.json says why; a queued run outlives no workbench", "[run][folder]") {
  testing::TempDir dir;
  std::ofstream(dir.file("status.json")) << "garbage";
  run::RunFolder f = run::readRunFolder(dir.path.string());
  CHECK(f.state == RunState::Unknown);
  CHECK(f.statusError.find("not a JSON object") != std::string::npos);
  std::ofstream(dir.file("status.json")) << R"({"step": 3})";
  CHECK(run::readRunFolder(dir.path.string()).statusError.find("no \"state\"") !=
        std::string::npos);
  std::ofstream(dir.file("status.json")) << R"({"state": "sleeping"})";
  CHECK(run::readRunFolder(dir.path.string()).statusError.find("'sleeping'") != std::string::npos);
  // No status.json at all is not damage.
  std::filesystem::remove(dir.file("status.json"));
  CHECK(run::readRunFolder(dir.path.string()).statusError.empty());

  // "queued" holds while the workbench that wrote it lives; once it is gone nothing will start
  // the run, so it must not stay "queued" for ever.
  const ProcessIdentity self = thisProcess();
  nlohmann::json status = {{"state", "queued"},
                           {"pid", self.pid},
                           {"pid_start_ticks", self.startTicks},
                           {"boot_id", self.bootId}};
  CHECK(stateWith(dir, status) == RunState::Queued);
  status["pid_start_ticks"] = self.startTicks + 1;
  CHECK(stateWith(dir, status) == RunState::Cancelled);
  CHECK(run::readRunFolder(dir.path.string()).message.find("never started") != std::string::npos);
}
