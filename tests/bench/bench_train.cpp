// Training throughput of fp4lab's engine: the real Trainer loop (BF16 autocast, fp32 master
// weights, AdamW, clipping) on random tokens, for the configs train_step.py also runs, and for the
// real pretrained model (smollm2: builtin:smollm2-135m's folder) with the SFT, QAT (NVFP4 W4A4)
// and QAD (NVFP4 W4A4, its BF16 self as the teacher) recipes.
// usage: bench_train --model tiny|100m|smollm2 [--recipe R[,R...]] [--steps N] [--warmup N]
//        (--steps 0: only choose the BF16 GEMM, measured or cached, and say which)
//                    [--batch B] [--seq T] [--threads N]
// prints one JSON line per recipe like train_step.py; bench_train.sh and bench_smollm2.sh put them
// side by side.
//
// Several recipes (--recipe sft,qat,qad) train in one process, taking turns step by step: each
// has its own model and Trainer on its own thread, and a recipe's step starts only when the one
// before it in the rotation has finished its own. A drift in the machine's speed (this VM's moves
// by 1.5x within minutes) then falls on neighbouring steps of every recipe alike, and the ratios
// of their median steps compare the recipes rather than the minutes they ran in. Peak RSS is then
// the process's, all models together. One recipe can take turns with another process the same
// way (ProcessTurns below).
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fp4lab/run/run_config.h"
#include <torch/csrc/autograd/profiler_kineto.h>

#include "fp4lab/run/model.h"
#include "fp4lab/common/system.h"
#include "model/causal_lm.h"
#include "model/fused_ops.h"
#include "model/pretrained.h"
#include "train/recipe.h"
#include "train/trainer.h"
#include "bench_common.h"

using namespace fp4lab;

namespace {

// Whose step it is. Round r gives every recipe one step, in the given order when r is even and
// in reverse when it is odd, so that no recipe always follows the same one (a step can inherit
// the state of the one before: caches, the allocator's free lists).
struct Turns {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<size_t> schedule;  // the recipes' indices, one entry per step
  size_t next = 0;               // the entry whose step may run now

  Turns(size_t recipes, int64_t rounds) {
    for (int64_t r = 0; r < rounds; ++r)
      for (size_t k = 0; k < recipes; ++k) schedule.push_back(r % 2 == 0 ? k : recipes - 1 - k);
  }
  void waitFor(size_t index) {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return next < schedule.size() && schedule[next] == index; });
  }
  void pass() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      ++next;
    }
    changed.notify_all();
  }
};

// Turns with another process (FP4LAB_BENCH_TURN_WAIT / _POST: two FIFOs): a byte read from one
// before each step, a byte written to the other after it. train_step.py does the same with the
// FIFOs swapped, so fp4lab's and transformers' steps alternate (bench_smollm2.sh).
struct ProcessTurns {
  int wait = -1, post = -1;
  static int open(const char* variable) {
    const char* path = std::getenv(variable);
    if (!path || !*path) return -1;
    // Read-write: opening a FIFO so never waits for the other end, and writes never block.
    const int fd = ::open(path, O_RDWR);
    if (fd < 0) {
      std::fprintf(stderr, "%s=%s: %s\n", variable, path, std::strerror(errno));
      std::exit(2);
    }
    return fd;
  }
  ProcessTurns() : wait(open("FP4LAB_BENCH_TURN_WAIT")), post(open("FP4LAB_BENCH_TURN_POST")) {}
  bool active() const { return wait >= 0 && post >= 0; }
  void waitTurn() const {
    char byte;
    while (::read(wait, &byte, 1) < 0 && errno == EINTR) {
    }
  }
  void passTurn() const {
    const char byte = 't';
    while (::write(post, &byte, 1) < 0 && errno == EINTR) {
    }
  }
};

// Records each step's time; with others in rotation, waits for its turn before a step (the loop
// asks stopRequested() just before it starts the clock) and hands it on after one. The turn is
// kept over the last step's evaluation and checkpoint and handed on when run() returns.
struct TurnTakingSteps : bench::StepTimes {
  Turns* turns = nullptr;
  const ProcessTurns* process = nullptr;
  size_t index = 0;
  int64_t lastStep = 0;
  bool stopRequested() override {
    if (turns) turns->waitFor(index);
    if (process) process->waitTurn();
    return false;
  }
  void onStep(const train::StepReport& r) override {
    StepTimes::onStep(r);
    if (r.step == lastStep) return;
    if (turns) turns->pass();
    if (process) process->passTurn();
  }
};

struct Job {
  std::string recipeName;
  run::RunConfig config;
  model::CausalLM model{nullptr};
  std::unique_ptr<train::Recipe> recipe;
  TurnTakingSteps steps;
  std::string scratch;
  std::unique_ptr<train::Trainer> trainer;
};

}  // namespace

int main(int argc, char** argv) {
  std::string name = "tiny", recipeList = "sft";
  int steps = 20, warmup = 3, batch = 16, seq = 256, threads = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--model")
      name = v;
    else if (k == "--steps")
      steps = std::stoi(v);
    else if (k == "--batch")
      batch = std::stoi(v);
    else if (k == "--seq")
      seq = std::stoi(v);
    else if (k == "--threads")
      threads = std::stoi(v);
    else if (k == "--recipe")
      recipeList = v;
    else if (k == "--warmup")
      warmup = std::stoi(v);
    else {
      std::fprintf(
          stderr,
          "usage: bench_train --model tiny|100m|smollm2 [--recipe sft|qat|qad[,...]] [--steps N] "
          "[--warmup N] [--batch B] [--seq T] [--threads N]\n");
      return 2;
    }
  }
  std::vector<std::string> recipeNames;
  {
    std::stringstream list(recipeList);
    for (std::string r; std::getline(list, r, ',');)
      if (!r.empty()) recipeNames.push_back(r);
  }
  if (recipeNames.empty()) {
    std::fprintf(stderr, "--recipe needs at least one of sft, qat, qad\n");
    return 2;
  }
  if (threads > 0) torch::set_num_threads(threads);
  torch::manual_seed(0);
  // The pretrained model is loaded from its folder (fp32 master weights, as a run loads it).
  auto makeModel = [&] {
    return name == "smollm2"
               ? model::loadPretrained(run::smollm2ModelPath(), torch::kFloat32, torch::kCPU)
               : model::CausalLM(bench::benchModelConfig(name));
  };
  const model::CausalLM first = makeModel();
  const model::ModelConfig mc = first->config();
  // The BF16 GEMM as a run chooses it (run/runner.cpp): measured on the model's products, or
  // cached; FP4LAB_BF16_GEMM forces one (the side-by-side comparisons in docs/performance.md).
  model::GemmChoiceOptions gemmOptions;
  gemmOptions.cacheFile = run::cacheRoot() + "/gemm-choice.json";
  const model::Bf16GemmChoice gemm =
      model::chooseBf16Gemm(model::CausalLM(first)->gemmShapes(int64_t(batch) * seq), gemmOptions);
  std::fprintf(stderr, "%s\n", gemm.describe().c_str());
  if (steps == 0) return 0;  // --steps 0: the GEMM choice alone (bench_gemm_choice.sh)
  int64_t params = 0;
  for (const auto& p : first->parameters()) params += p.numel();
  const std::vector<data::Sequence> sequences =
      bench::randomSequences(size_t(batch) * 4, seq, mc.vocabSize);
  // The teacher as a run loads it (run/runner.cpp): fp32, its matrix weights held in BF16.
  // FP4LAB_BENCH_TEACHER=bf16: the whole teacher in BF16 (fp4lab before the fifteenth session),
  // for the comparison in docs/performance.md.
  const char* teacherMode = std::getenv("FP4LAB_BENCH_TEACHER");
  const bool bf16Teacher = teacherMode && std::string(teacherMode) == "bf16";

  Turns turns(recipeNames.size(), warmup + steps);
  const ProcessTurns processTurns;
  if (processTurns.active() && recipeNames.size() > 1) {
    std::fprintf(stderr, "FP4LAB_BENCH_TURN_WAIT/_POST take turns with one recipe at a time\n");
    return 2;
  }
  std::vector<std::unique_ptr<Job>> jobs;
  for (size_t j = 0; j < recipeNames.size(); ++j) {
    auto job = std::make_unique<Job>();
    job->recipeName = recipeNames[j];
    job->model = j == 0 ? first : makeModel();
    run::RunConfig& rc = job->config = run::RunConfig::fromYamlText("", {});
    rc.seqLen = seq, rc.batchSize = batch, rc.maxSteps = warmup + steps, rc.lr = 1e-4,
    rc.warmupRatio = 0;
    rc.evalEvery = 0, rc.evalBatches = 1, rc.gradClip = 1.0, rc.weightDecay = 0.0;
    rc.recipe = job->recipeName;
    if (job->recipeName != "sft") rc.quantFormat = "nvfp4", rc.quantActivations = true;
    job->recipe = train::makeRecipe(rc);
    train::RecipeContext context;
    context.calibrationBatch = [&](int64_t i) {
      std::vector<const data::Sequence*> rows;
      for (int b = 0; b < batch; ++b)
        rows.push_back(&sequences[size_t(i * batch + b) % sequences.size()]);
      return train::makeBatch(rows, seq, torch::kCPU);
    };
    model::CausalLM student = job->model;
    context.loadFrozenModel = [&](const std::string&) {
      model::CausalLM teacher = model::copyCausalLM(
          student, torch::TensorOptions(bf16Teacher ? torch::kBFloat16 : torch::kFloat32));
      if (!bf16Teacher) model::holdMatrixWeightsInBf16(teacher);
      for (auto& p : teacher->parameters()) p.set_requires_grad(false);
      teacher->eval();
      return teacher;
    };
    job->recipe->prepare(job->model, context);
    job->steps.tokensPerStep = int64_t(batch) * seq;
    job->steps.lastStep = rc.maxSteps;
    if (recipeNames.size() > 1) job->steps.turns = &turns, job->steps.index = j;
    if (processTurns.active()) job->steps.process = &processTurns;
    // The loop checkpoints at its last step; keep that out of the way (and out of the timings).
    job->scratch = (std::filesystem::temp_directory_path() /
                    ("fp4lab-bench-" + std::to_string(getpid()) + "-" + std::to_string(j)))
                       .string();
    job->trainer = std::make_unique<train::Trainer>(
        rc, job->model, *job->recipe, sequences, std::vector<data::Sequence>{}, job->scratch,
        job->steps, [](const std::string& dir) { std::filesystem::create_directories(dir); });
    jobs.push_back(std::move(job));
  }

  // FP4LAB_BENCH_TRACE=FILE: a Chrome trace of the whole loop (LibTorch's Kineto profiler, CPU
  // operators), for finding where a step's time goes; one recipe at a time.
  const char* trace = std::getenv("FP4LAB_BENCH_TRACE");
  const bool tracing = trace && *trace;
  if (tracing && jobs.size() > 1) {
    std::fprintf(stderr, "FP4LAB_BENCH_TRACE traces one recipe: give --recipe one name\n");
    return 2;
  }
  if (tracing) {
    const torch::autograd::profiler::ProfilerConfig profile(
        torch::autograd::profiler::ProfilerState::KINETO, /*report_input_shapes=*/true);
    torch::autograd::profiler::prepareProfiler(profile,
                                               {torch::autograd::profiler::ActivityType::CPU});
    torch::autograd::profiler::enableProfiler(profile,
                                              {torch::autograd::profiler::ActivityType::CPU});
  }
  if (jobs.size() == 1) {
    jobs[0]->trainer->run();
    if (processTurns.active()) processTurns.passTurn();  // after the last step's checkpoint
  } else {
    // One thread per recipe; LibTorch's intra-op pool and the set thread count are shared, and
    // only the thread whose turn it is computes.
    std::vector<std::thread> workers;
    for (size_t j = 0; j < jobs.size(); ++j)
      workers.emplace_back([&, j] {
        if (threads > 0) torch::set_num_threads(threads);
        jobs[j]->trainer->run();
        turns.pass();
      });
    for (std::thread& w : workers) w.join();
  }
  if (tracing) torch::autograd::profiler::disableProfiler()->save(trace);

  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  const bool tcmalloc = usingTcmalloc();
  for (const auto& job : jobs) {
    std::filesystem::remove_all(job->scratch);
    const std::vector<double>& all = job->steps.stepSeconds;
    std::vector<double> timed(all.begin() + std::min<size_t>(size_t(warmup), all.size()),
                              all.end());
    std::sort(timed.begin(), timed.end());
    const double stepS = timed.empty() ? NAN : timed[timed.size() / 2];
    nlohmann::json out = {{"impl", "fp4lab-cpp"},
                          {"recipe", job->recipeName},
                          {"bf16_gemm", model::toString(gemm.gemm)},
                          {"gemm_source", gemm.source},
                          {"gemm_bf16_s", gemm.libTorchSeconds},
                          {"gemm_fp32_s", gemm.fp32Seconds},
                          {"teacher", job->recipeName != "qad" ? ""
                                      : bf16Teacher            ? "bf16"
                                                               : "fp32-bf16-matrices"},
                          {"allocator", tcmalloc ? "tcmalloc" : "glibc"},
                          {"model", name},
                          {"params", params},
                          {"batch", batch},
                          {"seq", seq},
                          {"threads", torch::get_num_threads()},
                          {"interleaved_with", int(jobs.size()) - 1},
                          {"step_s", stepS},
                          {"steps_s", all},
                          {"tok_per_s", double(batch) * seq / stepS},
                          {"peak_rss_mb", double(ru.ru_maxrss) / 1024.0},
                          {"torch", TORCH_VERSION}};
    std::printf("%s\n", out.dump().c_str());
  }
  return 0;
}
