// Hugging Face model folders: loading (config.json + model.safetensors or shards with
// model.safetensors.index.json) into a CausalLM, and saving one, with the folder replaced
// atomically so a crash never leaves a half-written checkpoint.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/causal_lm.h"

namespace fp4lab::model {

// Reads <dir>/config.json (and generation_config.json if present) and the weights, converting
// F32/BF16/F16/F64 tensors to `dtype` on `device`. Throws fp4lab::Error (naming the file and
// tensors) on: a missing or bad config, no weights file, an index pointing at missing files or
// tensors, a tensor whose shape differs from the config's, a non-float tensor, checkpoint
// tensors the model lacks (besides known harmless ones: rotary inv_freq buffers, and lm_head
// when embeddings are tied) and model parameters the checkpoint lacks.
CausalLM loadPretrained(const std::string& dir, torch::Dtype dtype = torch::kBFloat16,
                        torch::Device device = torch::kCPU);

struct SaveOptions {
  torch::Dtype dtype = torch::kBFloat16;  // of the tensors written; also config's torch_dtype
  // Merged into config.json last (overrides), e.g. {"quantization_config": ...}.
  nlohmann::json extraConfig = nlohmann::json::object();
  // Files copied into the folder as they are (tokenizer.json, tokenizer_config.json, ...).
  std::vector<std::string> extraFiles;
  // Files written into the folder from memory: (name, content).
  std::vector<std::pair<std::string, std::string>> extraContents;
  // Checkpoints larger than this are split into model-0000i-of-0000n.safetensors plus
  // model.safetensors.index.json, as transformers does (its default is 5 GB). It also bounds
  // the host memory the writer holds at once.
  uint64_t maxShardBytes = 5'000'000'000ull;
};

// Writes config.json, generation_config.json, the weights (parameters converted to
// options.dtype, in named_parameters() order) and options.extraFiles into the existing folder
// `dir`, each file atomically, without replacing the folder. Used by savePretrained on its
// staging folder, and by callers that add their own files before publishFolder().
void writePretrainedFiles(CausalLM& model, const std::string& dir, const SaveOptions& options = {});

// (Folders are published atomically by files::publishFolder, fp4lab/common/files.h.)

// writePretrainedFiles into "<dir>.tmp-<pid>" (created fresh; a leftover of that name is
// removed first), then publishFolder into `dir`. On any error the staging folder is removed and
// `dir` is untouched.
void savePretrained(CausalLM& model, const std::string& dir, const SaveOptions& options = {});
void savePretrained(CausalLM& model, const std::string& dir, torch::Dtype dtype);

}  // namespace fp4lab::model
