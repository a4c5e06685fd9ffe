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
#include "fp4lab/run/model.h"
#include "fp4lab/run/run_config.h"
#include "model/causal_lm.h"
#include "model/pretrained.h"
#include "quant/quantize_model.h"

namespace fp4lab::run {

// A loaded model: the network, where it came from, the fake quantizers its folder's
// quant_state.json re-attached (empty for a BF16 model, or when loaded with bf16Weights), and
// its tokenizer, read from the folder the first time something needs it.
struct ModelBundle {
  model::CausalLM model{nullptr};
  std::string source;  // the folder it came from, or scratch:<name>
  std::vector<quant::QuantizedLayer> quantizers;
  quant::QuantOptions quantOptions;  // meaningful when quantizers is not empty
  // The `fp4lab export` layout the folder held ("modelopt-nvfp4", "compressed-tensors-nvfp4",
  // "compressed-tensors-mxfp4"; empty: a Hugging Face folder): its quantized weights were decoded
  // on load and, unless bf16Weights, fake quantizers with the file's scales attached.
  std::string exportFormat;
  // An export folder from another tool whose codes no fp4lab quantizer reproduces: loaded as its
  // decoded weights, without quantizers.
  bool decodedOnly = false;

  // The tokenizer (tokenizer.json, or fp4lab's byte tokenizer); throws fp4lab::Error saying what
  // is missing when the folder has none. `why`: what needs it, for the message.
  const data::Tokenizer& tokenizer(const std::string& why = "this") const;
  bool hasTokenizer() const;
  // "bf16", or the quantization as saved, e.g. "NVFP4 W4A4, 1-D blocks, clipped STE, calibrated
  // amax (28 layers)".
  std::string quantization() const;

  mutable std::unique_ptr<data::Tokenizer> loadedTokenizer;
  // The tokenizer's files as loaded (tokenizer.json, tokenizer_config.json, ...; or fp4lab's
  // byte-tokenizer marker), kept in memory so that a saved model always carries them even when
  // the folder it came from is gone (a resumed run's pruned checkpoint).
  std::vector<std::pair<std::string, std::string>> tokenizerFiles;
};

// `path`: a Hugging Face folder (a run's model/ or checkpoint with its quant_state.json is
// loaded fake-quantized as saved, unless `bf16Weights`; an `fp4lab export` folder, modelopt-nvfp4
// or compressed-tensors-nvfp4/mxfp4, is decoded and fake-quantized with its scales, so it scores
// as the run's model did); builtin:tiny (the shipped base model,
// built on first use); scratch:tiny (the same architecture, randomly initialised from `seed`).
// A folder that is not a model folder is an error saying what it lacks.
ModelBundle loadModelBundle(const std::string& path, torch::Dtype dtype, uint64_t seed = 0,
                            bool bf16Weights = false);
// Saves the model (BF16) and its tokenizer description as a Hugging Face folder, atomically.
// `extra`: more files written into the folder inside the same atomic write (quant_state.json).
void saveModelBundle(const ModelBundle& bundle, const std::string& dir,
                     torch::Dtype dtype = torch::kBFloat16,
                     const std::vector<std::pair<std::string, std::string>>& extra = {});

// (builtinModelPath, buildBuiltinModel and cacheRoot: fp4lab/run/model.h.)

struct DataBundle {
  std::vector<data::Sequence> train, validation;
  size_t trainSequences = 0;
};
// Tokenized and packed training and validation sequences; the tokenizer is asked for only when
// rows need it (chat rows; pre-tokenized rows are checked against the model's vocabulary).
DataBundle loadTrainingData(const RunConfig& config, const ModelBundle& bundle);
// Pre-tokenized rows as they are, chat rows through the model's tokenizer and chat template.
std::vector<data::TokenizedExample> tokenizeExamples(const std::vector<data::Example>& examples,
                                                     const ModelBundle& bundle);

}  // namespace fp4lab::run
