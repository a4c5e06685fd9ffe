// The training loop: the schedule's shape, that SFT lowers the loss, that an interrupted and
// resumed run reproduces the uninterrupted one, and that a diverging run stops with a message
// and leaves its last good checkpoint complete and untouched.
#include <catch2/catch.hpp>

#include <sys/resource.h>

#include <csignal>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "../temp_dir.h"
#include "fp4lab/io/safetensors.h"
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

// The steps of the run's evaluations and their validation losses.
std::vector<std::pair<int64_t, double>> evaluations(const std::string& runDir) {
  log::RunLogReader reader(runDir + "/log.h5");
  std::vector<std::pair<int64_t, double>> out;
  for (const auto& row : reader.readEval(0, reader.evalRows()))
    out.emplace_back(row.step, row.values.at(0));
  return out;
}

// Every file under `dir`, by its path relative to `dir`, with its bytes.
std::map<std::string, std::string> folderContents(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    out[fs::relative(entry.path(), dir).string()] =
        std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return out;
}

// The names of the files whose bytes differ between two folderContents, or that one lacks.
std::vector<std::string> changedFiles(const std::map<std::string, std::string>& before,
                                      const std::map<std::string, std::string>& after) {
  std::vector<std::string> changed;
  for (const auto& [name, bytes] : before) {
    auto it = after.find(name);
    if (it == after.end() || it->second != bytes) changed.push_back(name);
  }
  for (const auto& [name, bytes] : after)
    if (!before.count(name)) changed.push_back(name);
  return changed;
}

std::vector<std::string> entryNames(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir))
    names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
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
  CHECK(r.state == RunState::Finished);
  std::vector<float> l = losses(options.runDir);
  REQUIRE(l.size() == 20);
  CHECK(l.back() < l.front() * 0.8f);
  CHECK(fs::exists(tmp.path / "run/run.yaml"));
  CHECK(fs::exists(tmp.path / "run/model/config.json"));
  CHECK(fs::exists(tmp.path / "run/checkpoints/step-20/optimizer.pt"));
  CHECK(run::readRunState(options.runDir) == RunState::Finished);
}

// train.threads=0 changes the thread count in the middle of a run (train/thread_tuner.h); that is
// only a speed choice if the same run computes the same bits at every count.
TEST_CASE("Training computes the same bits at one and at two threads", "[train][threads]") {
  TempDir tmp;
  for (const char* recipe : {"sft", "qat"}) {
    std::map<int, std::vector<float>> lossesAt;
    std::map<int, std::string> weightsAt;
    for (int threads : {1, 2}) {
      run::RunConfig config = run::RunConfig::fromYamlText(
          "",
          {"model.path=scratch:tiny", "data.train=builtin:sft", "data.seq_len=64",
           "train.batch_size=4", "train.max_steps=8", "train.eval_every=0", "train.eval_batches=1",
           "train.checkpoint_every=0", "optim.lr=3e-3", "data.validation_max=8",
           "quant.calib_batches=1", std::string("recipe.name=") + recipe,
           std::string("quant.format=") + (recipe == std::string("qat") ? "nvfp4" : "none"),
           "train.threads=" + std::to_string(threads)});
      run::RunOptions options;
      options.runDir = (tmp.path / (std::string(recipe) + std::to_string(threads))).string();
      REQUIRE(run::executeRun(config, options).state == RunState::Finished);
      lossesAt[threads] = losses(options.runDir);
      weightsAt[threads] = folderContents(fs::path(options.runDir) / "model")["model.safetensors"];
    }
    INFO(recipe);
    REQUIRE(lossesAt[1].size() == 8);
    CHECK(lossesAt[1] == lossesAt[2]);
    CHECK(!weightsAt[1].empty());
    CHECK(weightsAt[1] == weightsAt[2]);
  }
}

TEST_CASE("A model that cannot be written fails the run, which resumes once it can",
          "[train][resume][errors]") {
  // A full disk, for files written after the last checkpoint: RLIMIT_FSIZE makes writing past
  // 2 MB fail (EFBIG) as ENOSPC would, whoever the user is (root ignores permissions).
  TempDir tmp;
  run::RunOptions options;
  options.runDir = (tmp.path / "run").string();
  struct FileSizeLimit {
    rlimit saved{};
    void (*handler)(int) = SIG_DFL;
    bool on = false;
    void set(rlim_t bytes) {
      ::getrlimit(RLIMIT_FSIZE, &saved);
      handler = std::signal(SIGXFSZ, SIG_IGN);
      rlimit small = saved;
      small.rlim_cur = bytes;
      on = ::setrlimit(RLIMIT_FSIZE, &small) == 0;
    }
    ~FileSizeLimit() {
      if (!on) return;
      ::setrlimit(RLIMIT_FSIZE, &saved);
      std::signal(SIGXFSZ, handler);
    }
  };
  {
    FileSizeLimit limit;
    options.onEvent = [&](const run::RunEvent& e) {
      if (e.kind == EventKind::Checkpoint && e.step == 20) limit.set(2 << 20);
    };
    CHECK_THROWS_WITH(run::executeRun(tinyConfig(20), options),
                      Catch::Contains("model.safetensors"));
    REQUIRE(limit.on);
  }
  const run::RunFolder failed = run::readRunFolder(options.runDir);
  CHECK(failed.state == RunState::Failed);
  CHECK(failed.step == 20);
  CHECK_THAT(failed.message, Catch::Contains("model.safetensors"));
  CHECK(!fs::exists(tmp.path / "run/model"));
  CHECK(fs::exists(tmp.path / "run/checkpoints/step-20/optimizer.pt"));
  // With room again, resuming from the last checkpoint writes the model and finishes.
  options.onEvent = nullptr;
  options.resumeFrom = "latest";
  CHECK(run::executeRun(tinyConfig(20), options).state == RunState::Finished);
  CHECK(fs::exists(tmp.path / "run/model/model.safetensors"));
  CHECK(run::readRunState(options.runDir) == RunState::Finished);
  CHECK(losses(options.runDir).size() == 20);
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
    if (e.kind == EventKind::Step && e.step == 10) stop = true;
  };
  run::RunResult r1 = run::executeRun(tinyConfig(20), first);
  CHECK(r1.state == RunState::Cancelled);
  CHECK(run::readRunState(first.runDir) == RunState::Cancelled);
  run::RunOptions second;
  second.runDir = first.runDir;
  second.resumeFrom = "latest";
  run::RunResult r2 = run::executeRun(tinyConfig(20), second);
  CHECK(r2.state == RunState::Finished);

  std::vector<float> a = losses(straight.runDir), b = losses(first.runDir);
  REQUIRE(a.size() == 20);
  REQUIRE(b.size() == 20);  // no duplicated steps in the log
  for (size_t i = 0; i < 20; ++i) CHECK(a[i] == b[i]);

  // Validation before the first step (the starting model), every 5 steps and at the end; the
  // resumed run does not evaluate step 0 again.
  const auto evalA = evaluations(straight.runDir), evalB = evaluations(first.runDir);
  std::vector<int64_t> steps;
  for (const auto& [step, loss] : evalA) steps.push_back(step);
  CHECK(steps == std::vector<int64_t>{0, 5, 10, 15, 20});
  CHECK(evalA == evalB);
  // The untrained model scores near ln(vocabulary): far above what 20 steps reach.
  REQUIRE(evalA.size() == 5);
  CHECK(evalA.front().second > evalA.back().second + 0.5);
}

TEST_CASE("train.keep_checkpoints: the newest N; 0 keeps one until the run has finished",
          "[train][resume]") {
  TempDir tmp;
  SECTION("2: the newest two stay after the run") {
    run::RunOptions options;
    options.runDir = (tmp.path / "two").string();
    run::RunConfig c = tinyConfig(12);  // checkpoints at steps 5, 10 and 12
    c.keepCheckpoints = 2;
    REQUIRE(run::executeRun(c, options).state == RunState::Finished);
    CHECK(entryNames(tmp.path / "two" / "checkpoints") ==
          std::vector<std::string>{"step-10", "step-12"});
  }
  SECTION("0: stopped, the run keeps its newest checkpoint; finished, it keeps only model/") {
    run::RunConfig c = tinyConfig(12);
    c.keepCheckpoints = 0;
    const fs::path runDir = tmp.path / "none";
    run::RunOptions first;
    first.runDir = runDir.string();
    std::atomic<bool> stop{false};
    first.stopRequested = &stop;
    first.onEvent = [&](const run::RunEvent& e) {
      if (e.kind == EventKind::Step && e.step == 7) stop = true;
    };
    REQUIRE(run::executeRun(c, first).state == RunState::Cancelled);
    CHECK(entryNames(runDir / "checkpoints") == std::vector<std::string>{"step-7"});

    run::RunOptions second;
    second.runDir = runDir.string();
    second.resumeFrom = "latest";
    std::vector<int64_t> checkpointed;
    second.onEvent = [&](const run::RunEvent& e) {
      if (e.kind == EventKind::Checkpoint) checkpointed.push_back(e.step);
    };
    REQUIRE(run::executeRun(c, second).state == RunState::Finished);
    CHECK(checkpointed == std::vector<int64_t>{10, 12});  // written while it ran, then removed
    CHECK_FALSE(fs::exists(runDir / "checkpoints"));
    CHECK(fs::exists(runDir / "model" / "model.safetensors"));
    CHECK(run::readRunState(runDir.string()) == RunState::Finished);
    CHECK(losses(runDir.string()).size() == 12);
  }
}

TEST_CASE("A run resumed from its final checkpoint saves its model without a second evaluation",
          "[train][resume]") {
  TempDir tmp;
  run::RunOptions options;
  options.runDir = (tmp.path / "run").string();
  REQUIRE(run::executeRun(tinyConfig(8), options).state == RunState::Finished);
  const std::string logPath = (tmp.path / "run" / "log.h5").string();
  const int64_t evalRows = log::RunLogReader(logPath).evalRows();
  // As if the process had died after the last checkpoint, before model/ was written.
  std::filesystem::remove_all(tmp.path / "run" / "model");
  run::RunOptions resume = options;
  resume.resumeFrom = "latest";
  REQUIRE(run::executeRun(tinyConfig(8), resume).state == RunState::Finished);
  log::RunLogReader reader(logPath);
  CHECK(reader.evalRows() == evalRows);  // the final evaluation once, not twice
  CHECK(reader.trainRows() == 8);
  CHECK(std::filesystem::exists(tmp.path / "run" / "model" / "model.safetensors"));
}

TEST_CASE("A diverging run stops with a message and keeps its last good checkpoint",
          "[train][nan]") {
  TempDir tmp;
  const fs::path runDir = tmp.path / "nan";
  const fs::path good = runDir / "checkpoints" / "step-0";
  // Decoupled weight decay with lr x weight_decay = 1e4 multiplies every weight by about -1e4 a
  // step: the activations overflow a few steps in. No periodic checkpoints, so the last good one
  // is the checkpoint the run was stopped at before its first step.
  run::RunConfig c = tinyConfig(30);
  c.lr = 10;
  c.weightDecay = 1000;
  c.gradClip = 0;
  c.checkpointEvery = 0;

  // Stopped before its first step: checkpoints/step-0 holds the initial weights.
  run::RunOptions first;
  first.runDir = runDir.string();
  std::atomic<bool> stop{false};
  first.stopRequested = &stop;
  first.onEvent = [&](const run::RunEvent& e) {
    if (e.kind == EventKind::Started) stop = true;
  };
  run::RunResult r1 = run::executeRun(c, first);
  REQUIRE(r1.state == RunState::Cancelled);
  REQUIRE(r1.steps == 0);
  REQUIRE(fs::is_directory(good));
  const std::map<std::string, std::string> saved = folderContents(good);

  // Resumed with the same configuration, it diverges.
  run::RunOptions options;
  options.runDir = runDir.string();
  options.resumeFrom = "latest";
  std::string warning;
  std::vector<int64_t> checkpointed;
  options.onEvent = [&](const run::RunEvent& e) {
    if (e.kind == EventKind::Warning) warning = e.message;
    if (e.kind == EventKind::Checkpoint) checkpointed.push_back(e.step);
  };
  run::RunResult r = run::executeRun(c, options);
  CHECK(r.state == RunState::Failed);
  CHECK(r.steps > 0);
  CHECK(r.steps < 30);
  CHECK(checkpointed.empty());
  INFO("warning: " << warning);
  CHECK(warning.find("not finite") != std::string::npos);
  CHECK(warning.find("The last good checkpoint is " + good.string() + ";") != std::string::npos);
  CHECK(run::readRunState(options.runDir) == RunState::Failed);

  // The checkpoint the message names is the only one, and complete.
  CHECK(entryNames(runDir / "checkpoints") == std::vector<std::string>{"step-0"});
  REQUIRE(fs::exists(good / "trainer_state.json"));
  std::ifstream stateFile(good / "trainer_state.json");
  const nlohmann::json state = nlohmann::json::parse(stateFile, nullptr, false);
  REQUIRE_FALSE(state.is_discarded());
  CHECK(state.value("step", int64_t(-1)) == 0);
  CHECK(state.value("cursor", int64_t(-1)) == 0);
  REQUIRE(fs::exists(good / "optimizer.pt"));
  CHECK(fs::file_size(good / "optimizer.pt") > 0);
  for (const char* file : {"config.json", "generation_config.json", "model.safetensors"}) {
    INFO(file);
    CHECK(fs::exists(good / file));
  }

  // Its weights are those saved before the divergence: every file byte for byte as the stopped
  // run left it, and every weight finite.
  CHECK(changedFiles(saved, folderContents(good)).empty());
  io::SafetensorsFile weights((good / "model.safetensors").string());
  REQUIRE_FALSE(weights.tensors().empty());
  for (const io::TensorInfo& tensor : weights.tensors()) {
    const std::vector<float> values = weights.toFloat32(tensor);
    INFO("tensor " << tensor.name);
    CHECK_FALSE(values.empty());
    CHECK(std::all_of(values.begin(), values.end(), [](float v) { return std::isfinite(v); }));
  }
}
