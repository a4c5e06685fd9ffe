// ModelConfig parsing: Hugging Face defaults per architecture, rope_scaling variants, the
// config.json round trip, and errors that name the field and the file.
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <string>

#include "fp4lab/error.h"
#include "model/config.h"
#include "fp4lab/common/files.h"

using namespace fp4lab::model;
namespace files = fp4lab::files;
using Json = nlohmann::json;

namespace {

Json minimal(const std::string& architecture) {
  return {{"architectures", {architecture}}, {"vocab_size", 100},      {"hidden_size", 64},
          {"intermediate_size", 96},         {"num_hidden_layers", 2}, {"num_attention_heads", 4}};
}

// The fp4lab::Error a parse throws, or a failed test if it does not throw that.
fp4lab::Error parseError(const Json& json, const std::string& where = "cfg/config.json") {
  try {
    parseModelConfig(json, where);
  } catch (const fp4lab::Error& error) {
    return error;
  }
  FAIL("expected fp4lab::Error for " << json.dump());
  throw;  // unreachable
}

}  // namespace

TEST_CASE("minimal configs get transformers' defaults", "[model][config]") {
  const ModelConfig llama = parseModelConfig(minimal("LlamaForCausalLM"), "x");
  CHECK(llama.architecture == Architecture::Llama);
  CHECK(llama.numKeyValueHeads == 4);
  CHECK(llama.headDim == 16);
  CHECK(llama.rmsNormEps == 1e-6);
  CHECK(llama.ropeTheta == 1e4);
  CHECK(llama.maxPositionEmbeddings == 2048);
  CHECK_FALSE(llama.tieWordEmbeddings);
  CHECK_FALSE(llama.qkvBias());
  CHECK_FALSE(llama.oProjBias());
  CHECK_FALSE(llama.qkNorm());
  CHECK(llama.ropeScaling.type == RopeScaling::Type::None);
  CHECK(llama.slidingWindow == 0);
  CHECK(llama.eosTokenIds.empty());

  const ModelConfig qwen2 = parseModelConfig(minimal("Qwen2ForCausalLM"), "x");
  CHECK(qwen2.qkvBias());
  CHECK_FALSE(qwen2.oProjBias());
  CHECK(qwen2.maxPositionEmbeddings == 32768);

  const ModelConfig qwen3 = parseModelConfig(minimal("Qwen3ForCausalLM"), "x");
  CHECK(qwen3.qkNorm());
  CHECK(qwen3.headDim == 128);  // Qwen3Config's own default, not hidden / heads
  CHECK_FALSE(qwen3.qkvBias());

  Json mixtralJson = minimal("MixtralForCausalLM");
  mixtralJson["num_local_experts"] = 8;
  mixtralJson["num_experts_per_tok"] = 2;
  mixtralJson["attention_bias"] = true;  // Mixtral ignores it, as HF does
  const ModelConfig mixtral = parseModelConfig(mixtralJson, "x");
  CHECK(mixtral.isMoe());
  CHECK(mixtral.rmsNormEps == 1e-5);
  CHECK(mixtral.ropeTheta == 1e6);
  CHECK(mixtral.slidingWindow == 0);
  CHECK_FALSE(mixtral.qkvBias());

  Json mistralJson = minimal("MistralForCausalLM");
  CHECK(parseModelConfig(mistralJson, "x").slidingWindow == 4096);
  mistralJson["sliding_window"] = nullptr;
  CHECK(parseModelConfig(mistralJson, "x").slidingWindow == 0);
  mistralJson["sliding_window"] = 1024;
  CHECK(parseModelConfig(mistralJson, "x").slidingWindow == 1024);
}

TEST_CASE("fields present in config.json are read", "[model][config]") {
  Json json = minimal("LlamaForCausalLM");
  json["num_key_value_heads"] = 2;
  json["head_dim"] = 24;
  json["rms_norm_eps"] = 1e-5;
  json["rope_theta"] = 500000.0;
  json["max_position_embeddings"] = 131072;
  json["tie_word_embeddings"] = true;
  json["attention_bias"] = true;
  json["mlp_bias"] = true;
  json["bos_token_id"] = 128000;
  json["eos_token_id"] = {128001, 128008, 128009};
  json["torch_dtype"] = "bfloat16";
  json["rope_scaling"] = {{"factor", 8.0},
                          {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0},
                          {"original_max_position_embeddings", 8192},
                          {"rope_type", "llama3"}};
  const ModelConfig config = parseModelConfig(json, "x");
  CHECK(config.numKeyValueHeads == 2);
  CHECK(config.headDim == 24);
  CHECK(config.rmsNormEps == 1e-5);
  CHECK(config.ropeTheta == 500000.0);
  CHECK(config.maxPositionEmbeddings == 131072);
  CHECK(config.tieWordEmbeddings);
  CHECK(config.qkvBias());
  CHECK(config.oProjBias());
  CHECK(config.mlpBias);
  CHECK(config.bosTokenId == 128000);
  CHECK(config.eosTokenIds == std::vector<int64_t>{128001, 128008, 128009});
  CHECK(config.torchDtype == "bfloat16");
  CHECK(config.ropeScaling.type == RopeScaling::Type::Llama3);
  CHECK(config.ropeScaling.factor == 8.0);
  CHECK(config.ropeScaling.originalMaxPositionEmbeddings == 8192);

  SECTION("the older 'type' key and linear scaling") {
    json["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
    const ModelConfig linear = parseModelConfig(json, "x");
    CHECK(linear.ropeScaling.type == RopeScaling::Type::Linear);
    CHECK(linear.ropeScaling.factor == 2.0);
  }
  SECTION("transformers 5 rope_parameters") {
    json.erase("rope_scaling");
    json.erase("rope_theta");
    json["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
    const ModelConfig v5 = parseModelConfig(json, "x");
    CHECK(v5.ropeTheta == 1e6);
    CHECK(v5.ropeScaling.type == RopeScaling::Type::None);
  }
  SECTION("integral floats are accepted as integers") {
    json["hidden_size"] = 64.0;
    CHECK(parseModelConfig(json, "x").hiddenSize == 64);
  }
}

TEST_CASE("config.json round trip keeps every field", "[model][config]") {
  Json json = minimal("Qwen3ForCausalLM");
  json["head_dim"] = 32;
  json["eos_token_id"] = {5, 7};
  json["bos_token_id"] = 3;
  json["tie_word_embeddings"] = true;
  json["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 4.0}};
  json["transformers_version"] = "4.51.0";
  json["initializer_range"] = 0.01;
  const ModelConfig config = parseModelConfig(json, "x");
  CHECK(config.extra.at("transformers_version") == "4.51.0");

  const Json written = toJson(config);
  CHECK(written.at("architectures") == Json::array({"Qwen3ForCausalLM"}));
  CHECK(written.at("model_type") == "qwen3");
  CHECK(written.at("transformers_version") == "4.51.0");
  CHECK(written.at("eos_token_id") == Json::array({5, 7}));
  const ModelConfig again = parseModelConfig(written, "y");
  CHECK(again.architecture == config.architecture);
  CHECK(again.vocabSize == config.vocabSize);
  CHECK(again.hiddenSize == config.hiddenSize);
  CHECK(again.intermediateSize == config.intermediateSize);
  CHECK(again.numHiddenLayers == config.numHiddenLayers);
  CHECK(again.numAttentionHeads == config.numAttentionHeads);
  CHECK(again.numKeyValueHeads == config.numKeyValueHeads);
  CHECK(again.headDim == 32);
  CHECK(again.ropeScaling.type == RopeScaling::Type::Linear);
  CHECK(again.ropeScaling.factor == 4.0);
  CHECK(again.tieWordEmbeddings);
  CHECK(again.eosTokenIds == config.eosTokenIds);
  CHECK(again.bosTokenId == 3);
  CHECK(again.initializerRange == 0.01);
  CHECK(again.extra == config.extra);

  Json qwen2 = minimal("Qwen2ForCausalLM");
  qwen2["sliding_window"] = 32768;
  qwen2["max_window_layers"] = 21;
  const Json qwen2Written = toJson(parseModelConfig(qwen2, "x"));
  CHECK(qwen2Written.at("sliding_window") == 32768);
  CHECK(qwen2Written.at("max_window_layers") == 21);
  CHECK(qwen2Written.at("use_sliding_window") == false);
  CHECK(parseModelConfig(qwen2Written, "y").slidingWindow == 0);

  Json mixtralJson = minimal("MixtralForCausalLM");
  mixtralJson["num_local_experts"] = 8;
  mixtralJson["num_experts_per_tok"] = 2;
  mixtralJson["sliding_window"] = 64;
  const ModelConfig mixtral = parseModelConfig(toJson(parseModelConfig(mixtralJson, "x")), "y");
  CHECK(mixtral.numLocalExperts == 8);
  CHECK(mixtral.numExpertsPerTok == 2);
  CHECK(mixtral.slidingWindow == 64);

  Json llama3 = minimal("LlamaForCausalLM");
  llama3["rope_scaling"] = {{"rope_type", "llama3"},
                            {"factor", 32.0},
                            {"low_freq_factor", 2.0},
                            {"high_freq_factor", 6.0},
                            {"original_max_position_embeddings", 4096}};
  const RopeScaling scaling =
      parseModelConfig(toJson(parseModelConfig(llama3, "x")), "y").ropeScaling;
  CHECK(scaling.type == RopeScaling::Type::Llama3);
  CHECK(scaling.factor == 32.0);
  CHECK(scaling.lowFreqFactor == 2.0);
  CHECK(scaling.highFreqFactor == 6.0);
  CHECK(scaling.originalMaxPositionEmbeddings == 4096);
}

TEST_CASE("bad configs throw fp4lab::Error naming the field and file", "[model][config][errors]") {
  SECTION("unknown architecture") {
    const fp4lab::Error error = parseError(minimal("GPT2LMHeadModel"));
    CHECK_THAT(error.problem(), Catch::Contains("GPT2LMHeadModel"));
    CHECK(error.where() == "cfg/config.json");
    CHECK_THAT(error.hint(), Catch::Contains("LlamaForCausalLM"));
  }
  SECTION("missing required field") {
    const std::string field =
        GENERATE(as<std::string>{}, "architectures", "vocab_size", "hidden_size",
                 "intermediate_size", "num_hidden_layers", "num_attention_heads");
    Json json = minimal("LlamaForCausalLM");
    json.erase(field);
    const fp4lab::Error error = parseError(json);
    CHECK_THAT(error.problem(), Catch::Contains(field));
    CHECK(error.where() == "cfg/config.json");
  }
  SECTION("null counts as missing") {
    Json json = minimal("LlamaForCausalLM");
    json["vocab_size"] = nullptr;
    CHECK_THAT(parseError(json).problem(), Catch::Contains("vocab_size"));
  }
  SECTION("Mixtral needs its expert counts") {
    Json json = minimal("MixtralForCausalLM");
    json["num_experts_per_tok"] = 2;
    CHECK_THAT(parseError(json).problem(), Catch::Contains("num_local_experts"));
  }
  SECTION("wrong types") {
    Json json = minimal("LlamaForCausalLM");
    json["hidden_size"] = "big";
    CHECK_THAT(parseError(json).problem(), Catch::Contains("hidden_size"));
    json = minimal("LlamaForCausalLM");
    json["num_hidden_layers"] = 2.5;
    CHECK_THAT(parseError(json).problem(), Catch::Contains("num_hidden_layers"));
    json = minimal("LlamaForCausalLM");
    json["tie_word_embeddings"] = "yes";
    CHECK_THAT(parseError(json).problem(), Catch::Contains("tie_word_embeddings"));
    json = minimal("LlamaForCausalLM");
    json["architectures"] = "LlamaForCausalLM";
    CHECK_THAT(parseError(json).problem(), Catch::Contains("architectures"));
    json = minimal("LlamaForCausalLM");
    json["eos_token_id"] = {1, "two"};
    CHECK_THAT(parseError(json).problem(), Catch::Contains("eos_token_id"));
  }
  SECTION("inconsistent sizes") {
    Json json = minimal("LlamaForCausalLM");
    json["num_key_value_heads"] = 3;
    CHECK_THAT(parseError(json).problem(), Catch::Contains("num_key_value_heads"));
    json = minimal("LlamaForCausalLM");
    json["vocab_size"] = 0;
    CHECK_THAT(parseError(json).problem(), Catch::Contains("vocab_size"));
    json = minimal("LlamaForCausalLM");
    json["head_dim"] = 15;
    CHECK_THAT(parseError(json).problem(), Catch::Contains("head_dim"));
  }
  SECTION("unsupported features are refused, not ignored") {
    Json json = minimal("LlamaForCausalLM");
    json["rope_scaling"] = {{"rope_type", "longrope"}, {"factor", 4.0}};
    CHECK_THAT(parseError(json).problem(), Catch::Contains("longrope"));
    json["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
    CHECK_THAT(parseError(json).problem(), Catch::Contains("original_max_position_embeddings"));
    json["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 4.0}};
    CHECK_THAT(parseError(json).problem(), Catch::Contains("original_max_position_embeddings"));
    json = minimal("LlamaForCausalLM");
    json["hidden_act"] = "gelu";
    CHECK_THAT(parseError(json).problem(), Catch::Contains("gelu"));
    json = minimal("Qwen2ForCausalLM");
    json["use_sliding_window"] = true;
    CHECK_THAT(parseError(json).problem(), Catch::Contains("use_sliding_window"));
  }
}

TEST_CASE("gpt-oss configs: GptOssConfig's defaults, layer types, YaRN", "[model][config]") {
  Json json = minimal("GptOssForCausalLM");
  json["num_hidden_layers"] = 4;
  const ModelConfig defaults = parseModelConfig(json, "config.json");
  CHECK(defaults.isGptOss());
  CHECK(defaults.attentionBias);  // GptOssConfig's attention_bias defaults to true
  CHECK(defaults.oProjBias());
  CHECK(defaults.slidingWindow == 128);
  CHECK(defaults.slidingLayers == std::vector<bool>{true, false, true, false});
  CHECK(defaults.windowOf(0) == 128);
  CHECK(defaults.windowOf(1) == 0);
  CHECK(defaults.numLocalExperts == 128);
  CHECK(defaults.numExpertsPerTok == 4);
  CHECK(defaults.headDim == 64);
  CHECK(defaults.swigluLimit == 7.0);
  CHECK(defaults.swigluAlpha == 1.702);
  CHECK(defaults.ropeTheta == 150000.0);
  REQUIRE(defaults.ropeScaling.type == RopeScaling::Type::Yarn);
  CHECK(defaults.ropeScaling.factor == 32.0);
  CHECK_FALSE(defaults.ropeScaling.truncate);
  CHECK(defaults.ropeScaling.originalMaxPositionEmbeddings == 4096);
  CHECK(defaults.ropeScaling.attentionFactor == Approx(0.1 * std::log(32.0) + 1.0));

  // Through config.json and back: the same model, YaRN's extra fields kept.
  json["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 5e5},
                             {"factor", 8.0},       {"original_max_position_embeddings", 1024},
                             {"mscale", 0.707},     {"mscale_all_dim", 0.5}};
  json["layer_types"] = {"full_attention", "sliding_attention", "sliding_attention",
                         "full_attention"};
  json["sliding_window"] = 16;
  json["swiglu_limit"] = 5.0;
  const ModelConfig custom = parseModelConfig(json, "config.json");
  CHECK(custom.slidingLayers == std::vector<bool>{false, true, true, false});
  CHECK(custom.ropeTheta == 5e5);
  CHECK(custom.ropeScaling.truncate);  // HF's default when the key is absent
  CHECK(custom.ropeScaling.attentionFactor ==
        Approx((0.1 * 0.707 * std::log(8.0) + 1) / (0.1 * 0.5 * std::log(8.0) + 1)));
  const ModelConfig again = parseModelConfig(toJson(custom), "round trip");
  CHECK(again.slidingLayers == custom.slidingLayers);
  CHECK(again.slidingWindow == 16);
  CHECK(again.swigluLimit == 5.0);
  CHECK(again.ropeTheta == 5e5);
  CHECK(again.ropeScaling.factor == 8.0);
  CHECK(again.ropeScaling.attentionFactor == Approx(custom.ropeScaling.attentionFactor));
  CHECK(again.ropeScaling.originalMaxPositionEmbeddings == 1024);

  json["layer_types"] = {"full_attention", "chunked_attention", "full_attention", "full_attention"};
  CHECK_THAT(parseError(json).problem(), Catch::Contains("chunked_attention"));
  json["layer_types"] = {"full_attention"};
  CHECK_THAT(parseError(json).problem(), Catch::Contains("layer_types"));
}

TEST_CASE("loadModelConfig reads config.json and generation_config.json", "[model][config]") {
  // std::filesystem is off limits next to libtorch (see model/files.h).
  const std::string folder = files::makeTemporaryDirectory("/tmp/fp4lab-config-test-");
  struct Cleanup {
    std::string path;
    ~Cleanup() { files::removeTree(path); }
  } cleanup{folder};
  const std::string configPath = files::join(folder, "config.json");

  CHECK_THROWS_WITH(loadModelConfig(configPath), Catch::Contains(configPath));

  std::ofstream(configPath) << "{\"architectures\": [";
  CHECK_THROWS_WITH(loadModelConfig(configPath), Catch::Contains(configPath));

  Json json = minimal("LlamaForCausalLM");
  json["eos_token_id"] = 2;
  std::ofstream(configPath, std::ios::trunc) << json.dump();
  ModelConfig config = loadModelConfig(configPath);
  CHECK(config.generationConfig.is_null());
  CHECK(config.stopTokenIds() == std::vector<int64_t>{2});
  CHECK(generationConfigJson(config) == Json{{"eos_token_id", 2}});

  std::ofstream(files::join(folder, "generation_config.json"))
      << R"({"eos_token_id": [2, 9], "do_sample": true})";
  config = loadModelConfig(configPath);
  CHECK(config.stopTokenIds() == std::vector<int64_t>{2, 9});
  CHECK(generationConfigJson(config).at("do_sample") == true);

  json.erase("hidden_size");
  std::ofstream(configPath, std::ios::trunc) << json.dump();
  try {
    loadModelConfig(configPath);
    FAIL("expected an error");
  } catch (const fp4lab::Error& error) {
    CHECK_THAT(error.problem(), Catch::Contains("hidden_size"));
    CHECK(error.where() == configPath);
  }
}
