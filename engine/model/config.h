// ModelConfig: the decoder-only transformer's shape, read from and written to a Hugging Face
// config.json (Llama, Qwen2, Qwen3, Mistral, Mixtral, gpt-oss).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace fp4lab::model {

enum class Architecture { Llama, Qwen2, Qwen3, Mistral, Mixtral, GptOss };

const char* architectureName(Architecture architecture);  // "LlamaForCausalLM", ...
const char* modelTypeName(Architecture architecture);     // "llama", "qwen2", ...

// rope_scaling (or, in newer transformers, rope_parameters). Only the kinds whose inv_freq
// adjustment is static are supported: none, "linear", "llama3" and "yarn"; others are rejected at
// parse.
struct RopeScaling {
  enum class Type { None, Linear, Llama3, Yarn };
  Type type = Type::None;
  double factor = 1.0;
  double lowFreqFactor = 1.0;                    // llama3 only
  double highFreqFactor = 4.0;                   // llama3 only
  int64_t originalMaxPositionEmbeddings = 8192;  // llama3 and yarn
  double betaFast = 32.0, betaSlow = 1.0;        // yarn: the ramp's rotation bounds
  bool truncate = true;                          // yarn: round the correction range outwards
  // yarn: cos and sin are multiplied by this (HF's attention_factor; from factor, mscale and
  // mscale_all_dim when the config does not set it).
  double attentionFactor = 1.0;
  nlohmann::json source;  // yarn: the object as parsed (mscale, attention_factor... kept)
};

struct ModelConfig {
  Architecture architecture = Architecture::Llama;
  int64_t vocabSize = 0;
  int64_t hiddenSize = 0;
  int64_t intermediateSize = 0;
  int64_t numHiddenLayers = 0;
  int64_t numAttentionHeads = 0;
  int64_t numKeyValueHeads = 0;  // defaults to numAttentionHeads
  int64_t headDim = 0;           // defaults to hiddenSize / numAttentionHeads
  double rmsNormEps = 1e-6;
  double ropeTheta = 10000.0;
  RopeScaling ropeScaling;
  int64_t maxPositionEmbeddings = 2048;
  bool tieWordEmbeddings = false;
  // HF's attention_bias. Qwen2 has no such field: its q/k/v always carry a bias (see qkvBias()).
  bool attentionBias = false;
  bool mlpBias = false;         // Llama's mlp_bias
  int64_t slidingWindow = 0;    // Mistral/Mixtral sliding_window; 0 = full attention
  int64_t numLocalExperts = 0;  // Mixtral and gpt-oss
  int64_t numExpertsPerTok = 0;
  // gpt-oss: which layers attend through the sliding window (layer_types "sliding_attention");
  // the others see every earlier position. Empty for the other architectures, whose window (if
  // any) applies to every layer.
  std::vector<bool> slidingLayers;
  double swigluLimit = 7.0;    // gpt-oss: the experts' clamp
  double swigluAlpha = 1.702;  // gpt-oss: the sigmoid gain of its SwiGLU
  double initializerRange = 0.02;
  std::optional<int64_t> bosTokenId;
  std::vector<int64_t> eosTokenIds;  // config.json's eos_token_id (int or list)
  std::string torchDtype;            // "bfloat16", ... as written; empty when absent
  // Fields of config.json this struct does not model (transformers_version, ...), written back
  // unchanged so a load/save round trip keeps them.
  nlohmann::json extra = nlohmann::json::object();
  // generation_config.json as loaded (null when the folder had none); saved back unchanged
  // except for the eos/bos ids when it is synthesized.
  nlohmann::json generationConfig;

  bool qkNorm() const { return architecture == Architecture::Qwen3; }
  bool isMoe() const { return architecture == Architecture::Mixtral; }  // block_sparse_moe
  bool isGptOss() const { return architecture == Architecture::GptOss; }
  // The sliding window of layer `layer` (0: full attention).
  int64_t windowOf(int64_t layer) const {
    if (slidingLayers.empty()) return slidingWindow;
    return slidingLayers.at(static_cast<size_t>(layer)) ? slidingWindow : 0;
  }
  bool qkvBias() const { return architecture == Architecture::Qwen2 || attentionBias; }
  // Qwen2's o_proj has no bias; Mistral/Mixtral have no biases at all (HF ignores the field).
  bool oProjBias() const { return attentionBias && architecture != Architecture::Qwen2; }
  // eos ids of config.json and generation_config.json together, without duplicates.
  std::vector<int64_t> stopTokenIds() const;
  // Throws fp4lab::Error on inconsistent sizes (heads not dividing, non-positive sizes...).
  void validate(const std::string& where) const;
};

// Parses a config.json object; `where` (the file path) goes into every error. Unknown
// architectures, missing required fields and wrong field types throw fp4lab::Error naming the
// field and `where`.
ModelConfig parseModelConfig(const nlohmann::json& json, const std::string& where);
// Reads and parses a config.json file (and generation_config.json next to it, if present).
ModelConfig loadModelConfig(const std::string& configPath);
// The config.json object Hugging Face transformers would write for this config.
nlohmann::json toJson(const ModelConfig& config);
// generation_config.json: the loaded one, or {bos_token_id, eos_token_id} when there was none.
nlohmann::json generationConfigJson(const ModelConfig& config);

}  // namespace fp4lab::model
