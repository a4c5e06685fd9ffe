// config.json <-> ModelConfig, with Hugging Face transformers' per-architecture defaults for
// the optional fields, and errors that name the field and the file.
#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>

#include "fp4lab/error.h"
#include "fp4lab/common/files.h"

namespace fp4lab::model {

namespace {

using Json = nlohmann::json;

struct ArchitectureInfo {
  Architecture architecture;
  const char* className;
  const char* modelType;
};

constexpr ArchitectureInfo kArchitectures[] = {
    {Architecture::Llama, "LlamaForCausalLM", "llama"},
    {Architecture::Qwen2, "Qwen2ForCausalLM", "qwen2"},
    {Architecture::Qwen3, "Qwen3ForCausalLM", "qwen3"},
    {Architecture::Mistral, "MistralForCausalLM", "mistral"},
    {Architecture::Mixtral, "MixtralForCausalLM", "mixtral"},
    {Architecture::GptOss, "GptOssForCausalLM", "gpt_oss"},
};

const ArchitectureInfo& infoOf(Architecture architecture) {
  for (const auto& info : kArchitectures) {
    if (info.architecture == architecture) return info;
  }
  throw Error("unknown architecture enum value", "ModelConfig");
}

std::string supportedArchitectures() {
  std::string text;
  for (const auto& info : kArchitectures)
    text += (text.empty() ? "" : ", ") + std::string(info.className);
  return "supported: " + text;
}

// Field readers: a missing or null optional field keeps the default; a present field of the
// wrong type is an error, never silently ignored.
class Reader {
 public:
  Reader(const Json& json, std::string where) : m_json(json), m_where(std::move(where)) {}

  bool has(const char* key) const { return m_json.contains(key) && !m_json.at(key).is_null(); }

  int64_t requiredInt(const char* key) const {
    if (!has(key)) {
      throw Error(std::string("missing required field '") + key + "'", m_where,
                  "a Hugging Face config.json for this architecture must set it");
    }
    return integer(key, m_json.at(key));
  }
  int64_t optionalInt(const char* key, int64_t fallback) const {
    return has(key) ? integer(key, m_json.at(key)) : fallback;
  }
  double optionalDouble(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    const Json& value = m_json.at(key);
    if (!value.is_number()) typeError(key, "a number");
    return value.get<double>();
  }
  bool optionalBool(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const Json& value = m_json.at(key);
    if (!value.is_boolean()) typeError(key, "true or false");
    return value.get<bool>();
  }
  std::string optionalString(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const Json& value = m_json.at(key);
    if (!value.is_string()) typeError(key, "a string");
    return value.get<std::string>();
  }
  // An int or a list of ints (eos_token_id).
  std::vector<int64_t> intList(const char* key) const {
    std::vector<int64_t> values;
    if (!has(key)) return values;
    const Json& value = m_json.at(key);
    if (value.is_array()) {
      for (const Json& item : value) values.push_back(integer(key, item));
    } else {
      values.push_back(integer(key, value));
    }
    return values;
  }

  int64_t integer(const char* key, const Json& value) const {
    // 4096.0 happens in hand-edited configs; accept integral floats, reject 1.5.
    if (value.is_number_integer()) return value.get<int64_t>();
    if (value.is_number_float()) {
      const double number = value.get<double>();
      if (number == static_cast<double>(static_cast<int64_t>(number))) {
        return static_cast<int64_t>(number);
      }
    }
    typeError(key, "an integer");
  }
  [[noreturn]] void typeError(const char* key, const char* expected) const {
    throw Error(
        std::string("field '") + key + "' must be " + expected + ", got " + m_json.at(key).dump(),
        m_where);
  }
  const std::string& where() const { return m_where; }

 private:
  const Json& m_json;
  std::string m_where;
};

// The keys parseModelConfig interprets; everything else is kept in ModelConfig::extra.
const std::set<std::string>& knownKeys() {
  static const std::set<std::string> keys = {"architectures",
                                             "model_type",
                                             "vocab_size",
                                             "hidden_size",
                                             "intermediate_size",
                                             "num_hidden_layers",
                                             "num_attention_heads",
                                             "num_key_value_heads",
                                             "head_dim",
                                             "rms_norm_eps",
                                             "rope_theta",
                                             "rope_scaling",
                                             "rope_parameters",
                                             "max_position_embeddings",
                                             "tie_word_embeddings",
                                             "attention_bias",
                                             "mlp_bias",
                                             "sliding_window",
                                             "use_sliding_window",
                                             "num_local_experts",
                                             "num_experts_per_tok",
                                             "initializer_range",
                                             "bos_token_id",
                                             "eos_token_id",
                                             "torch_dtype",
                                             "dtype",
                                             "hidden_act",
                                             "layer_types",
                                             "swiglu_limit",
                                             "swiglu_alpha"};
  return keys;
}

RopeScaling parseRopeScaling(const Json& json, const std::string& where) {
  RopeScaling scaling;
  if (!json.is_object()) {
    throw Error("field 'rope_scaling' must be null or an object, got " + json.dump(), where);
  }
  const Reader reader(json, where);
  // transformers accepts both spellings; "rope_type" is the current one.
  std::string type = reader.optionalString("rope_type", reader.optionalString("type", "default"));
  if (type == "default") return scaling;
  if (type == "linear") {
    scaling.type = RopeScaling::Type::Linear;
  } else if (type == "llama3") {
    scaling.type = RopeScaling::Type::Llama3;
    scaling.lowFreqFactor = reader.optionalDouble("low_freq_factor", 1.0);
    scaling.highFreqFactor = reader.optionalDouble("high_freq_factor", 4.0);
    scaling.originalMaxPositionEmbeddings = reader.requiredInt("original_max_position_embeddings");
    if (scaling.highFreqFactor <= scaling.lowFreqFactor) {
      throw Error("rope_scaling: high_freq_factor must exceed low_freq_factor", where);
    }
  } else if (type == "yarn") {
    scaling.type = RopeScaling::Type::Yarn;
    scaling.originalMaxPositionEmbeddings = reader.requiredInt("original_max_position_embeddings");
    if (scaling.originalMaxPositionEmbeddings <= 0) {
      throw Error("rope_scaling.original_max_position_embeddings must be positive", where);
    }
    // HF _compute_yarn_parameters: `or` defaults, so 0 means the default too.
    scaling.betaFast = reader.optionalDouble("beta_fast", 0);
    if (scaling.betaFast == 0) scaling.betaFast = 32;
    scaling.betaSlow = reader.optionalDouble("beta_slow", 0);
    if (scaling.betaSlow == 0) scaling.betaSlow = 1;
    scaling.truncate = reader.optionalBool("truncate", true);
  } else {
    throw Error("unsupported rope_scaling type '" + type + "'", where,
                "supported: default, linear, llama3, yarn");
  }
  if (!reader.has("factor")) {
    throw Error("missing required field 'rope_scaling.factor'", where);
  }
  scaling.factor = reader.optionalDouble("factor", 1.0);
  if (scaling.factor <= 0) throw Error("rope_scaling.factor must be positive", where);
  if (scaling.type == RopeScaling::Type::Yarn) {
    // HF: attention_factor, else from mscale / mscale_all_dim, else 0.1 ln(factor) + 1.
    const auto mscaleOf = [](double scale, double mscale) {
      return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
    };
    const double mscale = reader.optionalDouble("mscale", 0);
    const double mscaleAllDim = reader.optionalDouble("mscale_all_dim", 0);
    if (reader.has("attention_factor")) {
      scaling.attentionFactor = reader.optionalDouble("attention_factor", 1.0);
    } else if (mscale != 0 && mscaleAllDim != 0) {
      scaling.attentionFactor =
          mscaleOf(scaling.factor, mscale) / mscaleOf(scaling.factor, mscaleAllDim);
    } else {
      scaling.attentionFactor = mscaleOf(scaling.factor, 1.0);
    }
    // The fields fp4lab does not model go back out as they came (toJson).
    scaling.source = json;
  }
  return scaling;
}

Json ropeScalingJson(const RopeScaling& scaling) {
  switch (scaling.type) {
    case RopeScaling::Type::None:
      return nullptr;
    case RopeScaling::Type::Linear:
      return {{"rope_type", "linear"}, {"factor", scaling.factor}};
    case RopeScaling::Type::Llama3:
      return {{"rope_type", "llama3"},
              {"factor", scaling.factor},
              {"low_freq_factor", scaling.lowFreqFactor},
              {"high_freq_factor", scaling.highFreqFactor},
              {"original_max_position_embeddings", scaling.originalMaxPositionEmbeddings}};
    case RopeScaling::Type::Yarn: {
      Json json = scaling.source.is_object() ? scaling.source : Json::object();
      json.erase("type");
      json.erase("rope_theta");
      json["rope_type"] = "yarn";
      json["factor"] = scaling.factor;
      json["beta_fast"] = scaling.betaFast;
      json["beta_slow"] = scaling.betaSlow;
      json["truncate"] = scaling.truncate;
      json["original_max_position_embeddings"] = scaling.originalMaxPositionEmbeddings;
      return json;
    }
  }
  return nullptr;
}

Json tokenIdsJson(const std::vector<int64_t>& ids) {
  if (ids.empty()) return nullptr;
  if (ids.size() == 1) return ids.front();
  return ids;
}

Json readJsonFile(const std::string& path) {
  std::ifstream stream(path, std::ios::binary);
  if (!stream) throw Error("cannot open file", path, "check that the model folder is complete");
  try {
    return Json::parse(stream);
  } catch (const Json::exception& error) {
    throw Error(std::string("invalid JSON: ") + error.what(), path);
  }
}

}  // namespace

const char* architectureName(Architecture architecture) {
  return infoOf(architecture).className;
}
const char* modelTypeName(Architecture architecture) {
  return infoOf(architecture).modelType;
}

std::vector<int64_t> ModelConfig::stopTokenIds() const {
  std::vector<int64_t> ids = eosTokenIds;
  if (generationConfig.is_object() && generationConfig.contains("eos_token_id")) {
    const Json& eos = generationConfig.at("eos_token_id");
    auto add = [&](const Json& id) {
      if (id.is_number_integer() &&
          std::find(ids.begin(), ids.end(), id.get<int64_t>()) == ids.end()) {
        ids.push_back(id.get<int64_t>());
      }
    };
    if (eos.is_array()) {
      for (const Json& id : eos) add(id);
    } else {
      add(eos);
    }
  }
  return ids;
}

void ModelConfig::validate(const std::string& where) const {
  auto positive = [&](int64_t value, const char* field) {
    if (value <= 0) {
      throw Error(
          std::string("field '") + field + "' must be positive, got " + std::to_string(value),
          where);
    }
  };
  positive(vocabSize, "vocab_size");
  positive(hiddenSize, "hidden_size");
  positive(intermediateSize, "intermediate_size");
  positive(numHiddenLayers, "num_hidden_layers");
  positive(numAttentionHeads, "num_attention_heads");
  positive(numKeyValueHeads, "num_key_value_heads");
  positive(headDim, "head_dim");
  if (numAttentionHeads % numKeyValueHeads != 0) {
    throw Error("num_attention_heads (" + std::to_string(numAttentionHeads) +
                    ") must be a multiple of num_key_value_heads (" +
                    std::to_string(numKeyValueHeads) + ")",
                where);
  }
  // rotate_half splits the head in two halves.
  if (headDim % 2 != 0) throw Error("field 'head_dim' must be even", where);
  if (!(rmsNormEps > 0)) throw Error("field 'rms_norm_eps' must be positive", where);
  if (!(ropeTheta > 0)) throw Error("field 'rope_theta' must be positive", where);
  if (slidingWindow < 0) throw Error("field 'sliding_window' must not be negative", where);
  if (!slidingLayers.empty() && static_cast<int64_t>(slidingLayers.size()) != numHiddenLayers) {
    throw Error("field 'layer_types' lists " + std::to_string(slidingLayers.size()) +
                    " layers, the model has " + std::to_string(numHiddenLayers),
                where);
  }
  if (isGptOss() && !(swigluLimit > 0)) throw Error("field 'swiglu_limit' must be positive", where);
  if (isMoe() || isGptOss()) {
    positive(numLocalExperts, "num_local_experts");
    positive(numExpertsPerTok, "num_experts_per_tok");
    if (numExpertsPerTok > numLocalExperts) {
      throw Error("num_experts_per_tok exceeds num_local_experts", where);
    }
  }
}

ModelConfig parseModelConfig(const Json& json, const std::string& where) {
  if (!json.is_object()) throw Error("config must be a JSON object", where);
  const Reader reader(json, where);
  ModelConfig config;

  if (!reader.has("architectures")) {
    throw Error("missing required field 'architectures'", where,
                "expected e.g. [\"LlamaForCausalLM\"]");
  }
  const Json& architectures = json.at("architectures");
  if (!architectures.is_array() || architectures.size() != 1 || !architectures[0].is_string()) {
    throw Error(
        "field 'architectures' must list exactly one class name, got " + architectures.dump(),
        where, supportedArchitectures());
  }
  const std::string className = architectures[0].get<std::string>();
  const auto known = std::find_if(std::begin(kArchitectures), std::end(kArchitectures),
                                  [&](const auto& info) { return className == info.className; });
  if (known == std::end(kArchitectures)) {
    throw Error("unknown architecture '" + className + "' in field 'architectures'", where,
                supportedArchitectures());
  }
  config.architecture = known->architecture;
  const Architecture arch = config.architecture;
  const bool mistralFamily = arch == Architecture::Mistral || arch == Architecture::Mixtral;
  const bool gptOss = arch == Architecture::GptOss;

  const std::string activation = reader.optionalString("hidden_act", "silu");
  if (activation != "silu") {
    throw Error("unsupported hidden_act '" + activation + "'", where, "only silu (SwiGLU)");
  }

  config.vocabSize = reader.requiredInt("vocab_size");
  config.hiddenSize = reader.requiredInt("hidden_size");
  config.intermediateSize = reader.requiredInt("intermediate_size");
  config.numHiddenLayers = reader.requiredInt("num_hidden_layers");
  config.numAttentionHeads = reader.requiredInt("num_attention_heads");
  if (config.numAttentionHeads <= 0) {
    throw Error("field 'num_attention_heads' must be positive", where);
  }
  config.numKeyValueHeads = reader.optionalInt("num_key_value_heads", config.numAttentionHeads);
  // Qwen3Config's head_dim defaults to 128, the others' to hidden_size / num_attention_heads.
  // GptOssConfig's to 64.
  const int64_t defaultHeadDim = arch == Architecture::Qwen3 ? 128
                                 : gptOss                    ? 64
                                          : config.hiddenSize / config.numAttentionHeads;
  config.headDim = reader.optionalInt("head_dim", defaultHeadDim);

  config.rmsNormEps =
      reader.optionalDouble("rms_norm_eps", arch == Architecture::Mixtral || gptOss ? 1e-5 : 1e-6);
  config.ropeTheta = reader.optionalDouble("rope_theta", arch == Architecture::Mixtral ? 1e6
                                                         : gptOss                      ? 1.5e5
                                                                                       : 1e4);
  if (gptOss && !reader.has("rope_parameters") && !reader.has("rope_scaling")) {
    // GptOssConfig's default: YaRN, 32x the original 4096 positions.
    config.ropeScaling = parseRopeScaling({{"rope_type", "yarn"},
                                           {"factor", 32.0},
                                           {"beta_fast", 32.0},
                                           {"beta_slow", 1.0},
                                           {"truncate", false},
                                           {"original_max_position_embeddings", 4096}},
                                          where);
  } else if (reader.has("rope_parameters")) {
    // transformers >= 5 keeps theta and the scaling kind together in rope_parameters.
    const Json& parameters = json.at("rope_parameters");
    config.ropeScaling = parseRopeScaling(parameters, where);
    config.ropeTheta = Reader(parameters, where).optionalDouble("rope_theta", config.ropeTheta);
  } else if (reader.has("rope_scaling")) {
    config.ropeScaling = parseRopeScaling(json.at("rope_scaling"), where);
  }

  const int64_t defaultMaxPositions = arch == Architecture::Llama ? 2048
                                      : mistralFamily             ? 4096 * 32
                                      : gptOss                    ? 131072
                                                                  : 32768;
  config.maxPositionEmbeddings = reader.optionalInt("max_position_embeddings", defaultMaxPositions);
  config.tieWordEmbeddings = reader.optionalBool("tie_word_embeddings", false);
  // HF's Mistral and Mixtral hard-code bias=False whatever the config says.
  config.attentionBias = !mistralFamily && reader.optionalBool("attention_bias", gptOss);
  config.mlpBias = arch == Architecture::Llama && reader.optionalBool("mlp_bias", false);

  if (mistralFamily) {
    // MistralConfig defaults sliding_window to 4096 when the key is absent; null disables it.
    if (!json.contains("sliding_window")) {
      config.slidingWindow = arch == Architecture::Mistral ? 4096 : 0;
    } else {
      config.slidingWindow = reader.optionalInt("sliding_window", 0);
    }
  } else if (gptOss) {
    // GptOssConfig: sliding_window 128, layer_types alternating sliding/full from layer 0.
    config.slidingWindow =
        json.contains("sliding_window") ? reader.optionalInt("sliding_window", 0) : 128;
    if (reader.has("layer_types")) {
      const Json& types = json.at("layer_types");
      if (!types.is_array()) reader.typeError("layer_types", "a list of layer types");
      for (const Json& type : types) {
        const std::string name = type.is_string() ? type.get<std::string>() : type.dump();
        if (name != "sliding_attention" && name != "full_attention") {
          throw Error("field 'layer_types' has '" + name + "'", where,
                      "each layer is \"sliding_attention\" or \"full_attention\"");
        }
        config.slidingLayers.push_back(name == "sliding_attention");
      }
    } else {
      for (int64_t i = 0; i < config.numHiddenLayers; ++i)
        config.slidingLayers.push_back(i % 2 == 0);
    }
    // Without a window every layer attends fully (HF's mask for sliding_window None).
    if (config.slidingWindow == 0) config.slidingLayers.assign(config.slidingLayers.size(), false);
    config.swigluLimit = reader.optionalDouble("swiglu_limit", 7.0);
    config.swigluAlpha = reader.optionalDouble("swiglu_alpha", 1.702);
  } else if ((arch == Architecture::Qwen2 || arch == Architecture::Qwen3) &&
             reader.optionalBool("use_sliding_window", false)) {
    throw Error("use_sliding_window=true is not supported", where,
                "Qwen's per-layer sliding window (max_window_layers) is not implemented");
  }

  if (config.isMoe()) {
    config.numLocalExperts = reader.requiredInt("num_local_experts");
    config.numExpertsPerTok = reader.requiredInt("num_experts_per_tok");
  } else if (gptOss) {
    config.numLocalExperts = reader.optionalInt("num_local_experts", 128);
    config.numExpertsPerTok = reader.optionalInt("num_experts_per_tok", 4);
  }
  config.initializerRange = reader.optionalDouble("initializer_range", 0.02);

  if (reader.has("bos_token_id"))
    config.bosTokenId = reader.integer("bos_token_id", json.at("bos_token_id"));
  config.eosTokenIds = reader.intList("eos_token_id");
  config.torchDtype = reader.optionalString("torch_dtype", reader.optionalString("dtype", ""));

  for (const auto& [key, value] : json.items()) {
    if (!knownKeys().count(key)) config.extra[key] = value;
  }
  // Qwen's sliding_window is inert (use_sliding_window is false) but part of its config; keep it.
  if (!mistralFamily && !gptOss && json.contains("sliding_window")) {
    config.extra["sliding_window"] = json.at("sliding_window");
  }
  config.validate(where);
  return config;
}

ModelConfig loadModelConfig(const std::string& configPath) {
  ModelConfig config = parseModelConfig(readJsonFile(configPath), configPath);
  const std::string generationPath =
      files::join(files::parentOf(configPath), "generation_config.json");
  if (files::exists(generationPath)) {
    config.generationConfig = readJsonFile(generationPath);
    if (!config.generationConfig.is_object()) {
      throw Error("generation config must be a JSON object", generationPath);
    }
  }
  return config;
}

Json toJson(const ModelConfig& config) {
  Json json = config.extra.is_object() ? config.extra : Json::object();
  json["architectures"] = {architectureName(config.architecture)};
  json["model_type"] = modelTypeName(config.architecture);
  json["hidden_act"] = "silu";
  json["vocab_size"] = config.vocabSize;
  json["hidden_size"] = config.hiddenSize;
  json["intermediate_size"] = config.intermediateSize;
  json["num_hidden_layers"] = config.numHiddenLayers;
  json["num_attention_heads"] = config.numAttentionHeads;
  json["num_key_value_heads"] = config.numKeyValueHeads;
  json["head_dim"] = config.headDim;
  json["rms_norm_eps"] = config.rmsNormEps;
  // The classic keys (rope_theta, rope_scaling, torch_dtype) for transformers 4 and the tools
  // that read them, and transformers 5's (rope_parameters, dtype), the same values, so that
  // either loads the folder as it is, without converting or warning.
  json["rope_theta"] = config.ropeTheta;
  json["rope_scaling"] = ropeScalingJson(config.ropeScaling);
  Json ropeParameters =
      json["rope_scaling"].is_object() ? json["rope_scaling"] : Json{{"rope_type", "default"}};
  ropeParameters["rope_theta"] = config.ropeTheta;
  json["rope_parameters"] = ropeParameters;
  json["max_position_embeddings"] = config.maxPositionEmbeddings;
  json["tie_word_embeddings"] = config.tieWordEmbeddings;
  json["initializer_range"] = config.initializerRange;
  switch (config.architecture) {
    case Architecture::Llama:
      json["attention_bias"] = config.attentionBias;
      json["mlp_bias"] = config.mlpBias;
      break;
    case Architecture::Qwen2:
      json["use_sliding_window"] = false;
      break;
    case Architecture::Qwen3:
      json["attention_bias"] = config.attentionBias;
      json["use_sliding_window"] = false;
      break;
    case Architecture::Mistral:
    case Architecture::Mixtral:
      json["sliding_window"] = config.slidingWindow > 0 ? Json(config.slidingWindow) : Json();
      break;
    case Architecture::GptOss: {
      json["attention_bias"] = config.attentionBias;
      json["sliding_window"] = config.slidingWindow > 0 ? Json(config.slidingWindow) : Json();
      Json types = Json::array();
      for (bool sliding : config.slidingLayers)
        types.push_back(sliding ? "sliding_attention" : "full_attention");
      json["layer_types"] = types;
      json["swiglu_limit"] = config.swigluLimit;
      json["swiglu_alpha"] = config.swigluAlpha;
      break;
    }
  }
  if (config.isMoe() || config.isGptOss()) {
    json["num_local_experts"] = config.numLocalExperts;
    json["num_experts_per_tok"] = config.numExpertsPerTok;
  }
  json["bos_token_id"] = config.bosTokenId ? Json(*config.bosTokenId) : Json();
  json["eos_token_id"] = tokenIdsJson(config.eosTokenIds);
  if (!config.torchDtype.empty()) {
    json["torch_dtype"] = config.torchDtype;
    json["dtype"] = config.torchDtype;
  }
  return json;
}

Json generationConfigJson(const ModelConfig& config) {
  if (config.generationConfig.is_object()) return config.generationConfig;
  Json json = Json::object();
  if (config.bosTokenId) json["bos_token_id"] = *config.bosTokenId;
  if (!config.eosTokenIds.empty()) json["eos_token_id"] = tokenIdsJson(config.eosTokenIds);
  return json;
}

}  // namespace fp4lab::model
