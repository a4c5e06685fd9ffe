// Training throughput of fp4lab's engine: the real Trainer loop (BF16 autocast, fp32 master
// weights, AdamW, clipping) on random tokens, for the configs train_step.py also runs, and for the
// real pretrained model (smollm2: builtin:smollm2-135m's folder) with the SFT, QAT (NVFP4 W4A4)
// and QAD (NVFP4 W4A4, its BF16 self as the teacher) recipes.
// usage: bench_train --model tiny|100m|smollm2 [--recipe sft|qat|qad] [--steps N] [--warmup N]
//                    [--batch B] [--seq T] [--threads N]
// prints one JSON line like train_step.py; bench_train.sh and bench_smollm2.sh put them side by
// side.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
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

int main(int argc, char** argv) {
  std::string name = "tiny", recipeName = "sft";
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
      recipeName = v;
    else if (k == "--warmup")
      warmup = std::stoi(v);
    else {
      std::fprintf(
          stderr,
          "usage: bench_train --model tiny|100m|smollm2 [--recipe sft|qat|qad] [--steps N] "
          "[--warmup N] [--batch B] [--seq T] [--threads N]\n");
      return 2;
    }
  }
  if (threads > 0) torch::set_num_threads(threads);
  torch::manual_seed(0);
  // The pretrained model is loaded from its folder (fp32 master weights, as a run loads it).
  model::CausalLM m = name == "smollm2" ? model::loadPretrained(run::smollm2ModelPath(),
                                                                torch::kFloat32, torch::kCPU)
                                        : model::CausalLM(bench::benchModelConfig(name));
  const model::ModelConfig mc = m->config();
  int64_t params = 0;
  for (const auto& p : m->parameters()) params += p.numel();

  run::RunConfig rc = run::RunConfig::fromYamlText("", {});
  rc.seqLen = seq, rc.batchSize = batch, rc.maxSteps = warmup + steps, rc.lr = 1e-4,
  rc.warmupRatio = 0;
  rc.evalEvery = 0, rc.evalBatches = 1, rc.gradClip = 1.0, rc.weightDecay = 0.0;
  const std::vector<data::Sequence> sequences =
      bench::randomSequences(size_t(batch) * 4, seq, mc.vocabSize);
  bench::StepTimes capture;
  capture.tokensPerStep = int64_t(batch) * seq;
  rc.recipe = recipeName;
  if (recipeName != "sft") rc.quantFormat = "nvfp4", rc.quantActivations = true;
  auto recipe = train::makeRecipe(rc);
  train::RecipeContext context;
  context.calibrationBatch = [&](int64_t i) {
    std::vector<const data::Sequence*> rows;
    for (int b = 0; b < batch; ++b)
      rows.push_back(&sequences[size_t(i * batch + b) % sequences.size()]);
    return train::makeBatch(rows, seq, torch::kCPU);
  };
  // The teacher as a run loads it (run/runner.cpp): fp32, its matrix weights held in BF16.
  // FP4LAB_BENCH_TEACHER=bf16: the whole teacher in BF16 (fp4lab before the fifteenth session),
  // for the comparison in docs/performance.md.
  const char* teacherMode = std::getenv("FP4LAB_BENCH_TEACHER");
  const bool bf16Teacher = teacherMode && std::string(teacherMode) == "bf16";
  context.loadFrozenModel = [&](const std::string&) {
    model::CausalLM teacher = model::copyCausalLM(
        m, torch::TensorOptions(bf16Teacher ? torch::kBFloat16 : torch::kFloat32));
    if (!bf16Teacher) model::holdMatrixWeightsInBf16(teacher);
    for (auto& p : teacher->parameters()) p.set_requires_grad(false);
    teacher->eval();
    return teacher;
  };
  recipe->prepare(m, context);
  // The loop checkpoints at its last step; keep that out of the way (and out of the timings).
  const std::string scratch =
      (std::filesystem::temp_directory_path() / ("fp4lab-bench-" + std::to_string(getpid())))
          .string();
  train::Trainer trainer(rc, m, *recipe, sequences, {}, scratch, capture,
                         [](const std::string& dir) { std::filesystem::create_directories(dir); });
  // FP4LAB_BENCH_TRACE=FILE: a Chrome trace of the whole loop (LibTorch's Kineto profiler, CPU
  // operators), for finding where a step's time goes.
  const char* trace = std::getenv("FP4LAB_BENCH_TRACE");
  if (trace && *trace) {
    torch::autograd::profiler::prepareProfiler(
        torch::autograd::profiler::ProfilerConfig(torch::autograd::profiler::ProfilerState::KINETO,
                                                  /*report_input_shapes=*/true),
        {torch::autograd::profiler::ActivityType::CPU});
    torch::autograd::profiler::enableProfiler(
        torch::autograd::profiler::ProfilerConfig(torch::autograd::profiler::ProfilerState::KINETO,
                                                  /*report_input_shapes=*/true),
        {torch::autograd::profiler::ActivityType::CPU});
  }
  trainer.run();
  if (trace && *trace) torch::autograd::profiler::disableProfiler()->save(trace);
  std::filesystem::remove_all(scratch);
  std::vector<double> timed(capture.stepSeconds.begin() + warmup, capture.stepSeconds.end());
  std::sort(timed.begin(), timed.end());
  double stepS = timed[timed.size() / 2];
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  const bool tcmalloc = usingTcmalloc();
  nlohmann::json out = {{"impl", "fp4lab-cpp"},
                        {"recipe", recipeName},
                        {"bf16_gemm", model::bf16LinearInFp32() ? "fp32" : "bf16"},
                        {"teacher", recipeName != "qad" ? ""
                                    : bf16Teacher       ? "bf16"
                                                        : "fp32-bf16-matrices"},
                        {"allocator", tcmalloc ? "tcmalloc" : "glibc"},
                        {"model", name},
                        {"params", params},
                        {"batch", batch},
                        {"seq", seq},
                        {"threads", torch::get_num_threads()},
                        {"step_s", stepS},
                        {"tok_per_s", double(batch) * seq / stepS},
                        {"peak_rss_mb", double(ru.ru_maxrss) / 1024.0},
                        {"torch", TORCH_VERSION}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
