// What the training benchmarks share: the model shapes they time, random-token training data, and
// a listener that records each step's time.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "fp4lab/data/packing.h"
#include "model/config.h"
#include "train/trainer.h"

namespace fp4lab::bench {

// "tiny": the built-in model's shape (run/model_source.cpp); "100m": a ~125 M-parameter Llama.
inline model::ModelConfig benchModelConfig(const std::string& name) {
  model::ModelConfig c;
  c.architecture = model::Architecture::Llama;
  c.rmsNormEps = 1e-5;
  c.ropeTheta = 10000.0;
  c.maxPositionEmbeddings = 4096;
  if (name == "tiny") {
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

// `count` sequences of seq + 1 uniformly random ids below `vocab` (torch's generator: seed it),
// every position after the first a target.
inline std::vector<data::Sequence> randomSequences(size_t count, int seq, int64_t vocab) {
  std::vector<data::Sequence> sequences(count);
  torch::Tensor ids = torch::randint(0, vocab, {int64_t(count), seq + 1}, torch::kLong);
  auto a = ids.accessor<int64_t, 2>();
  for (size_t i = 0; i < count; ++i) {
    for (int j = 0; j <= seq; ++j) sequences[i].ids.push_back(int32_t(a[int64_t(i)][j]));
    sequences[i].lossMask.assign(size_t(seq) + 1, 1);
    sequences[i].lossMask[0] = 0;
  }
  return sequences;
}

// Seconds of every optimizer step the loop reports.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// "--name N" pairs into the integers they name; prints `usage` and returns false on anything else.
inline bool integerFlags(int argc, char** argv,
                         const std::vector<std::pair<std::string, int64_t*>>& flags,
                         const char* usage) {
  for (int i = 1; i < argc; i += 2) {
    const auto f = std::find_if(flags.begin(), flags.end(),
                                [&](const auto& flag) { return flag.first == argv[i]; });
    if (f == flags.end() || i + 1 >= argc) {
      std::fprintf(stderr, "usage: %s\n", usage);
      return false;
    }
    *f->second = std::atoll(argv[i + 1]);
  }
  return true;
}

// Wall-clock seconds of one call.
inline double seconds(const std::function<void()>& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

struct StepTimes : train::TrainerListener {
  std::vector<double> stepSeconds;
  int64_t tokensPerStep = 0;
  void onStep(const train::StepReport& r) override {
    stepSeconds.push_back(double(tokensPerStep) / r.tokensPerSecond);
  }
};

}  // namespace fp4lab::bench
