// Training throughput of fp4lab's engine: the real Trainer loop (BF16 autocast, fp32 master
// weights, AdamW, clipping) on random tokens, for the configs train_step.py also runs.
// usage: bench_train --model tiny|100m [--steps N] [--batch B] [--seq T] [--threads N]
// prints one JSON line like train_step.py; bench_train.sh puts both side by side.
#include <dlfcn.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fp4lab/run/run_config.h"
#include "model/causal_lm.h"
#include "train/recipe.h"
#include "train/trainer.h"
#include "bench_common.h"

using namespace fp4lab;

int main(int argc, char** argv) {
  std::string name = "tiny";
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
    else {
      std::fprintf(
          stderr,
          "usage: bench_train --model tiny|100m [--steps N] [--batch B] [--seq T] [--threads N]\n");
      return 2;
    }
  }
  if (threads > 0) torch::set_num_threads(threads);
  torch::manual_seed(0);
  model::ModelConfig mc = bench::benchModelConfig(name);
  model::CausalLM m(mc);
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
  auto recipe = train::makeRecipe(rc);
  // The loop checkpoints at its last step; keep that out of the way (and out of the timings).
  const std::string scratch =
      (std::filesystem::temp_directory_path() / ("fp4lab-bench-" + std::to_string(getpid())))
          .string();
  train::Trainer trainer(rc, m, *recipe, sequences, {}, scratch, capture,
                         [](const std::string& dir) { std::filesystem::create_directories(dir); });
  trainer.run();
  std::filesystem::remove_all(scratch);
  std::vector<double> timed(capture.stepSeconds.begin() + warmup, capture.stepSeconds.end());
  std::sort(timed.begin(), timed.end());
  double stepS = timed[timed.size() / 2];
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  // Which malloc this process runs on: tcmalloc exports tc_malloc beside malloc.
  const bool tcmalloc = dlsym(RTLD_DEFAULT, "tc_malloc") != nullptr;
  nlohmann::json out = {{"impl", "fp4lab-cpp"},
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
