// Step time of the quantization recipes against a BF16 SFT step, on the same model and batch, side
// by side in one run: QAT W4A16 and W4A4 (NVFP4 and MXFP4) and QAD W4A4 (a frozen BF16 teacher
// forward on top). Each variant runs through the real training loop (makeRecipe, prepare with
// calibration, Trainer); variants are interleaved over rounds so drift in the machine's speed hits
// them all alike, and each reports the median and the fastest step over every timed step of every
// round. The fastest is the steadier figure on a shared machine: this build VM's speed flips
// between two levels about 1.5x apart every few seconds, even on one thread, which moves a median
// of a few dozen steps by tens of percent, while slowdowns only ever add to a step.
// Calibration uses the default quant.calib_batches (4) of the 16 batches of random tokens.
// usage: bench_recipes [--model tiny|100m] [--rounds R] [--steps N] [--batch B] [--seq T]
//                      [--threads N] [--only LABEL_PREFIX]
// --only keeps the variants whose label starts with the prefix (and SFT BF16, the reference), e.g.
// for a profile of one recipe.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "fp4lab/run/run_config.h"
#include "model/causal_lm.h"
#include "train/recipe.h"
#include "train/trainer.h"
#include "bench_common.h"

using namespace fp4lab;

namespace {

struct Variant {
  std::string label;
  std::vector<std::string> overrides;
};

}  // namespace

int main(int argc, char** argv) {
  std::string name = "tiny";
  int rounds = 3, steps = 6, warmup = 2, batch = 16, seq = 256, threads = 0;
  std::string only;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--model")
      name = v;
    else if (k == "--rounds")
      rounds = std::stoi(v);
    else if (k == "--steps")
      steps = std::stoi(v);
    else if (k == "--batch")
      batch = std::stoi(v);
    else if (k == "--seq")
      seq = std::stoi(v);
    else if (k == "--threads")
      threads = std::stoi(v);
    else if (k == "--only")
      only = v;
    else {
      std::fprintf(stderr,
                   "usage: bench_recipes [--model tiny|100m] [--rounds R] [--steps N] [--batch B] "
                   "[--seq T] [--threads N] [--only LABEL_PREFIX]\n");
      return 2;
    }
  }
  if (threads > 0) torch::set_num_threads(threads);
  torch::manual_seed(0);
  const model::ModelConfig mc = bench::benchModelConfig(name);
  model::CausalLM base(mc);

  // Enough batches that calibration (the default 4 batches) sees a part of the data, as in a run.
  const std::vector<data::Sequence> sequences =
      bench::randomSequences(size_t(batch) * 16, seq, mc.vocabSize);
  std::vector<Variant> variants = {
      {"SFT BF16", {"recipe.name=sft"}},
      {"QAT NVFP4 W4A16", {"recipe.name=qat", "quant.format=nvfp4", "quant.activations=false"}},
      {"QAT NVFP4 W4A4", {"recipe.name=qat", "quant.format=nvfp4"}},
      {"QAT NVFP4 W4A4, plain STE",
       {"recipe.name=qat", "quant.format=nvfp4", "quant.backward=ste"}},
      {"QAT MXFP4 W4A4", {"recipe.name=qat", "quant.format=mxfp4"}},
      {"QAD NVFP4 W4A4", {"recipe.name=qad", "quant.format=nvfp4"}},
  };
  variants.erase(std::remove_if(variants.begin() + 1, variants.end(),
                                [&](const Variant& v) { return v.label.rfind(only, 0) != 0; }),
                 variants.end());
  std::map<std::string, std::vector<double>> times;
  const std::string scratch =
      (std::filesystem::temp_directory_path() / ("fp4lab-bench-" + std::to_string(getpid())))
          .string();
  for (int round = 0; round < rounds; ++round) {
    for (const Variant& v : variants) {
      std::vector<std::string> o = v.overrides;
      run::RunConfig rc = run::RunConfig::fromYamlText("", o);
      rc.seqLen = seq, rc.batchSize = batch, rc.maxSteps = warmup + steps, rc.lr = 1e-5;
      rc.warmupRatio = 0, rc.evalEvery = 0, rc.gradClip = 1.0;
      model::CausalLM student = model::copyCausalLM(base, torch::TensorOptions());
      auto recipe = train::makeRecipe(rc);
      train::RecipeContext context;
      context.calibrationBatch = [&](int64_t i) {
        std::vector<const data::Sequence*> picked;
        for (int k = 0; k < batch; ++k) picked.push_back(&sequences[size_t(i * batch + k)]);
        return train::makeBatch(picked, seq, torch::kCPU);
      };
      context.loadFrozenModel = [&](const std::string&) {
        model::CausalLM t =
            model::copyCausalLM(base, torch::TensorOptions().dtype(torch::kBFloat16));
        for (auto& p : t->parameters()) p.set_requires_grad(false);
        t->eval();
        return t;
      };
      recipe->prepare(student, context);
      bench::StepTimes capture;
      capture.tokensPerStep = int64_t(batch) * seq;
      // The loop evaluates and checkpoints at its last step; those are not timed.
      train::Trainer trainer(
          rc, student, *recipe, sequences, {sequences.front()}, scratch, capture,
          [](const std::string& dir) { std::filesystem::create_directories(dir); });
      trainer.run();
      std::filesystem::remove_all(scratch);
      auto& t = times[v.label];
      t.insert(t.end(), capture.stepSeconds.begin() + warmup, capture.stepSeconds.end());
    }
  }
  using bench::median;
  auto fastest = [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); };
  const double reference = median(times["SFT BF16"]), referenceFastest = fastest(times["SFT BF16"]);
  std::printf("model %s, batch %d x %d tokens, %d threads, %d rounds x %d timed steps\n\n",
              name.c_str(), batch, seq, torch::get_num_threads(), rounds, steps);
  std::printf(
      "| recipe | median step (ms) | tokens/s | vs BF16 SFT | fastest step (ms) | vs BF16 SFT |\n"
      "|---|---|---|---|---|---|\n");
  for (const Variant& v : variants) {
    const double s = median(times[v.label]), f = fastest(times[v.label]);
    std::printf("| %s | %.1f | %.0f | %.2fx | %.1f | %.2fx |\n", v.label.c_str(), 1000 * s,
                double(batch) * seq / s, s / reference, 1000 * f, f / referenceFastest);
  }
  return 0;
}
