// Training throughput of fp4lab's engine: the real Trainer loop (BF16 autocast, fp32 master
// weights, AdamW, clipping) on random tokens, for the configs train_step.py also runs.
// usage: bench_train --model tiny|100m [--steps N] [--batch B] [--seq T] [--threads N]
// prints one JSON line like train_step.py; bench_train.sh puts both side by side.
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

using namespace fp4lab;

namespace {

model::ModelConfig benchConfig(const std::string& name) {
  model::ModelConfig c;
  c.architecture = model::Architecture::Llama;
  c.rmsNormEps = 1e-5;
  c.ropeTheta = 10000.0;
  c.maxPositionEmbeddings = 4096;
  if (name == "tiny") {  // the built-in model's shape (run/model_source.cpp)
    c.vocabSize = 263, c.hiddenSize = 256, c.intermediateSize = 704, c.numHiddenLayers = 4;
    c.numAttentionHeads = 4, c.numKeyValueHeads = 2, c.tieWordEmbeddings = true;
  } else if (name == "100m") {
    c.vocabSize = 32000, c.hiddenSize = 768, c.intermediateSize = 2048, c.numHiddenLayers = 12;
    c.numAttentionHeads = 12, c.numKeyValueHeads = 4, c.tieWordEmbeddings = false;
  } else {
    std::fprintf(stderr, "unknown --model %s (tiny, 100m)\n", name.c_str());
    std::exit(2);
  }
  c.headDim = c.hiddenSize / c.numAttentionHeads;
  return c;
}

struct Capture : train::TrainerListener {
  std::vector<double> stepSeconds;
  int64_t tokensPerStep = 0;
  void onStep(const train::StepReport& r) override {
    stepSeconds.push_back(double(tokensPerStep) / r.tokensPerSecond);
  }
};

}  // namespace

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
  model::ModelConfig mc = benchConfig(name);
  model::CausalLM m(mc);
  int64_t params = 0;
  for (const auto& p : m->parameters()) params += p.numel();

  run::RunConfig rc = run::RunConfig::fromYamlText("", {});
  rc.seqLen = seq, rc.batchSize = batch, rc.maxSteps = warmup + steps, rc.lr = 1e-4,
  rc.warmupRatio = 0;
  rc.evalEvery = 0, rc.evalBatches = 1, rc.gradClip = 1.0, rc.weightDecay = 0.0;
  std::vector<data::Sequence> sequences(size_t(batch) * 4);
  torch::Tensor ids =
      torch::randint(0, mc.vocabSize, {int64_t(sequences.size()), seq + 1}, torch::kLong);
  for (size_t i = 0; i < sequences.size(); ++i) {
    for (int j = 0; j <= seq; ++j)
      sequences[i].ids.push_back(int32_t(ids[int64_t(i)][j].item<int64_t>()));
    sequences[i].lossMask.assign(size_t(seq + 1), 1);
  }
  Capture capture;
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
  nlohmann::json out = {{"impl", "fp4lab-cpp"},
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
