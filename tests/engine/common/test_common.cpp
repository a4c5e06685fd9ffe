// fp4lab_common: an atomic file is the old or the complete new file, never a part, and leaves no
// temporary behind; folders are published whole; run states and event kinds keep their names;
// timestamps have the documented form.
#include <catch2/catch.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "../temp_dir.h"
#include "fp4lab/common/files.h"
#include "fp4lab/common/run_state.h"
#include "fp4lab/common/time.h"
#include "fp4lab/error.h"

using namespace fp4lab;

namespace {
std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
}  // namespace

TEST_CASE("An atomic file replaces the old one only when committed", "[common][files]") {
  testing::TempDir dir;
  const std::string path = dir.file("status.json");
  files::writeFileAtomically(path, "old");
  {
    files::AtomicFile file(path);
    file.write("new, partly", 11);
    CHECK(read(path) == "old");  // not yet committed
  }                              // destroyed without commit: an error path
  CHECK(read(path) == "old");
  CHECK(files::listDirectory(dir.path.string()) == std::vector<std::string>{"status.json"});
  {
    files::AtomicFile file(path);
    file.write("new", 3);
    file.commit();
  }
  CHECK(read(path) == "new");
  CHECK(files::listDirectory(dir.path.string()) == std::vector<std::string>{"status.json"});
  // A missing folder is an error naming the path, and creates nothing.
  CHECK_THROWS_WITH(files::writeFileAtomically(dir.file("missing/x.json"), "x"),
                    Catch::Contains("missing/x.json") && Catch::Contains("cannot create"));
}

TEST_CASE("publishFolder replaces a folder by a complete one", "[common][files]") {
  testing::TempDir dir;
  const std::string target = dir.file("model"), staging = dir.file("model.tmp");
  files::createDirectories(target);
  files::writeFileAtomically(files::join(target, "a"), "1");
  files::createDirectories(staging);
  files::writeFileAtomically(files::join(staging, "b"), "2");
  files::publishFolder(staging, target);
  CHECK(files::listDirectory(target) == std::vector<std::string>{"b"});
  CHECK_FALSE(files::exists(staging));
  // A file where the folder should go is refused and left alone.
  const std::string plain = dir.file("plain");
  files::writeFileAtomically(plain, "keep");
  files::createDirectories(staging);
  CHECK_THROWS_WITH(files::publishFolder(staging, plain), Catch::Contains("not a folder"));
  CHECK(read(plain) == "keep");
}

TEST_CASE("Run states and event kinds keep the names the files use", "[common][state]") {
  for (RunState s : {RunState::Queued, RunState::Running, RunState::Finished, RunState::Failed,
                     RunState::Cancelled, RunState::Crashed})
    CHECK(parseRunState(toString(s)) == s);
  CHECK(std::string(toString(RunState::Cancelled)) == "cancelled");
  CHECK(parseRunState("bogus") == RunState::Unknown);
  CHECK(std::string(toString(EventKind::Checkpoint)) == "checkpoint");
}

TEST_CASE("UTC timestamps have the documented form", "[common][time]") {
  CHECK(std::regex_match(utcTimestamp(), std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")));
  CHECK(std::regex_match(utcTimestamp(true),
                         std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)")));
  CHECK(std::regex_match(utcCompactTimestamp(), std::regex(R"(\d{8}-\d{6})")));
}

TEST_CASE("A process identity tells a live writer from a reused pid or another boot",
          "[common][state]") {
  const ProcessIdentity self = thisProcess();
  REQUIRE(self.pid > 0);
  REQUIRE(self.startTicks > 0);
  REQUIRE_FALSE(self.bootId.empty());
  CHECK(isAlive(self));
  ProcessIdentity reused = self;
  reused.startTicks += 1;  // the same pid, another process
  CHECK_FALSE(isAlive(reused));
  ProcessIdentity rebooted = self;
  rebooted.bootId = "00000000-0000-0000-0000-000000000000";
  CHECK_FALSE(isAlive(rebooted));
  ProcessIdentity unknown;  // an older status.json: the pid alone
  unknown.pid = self.pid;
  CHECK(isAlive(unknown));
  ProcessIdentity gone;
  gone.pid = 999999999;  // beyond any pid_max
  CHECK_FALSE(isAlive(gone));
  // A child that exited but was not reaped yet (a zombie: kill(pid, 0) still succeeds) is gone,
  // with or without its start time.
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) ::_exit(0);
  ProcessIdentity zombie;
  zombie.pid = int(child);
  for (int i = 0; i < 200 && isAlive(zombie); ++i) ::usleep(10000);
  CHECK(::kill(child, 0) == 0);  // still there, unreaped
  CHECK_FALSE(isAlive(zombie));
  int status = 0;
  ::waitpid(child, &status, 0);
}
