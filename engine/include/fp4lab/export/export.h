// Deployable checkpoints: a model folder (BF16 Hugging Face, or a run's model/ or checkpoint with
// its quant_state.json) written as ModelOpt NVFP4, compressed-tensors NVFP4 / MXFP4, gpt-oss MXFP4
// or plain BF16,
// tensor by tensor from the memory-mapped input, sharded, atomically, then read back and checked
// bit for bit against the kernels' fake quantization. Plain C++ (fp4lab_export: no LibTorch), so
// the workbench's export dialog can call it in-process or through `fp4lab export`.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "fp4lab/common/glob.h"

namespace fp4lab::exporter {

enum class Format {
  ModelOptNvfp4,           // modelopt-nvfp4: vLLM, SGLang, TensorRT-LLM
  CompressedTensorsNvfp4,  // compressed-tensors-nvfp4 (nvfp4-pack-quantized): vLLM, transformers
  CompressedTensorsMxfp4,  // compressed-tensors-mxfp4 (mxfp4-pack-quantized): vLLM, transformers
  GptOssMxfp4,             // gpt-oss-mxfp4: gpt-oss models only (the experts in MXFP4)
  Bf16,                    // bf16: a plain Hugging Face folder
};

// "modelopt-nvfp4", ... and back (nullopt for an unknown name).
const char* formatName(Format format);
std::optional<Format> parseFormat(const std::string& name);
// The format names, in the order above.
std::vector<std::string> formatNames();
// One line: who loads it.
const char* formatDescription(Format format);

struct Options {
  std::string modelDir;   // a Hugging Face folder, with or without quant_state.json
  std::string outputDir;  // must not exist, be empty, or (with force) is replaced
  Format format = Format::ModelOptNvfp4;
  // fnmatch-style globs ('*' crosses dots) of module names kept in high precision, on top of
  // the defaults (quant.exclude's, or the layers a quant_state.json does not name).
  std::vector<std::string> exclude;
  // MXFP4 block-scale rule: "ceil", "floor", or empty (the run's, else ceil). A rule that
  // differs from the run's is refused (the file would not decode to what was trained).
  std::string scaleRule;
  uint64_t maxShardBytes = 5000000000ull;  // shards above this size (Hugging Face's "5GB")
  bool force = false;                      // replace a non-empty outputDir
  bool verify = true;                      // read back and check every tensor after writing
};

struct Progress {
  std::string stage;            // "measure", "write", "verify"
  std::string tensor;           // the tensor being handled
  int64_t done = 0, total = 0;  // tensors in this stage
};

struct LayerReport {
  std::string name;        // module name, e.g. model.layers.0.mlp.down_proj
  float tensorAmax = 0;    // the amax behind the tensor scale (the fused group's, NVFP4)
  float ownAmax = 0;       // the layer's own weight amax
  float inputAmax = -1;    // the calibrated input amax (< 0: none)
  double maxAbsError = 0;  // max |decoded - BF16 weight|
  double relL2 = 0;        // ||decoded - w|| / ||w||
};

struct Summary {
  std::string outputDir, format;
  std::string quantAlgo;  // "NVFP4", "W4A16_NVFP4", "MXFP4", "MXFP4A16", "BF16"
  std::string source;     // "quant_state.json (<description>)" or "BF16 weights"
  int64_t tensors = 0;    // written
  int64_t quantizedLayers = 0;
  int64_t verifiedTensors = 0;  // compared after reading back (0 when verify is off)
  int64_t shards = 0;
  uint64_t inputBytes = 0;               // tensor bytes read
  uint64_t outputBytes = 0;              // tensor bytes written
  double compression = 1;                // inputBytes / outputBytes
  double maxAbsError = 0;                // over every quantized weight
  std::string worstLayer;                // where maxAbsError is
  bool sharedTensorScales = false;       // NVFP4: q/k/v and gate/up share one tensor scale
  std::vector<std::string> excludeList;  // what the format's exclude / ignore list holds
  std::vector<LayerReport> layers;
};

// Writes the export. Throws fp4lab::Error (what, where, what to do) on any problem; then the
// output folder is untouched (a temporary sibling folder is removed). `cancel` set while running
// stops it the same way (Error "export cancelled").
Summary exportModel(const Options& options,
                    const std::function<void(const Progress&)>& progress = {},
                    const std::atomic<bool>* cancel = nullptr);

// "5GB" (10^9), "500MB", "2GiB" (2^30), "100KB", "1234" (bytes): the --max-shard-size forms
// Hugging Face accepts. Throws fp4lab::Error.
uint64_t parseByteSize(const std::string& text);

// The project's glob matcher (fp4lab/common/glob.h).
using fp4lab::globMatch;

}  // namespace fp4lab::exporter
