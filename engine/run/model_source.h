// Where models and data come from: Hugging Face folders, the built-in tiny model (built by
// fp4lab itself on first use), fresh random models, JSONL files and the built-in datasets.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "fp4lab/data/chat_template.h"
#include "fp4lab/data/packing.h"
#include "fp4lab/data/tokenizer.h"
#include "fp4lab/run/run_config.h"
#include "model/causal_lm.h"
#include "model/pretrained.h"

namespace fp4lab::run {

struct ModelBundle {
  model::CausalLM model{nullptr};
  std::unique_ptr<data::Tokenizer> tokenizer;
  std::string source;  // the folder it came from, or scratch:<name>
};

// `path`: a Hugging Face folder; builtin:tiny (the shipped base model, built on first use);
// scratch:tiny (the same architecture, randomly initialised from `seed`).
ModelBundle loadModelBundle(const std::string& path, torch::Dtype dtype, uint64_t seed = 0);
// Saves the model (BF16) and its tokenizer description as a Hugging Face folder, atomically.
void saveModelBundle(const ModelBundle& bundle, const std::string& dir,
                     torch::Dtype dtype = torch::kBFloat16);

// The folder of the built-in base model: the one shipped in resources/models/tiny-v2 (or installed
// under share/fp4lab), else a copy built once into the cache.
std::string builtinModelPath();
// Trains the built-in base model from random weights with its recipe into `destination`
// (a few minutes on two cores); how the shipped one was made.
std::string buildBuiltinModel(const std::string& destination, bool verbose = true);
// fp4lab's cache folder: $FP4LAB_HOME, else $XDG_CACHE_HOME/fp4lab, else ~/.cache/fp4lab.
std::string cacheRoot();

// JSONL file or builtin:<name>.
std::vector<data::Example> loadExamples(const std::string& source, uint64_t seed);

struct DataBundle {
  std::vector<data::Sequence> train, validation;
  size_t trainSequences = 0;
};
DataBundle loadTrainingData(const RunConfig& config, const data::Tokenizer& tokenizer);

}  // namespace fp4lab::run
