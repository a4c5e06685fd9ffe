// The training loop: the schedule's shape, that SFT lowers the loss, that an interrupted and
// resumed run reproduces the uninterrupted one, and that a diverging run stops with a message.
#include <catch2/catch.hpp>

#include <filesystem>
#include <random>

#include "../temp_dir.h"
#include "fp4lab/log/run_log.h"
#include "fp4lab/run/runner.h"
#include "train/schedule.h"

namespace fs = std::filesystem;
using namespace fp4lab;

namespace {

struct TempDir : testing::TempDir {
  TempDir() : testing::TempDir("fp4lab-train-") {}
};

run::RunConfig tinyConfig(int64_t steps) {
  return run::RunConfig::fromYamlText(
      "",
      {"model.path=scratch:tiny", "data.train=builtin:sft", "data.seq_len=64", "train.batch_size=4",
       "train.max_steps=" + std::to_string(steps), "train.eval_every=5", "train.eval_batches=2",
       "train.checkpoint_every=5", "optim.lr=3e-3", "train.threads=1", "data.validation_max=16"});
}

std::vector<float> losses(const std::string& runDir) {
  log::RunLogReader reader(runDir + "/log.h5");
  std::vector<float> out;
  for (const auto& row : reader.readTrain(0, reader.trainRows())) out.push_back(row.loss);
  return out;
}

}  // namespace

TEST_CASE("Cosine schedule: warmup, peak, floor", "[train][schedule]") {
  train::CosineSchedule s = train::CosineSchedule::make(1e-3, 0.1, 0.1, 100);
  CHECK(s.warmupSteps == 10);
  CHECK(s.at(0) == Approx(1e-4));
  CHECK(s.at(9) == Approx(1e-3));
  CHECK(s.at(10) == Approx(1e-3));
  CHECK(s.at(55) == Approx(0.55e-3).epsilon(0.01));  // halfway down the cosine
  CHECK(s.at(99) == Approx(1e-4).epsilon(0.01));
  for (int64_t i = 11; i < 100; ++i) CHECK(s.at(i) <= s.at(i - 1));
}

TEST_CASE("SFT lowers the loss and writes a complete run folder", "[train][sft]") {
  TempDir tmp;
  run::RunOptions options;
  options.runDir = (tmp.path / "run").string();
  run::RunResult r = run::executeRun(tinyConfig(20), options);
  CHECK(r.state == "finished");
  std::vector<float> l = losses(options.runDir);
  REQUIRE(l.size() == 20);
  CHECK(l.back() < l.front() * 0.8f);
  CHECK(fs::exists(tmp.path / "run/run.yaml"));
  CHECK(fs::exists(tmp.path / "run/model/config.json"));
  CHECK(fs::exists(tmp.path / "run/checkpoints/step-20/optimizer.pt"));
  CHECK(run::readRunState(options.runDir) == "finished");
}

TEST_CASE("A resumed run reproduces the uninterrupted run", "[train][resume]") {
  TempDir tmp;
  run::RunOptions straight;
  straight.runDir = (tmp.path / "straight").string();
  run::executeRun(tinyConfig(20), straight);

  // Run 10 steps of the same 20-step schedule, then resume for the other 10.
  run::RunOptions first;
  first.runDir = (tmp.path / "resumed").string();
  std::atomic<bool> stop{false};
  first.stopRequested = &stop;
  first.onEvent = [&](const run::RunEvent& e) {
    if (e.kind == "step" && e.step == 10) stop = true;
  };
  run::RunResult r1 = run::executeRun(tinyConfig(20), first);
  CHECK(r1.state == "cancelled");
  CHECK(run::readRunState(first.runDir) == "cancelled");
  run::RunOptions second;
  second.runDir = first.runDir;
  second.resumeFrom = "latest";
  run::RunResult r2 = run::executeRun(tinyConfig(20), second);
  CHECK(r2.state == "finished");

  std::vector<float> a = losses(straight.runDir), b = losses(first.runDir);
  REQUIRE(a.size() == 20);
  REQUIRE(b.size() == 20);  // no duplicated steps in the log
  for (size_t i = 0; i < 20; ++i) CHECK(a[i] == b[i]);
}

TEST_CASE("A diverging run stops with a message and keeps its last good checkpoint",
          "[train][nan]") {
  TempDir tmp;
  run::RunOptions options;
  options.runDir = (tmp.path / "nan").string();
  std::string warning;
  options.onEvent = [&](const run::RunEvent& e) {
    if (e.kind == "warning") warning = e.message;
  };
  run::RunConfig c = tinyConfig(30);
  c.lr = 1e30;  // weights overflow bf16 within a step or two
  c.gradClip = 0;
  run::RunResult r = run::executeRun(c, options);
  CHECK(r.state == "failed");
  CHECK(warning.find("not finite") != std::string::npos);
  CHECK(run::readRunState(options.runDir) == "failed");
}
