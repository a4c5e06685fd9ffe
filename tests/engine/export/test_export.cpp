// Tests for the exporter (fp4lab_export): every format's tensor names, dtypes and shapes; the
// packed codes and scales against the reference kernels on random weights, decoded by hand from
// the layout; the shared tensor scale of the fused groups; a run's quant_state.json (calibrated
// amaxes, W4A4 input scales); sharding and the index; refusal, --force and atomicity.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <tuple>
#include <string>
#include <vector>

#include "../temp_dir.h"
#include "fp4lab/common/files.h"
#include "fp4lab/error.h"
#include "fp4lab/export/export.h"
#include "fp4lab/io/safetensors.h"
#include "fp4lab/kernels/formats.h"
#include "fp4lab/kernels/fp4.h"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using fp4lab::io::DType;
using fp4lab::io::SafetensorsFile;
using fp4lab::io::SafetensorsWriter;
namespace ex = fp4lab::exporter;
using json = nlohmann::json;

namespace {

constexpr int64_t kHidden = 64, kKv = 32, kInter = 96, kVocab = 40, kLayers = 2;

const char* kProj[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                       "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                       "mlp.down_proj"};

std::vector<int64_t> projShape(const std::string& p) {
  if (p == "self_attn.k_proj" || p == "self_attn.v_proj") return {kKv, kHidden};
  if (p == "mlp.gate_proj" || p == "mlp.up_proj") return {kInter, kHidden};
  if (p == "mlp.down_proj") return {kHidden, kInter};
  return {kHidden, kHidden};
}

std::vector<uint16_t> randomBf16(int64_t n, float scale, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<uint16_t> out(static_cast<size_t>(n));
  for (auto& v : out) v = fp4lab::io::floatToBf16(normal(rng));
  return out;
}

constexpr int64_t kExperts = 2;

// A tiny Llama-shaped Hugging Face folder with random BF16 weights; each projection has its own
// scale so the layers of a fused group have different amaxes. `shards` > 1 writes an index.
// `gptOss`: a GptOssForCausalLM instead, whose MLP is a router and two experts tensors per layer
// (gate_up_proj [E, H, 2I], down_proj [E, I, H], with biases), Hugging Face's layout.
void makeModel(const std::string& dir, int shards = 1, uint32_t seed = 7, bool gptOss = false) {
  fs::create_directories(dir);
  std::mt19937 rng(seed);
  std::vector<std::pair<std::string, std::vector<int64_t>>> tensors;
  std::map<std::string, std::vector<uint16_t>> values;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float scale) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    values[name] = randomBf16(n, scale, rng);
    tensors.emplace_back(name, shape);
  };
  add("model.embed_tokens.weight", {kVocab, kHidden}, 1.0f);
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {kHidden}, 1.0f);
    int i = 0;
    for (const char* proj : kProj) {
      if (gptOss && std::string(proj).rfind("mlp.", 0) == 0) continue;
      add(p + proj + ".weight", projShape(proj), 0.02f * float(++i));
    }
    if (gptOss) {
      add(p + "self_attn.sinks", {4}, 1.0f);
      add(p + "mlp.router.weight", {kExperts, kHidden}, 0.1f);
      add(p + "mlp.router.bias", {kExperts}, 0.1f);
      add(p + "mlp.experts.gate_up_proj", {kExperts, kHidden, 2 * kInter}, 0.03f);
      add(p + "mlp.experts.gate_up_proj_bias", {kExperts, 2 * kInter}, 0.1f);
      add(p + "mlp.experts.down_proj", {kExperts, kInter, kHidden}, 0.05f);
      add(p + "mlp.experts.down_proj_bias", {kExperts, kHidden}, 0.1f);
    }
    add(p + "post_attention_layernorm.weight", {kHidden}, 1.0f);
  }
  add("model.norm.weight", {kHidden}, 1.0f);
  add("lm_head.weight", {kVocab, kHidden}, 0.05f);
  std::vector<SafetensorsWriter> writers(static_cast<size_t>(shards));
  json index;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, shape] = tensors[i];
    const size_t s = i * size_t(shards) / tensors.size();
    const auto& v = values[name];
    writers[s].add(name, DType::BF16, shape, v.data(), v.size() * 2);
    index["weight_map"][name] = "model-" + std::to_string(s) + ".safetensors";
  }
  if (shards == 1) {
    writers[0].write(dir + "/model.safetensors");
  } else {
    for (int s = 0; s < shards; ++s)
      writers[size_t(s)].write(dir + "/model-" + std::to_string(s) + ".safetensors");
    fp4lab::files::writeFileAtomically(dir + "/model.safetensors.index.json", index.dump());
  }
  json config = {{"architectures", {gptOss ? "GptOssForCausalLM" : "LlamaForCausalLM"}},
                 {"model_type", gptOss ? "gpt_oss" : "llama"},
                 {"hidden_size", kHidden},
                 {"torch_dtype", "bfloat16"},
                 {"tie_word_embeddings", false}};
  fp4lab::files::writeFileAtomically(dir + "/config.json", config.dump(2));
  fp4lab::files::writeFileAtomically(dir + "/tokenizer.json", "{\"model\": {}}");
  fp4lab::files::writeFileAtomically(dir + "/generation_config.json", "{}");
}

// The tensors of an output folder, read through the index when there is one.
struct Output {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::map<std::string, std::pair<SafetensorsFile*, const fp4lab::io::TensorInfo*>> tensors;

  explicit Output(const std::string& dir) {
    std::set<std::string> names;
    if (fs::exists(dir + "/model.safetensors.index.json")) {
      json index = json::parse(fp4lab::files::readFile(dir + "/model.safetensors.index.json"));
      for (auto& item : index["weight_map"].items()) names.insert(item.value().get<std::string>());
    } else {
      names.insert("model.safetensors");
    }
    for (const std::string& n : names) {
      files.push_back(std::make_unique<SafetensorsFile>(dir + "/" + n));
      for (const auto& t : files.back()->tensors()) tensors[t.name] = {files.back().get(), &t};
    }
  }
  bool has(const std::string& name) const { return tensors.count(name) > 0; }
  const fp4lab::io::TensorInfo& info(const std::string& name) const {
    REQUIRE(has(name));
    return *tensors.at(name).second;
  }
  const uint8_t* data(const std::string& name) const {
    return tensors.at(name).first->data(info(name));
  }
  std::vector<uint8_t> bytes(const std::string& name) const {
    const uint8_t* d = data(name);
    return std::vector<uint8_t>(d, d + info(name).bytes());
  }
  float scalar(const std::string& name) const {
    float v;
    std::memcpy(&v, data(name), 4);
    return v;
  }
};

std::vector<float> inputWeight(const std::string& dir, const std::string& name) {
  SafetensorsFile f(dir + "/model.safetensors");
  return f.toFloat32(f.at(name));
}

float amaxOf(const std::vector<float>& v) {
  return fp4_tensor_amax(v.data(), int64_t(v.size()));
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Decodes packed E2M1 codes by hand: even element in the low nibble, one scale per block.
std::vector<float> decodeByHand(const uint8_t* codes, const uint8_t* scales, int64_t rows,
                                int64_t cols, int block, bool nvfp4, float s2) {
  std::vector<float> out(size_t(rows * cols));
  for (int64_t i = 0; i < rows * cols; ++i) {
    const uint8_t byte = codes[i / 2];
    const uint8_t code = i % 2 == 0 ? byte & 0xF : byte >> 4;
    const uint8_t sb = scales[(i / cols) * (cols / block) + (i % cols) / block];
    const float scale = nvfp4 ? fp4lab::e4m3Decode(sb) * s2 : fp4lab::e8m0Decode(sb);
    out[size_t(i)] = fp4lab::e2m1Decode(code) * scale;
  }
  return out;
}

ex::Options options(const std::string& model, const std::string& out, ex::Format format) {
  ex::Options o;
  o.modelDir = model;
  o.outputDir = out;
  o.format = format;
  return o;
}

std::string layerName(int l, const char* proj) {
  return "model.layers." + std::to_string(l) + "." + proj;
}

}  // namespace

TEST_CASE("modelopt-nvfp4: layout, codes and scales match the reference kernels", "[export]") {
  fp4lab::testing::TempDir tmp;
  const std::string model = tmp.file("model"), out = tmp.file("out");
  makeModel(model);
  REQUIRE(fp4_set_backend(FP4_BACKEND_REFERENCE) == FP4_OK);
  const ex::Summary s = ex::exportModel(options(model, out, ex::Format::ModelOptNvfp4));
  fp4_set_backend(FP4_BACKEND_AUTO);
  CHECK(s.quantAlgo == "W4A16_NVFP4");
  CHECK(s.quantizedLayers == kLayers * 7);
  CHECK(s.shards == 1);
  CHECK(s.sharedTensorScales);
  CHECK(s.verifiedTensors == s.tensors);
  CHECK(s.compression > 2.0);
  CHECK(s.maxAbsError > 0);
  Output o(out);
  CHECK(o.files[0]->metadata().at("format") == "pt");
  // Non-quantized tensors: same names, dtypes and bytes.
  SafetensorsFile in(model + "/model.safetensors");
  for (const char* name : {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight",
                           "model.layers.0.input_layernorm.weight"}) {
    CHECK(o.info(name).dtype == DType::BF16);
    CHECK(o.info(name).shape == in.at(name).shape);
    CHECK(o.bytes(name) ==
          std::vector<uint8_t>(in.data(in.at(name)), in.data(in.at(name)) + in.at(name).bytes()));
  }
  for (int l = 0; l < kLayers; ++l) {
    // The fused groups' tensor scale: the group's largest amax.
    auto amax = [&](const char* proj) {
      return amaxOf(inputWeight(model, layerName(l, proj) + ".weight"));
    };
    const float qkv =
        std::max({amax("self_attn.q_proj"), amax("self_attn.k_proj"), amax("self_attn.v_proj")});
    const float gateUp = std::max(amax("mlp.gate_proj"), amax("mlp.up_proj"));
    for (const char* proj : kProj) {
      const std::string p = layerName(l, proj);
      const std::vector<int64_t> shape = projShape(proj);
      const int64_t rows = shape[0], cols = shape[1];
      CHECK(o.info(p + ".weight").dtype == DType::U8);
      CHECK(o.info(p + ".weight").shape == std::vector<int64_t>{rows, cols / 2});
      CHECK(o.info(p + ".weight_scale").dtype == DType::F8_E4M3);
      CHECK(o.info(p + ".weight_scale").shape == std::vector<int64_t>{rows, cols / 16});
      CHECK(o.info(p + ".weight_scale_2").dtype == DType::F32);
      CHECK(o.info(p + ".weight_scale_2").shape.empty());
      CHECK_FALSE(o.has(p + ".input_scale"));
      const std::string sp = proj;
      const bool inQkv =
          sp == "self_attn.q_proj" || sp == "self_attn.k_proj" || sp == "self_attn.v_proj";
      const bool inGateUp = sp == "mlp.gate_proj" || sp == "mlp.up_proj";
      const float groupAmax = inQkv ? qkv : inGateUp ? gateUp : amax(proj);
      CHECK(bits(o.scalar(p + ".weight_scale_2")) == bits(groupAmax / 2688.0f));
      // Codes and scales: the reference kernel's, with the group's tensor amax.
      const std::vector<float> w = inputWeight(model, p + ".weight");
      std::vector<uint8_t> codes(size_t(rows * cols / 2)), scales(size_t(rows * cols / 16));
      fp4_config cfg = fp4_default_config(FP4_FORMAT_NVFP4);
      REQUIRE(fp4_set_backend(FP4_BACKEND_REFERENCE) == FP4_OK);
      float s2 = 0;
      REQUIRE(fp4_quantize(&cfg, w.data(), rows, cols, groupAmax, codes.data(), scales.data(),
                           &s2) == FP4_OK);
      std::vector<float> fake(w.size());
      REQUIRE(fp4_fake_quantize(&cfg, w.data(), rows, cols, groupAmax, fake.data(), nullptr,
                                nullptr, nullptr) == FP4_OK);
      fp4_set_backend(FP4_BACKEND_AUTO);
      CHECK(o.bytes(p + ".weight") == codes);
      CHECK(o.bytes(p + ".weight_scale") == scales);
      // Decoded by hand from the file == the fake-quantized weight, bit for bit.
      const std::vector<float> decoded =
          decodeByHand(o.data(p + ".weight"), o.data(p + ".weight_scale"), rows, cols, 16, true,
                       o.scalar(p + ".weight_scale_2"));
      CHECK(std::memcmp(decoded.data(), fake.data(), fake.size() * 4) == 0);
    }
  }
  // q/k/v share one weight_scale_2, o_proj has its own.
  CHECK(o.scalar("model.layers.0.self_attn.q_proj.weight_scale_2") ==
        o.scalar("model.layers.0.self_attn.v_proj.weight_scale_2"));
  CHECK(o.scalar("model.layers.0.mlp.gate_proj.weight_scale_2") ==
        o.scalar("model.layers.0.mlp.up_proj.weight_scale_2"));
  CHECK(o.scalar("model.layers.0.self_attn.o_proj.weight_scale_2") !=
        o.scalar("model.layers.0.self_attn.q_proj.weight_scale_2"));
  // The configs.
  json hf = json::parse(fp4lab::files::readFile(out + "/hf_quant_config.json"));
  CHECK(hf["producer"]["name"] == "fp4lab");
  CHECK(hf["producer"].contains("version"));
  CHECK(hf["quantization"]["quant_algo"] == "W4A16_NVFP4");
  CHECK(hf["quantization"]["group_size"] == 16);
  CHECK(hf["quantization"]["kv_cache_quant_algo"].is_null());
  CHECK(hf["quantization"]["exclude_modules"] == json::array({"lm_head"}));
  json config = json::parse(fp4lab::files::readFile(out + "/config.json"));
  CHECK(config["quantization_config"]["quant_method"] == "modelopt");
  CHECK(config["quantization_config"]["quant_algo"] == "W4A16_NVFP4");
  CHECK(config["hidden_size"] == kHidden);
  CHECK(fs::exists(out + "/tokenizer.json"));
  CHECK(fs::exists(out + "/generation_config.json"));
}

TEST_CASE("compressed-tensors-nvfp4: names, reciprocal global scale, quantization_config",
          "[export]") {
  fp4lab::testing::TempDir tmp;
  const std::string model = tmp.file("model"), out = tmp.file("out");
  makeModel(model);
  const ex::Summary s = ex::exportModel(options(model, out, ex::Format::CompressedTensorsNvfp4));
  CHECK(s.quantAlgo == "NVFP4A16");
  Output o(out);
  const std::string p = "model.layers.1.self_attn.k_proj";
  CHECK_FALSE(o.has(p + ".weight"));
  CHECK(o.info(p + ".weight_packed").dtype == DType::U8);
  CHECK(o.info(p + ".weight_packed").shape == std::vector<int64_t>{kKv, kHidden / 2});
  CHECK(o.info(p + ".weight_scale").dtype == DType::F8_E4M3);
  CHECK(o.info(p + ".weight_scale").shape == std::vector<int64_t>{kKv, kHidden / 16});
  CHECK(o.info(p + ".weight_global_scale").dtype == DType::F32);
  CHECK(o.info(p + ".weight_global_scale").shape == std::vector<int64_t>{1});
  const float qkv =
      std::max({amaxOf(inputWeight(model, "model.layers.1.self_attn.q_proj.weight")),
                amaxOf(inputWeight(model, "model.layers.1.self_attn.k_proj.weight")),
                amaxOf(inputWeight(model, "model.layers.1.self_attn.v_proj.weight"))});
  CHECK(bits(o.scalar(p + ".weight_global_scale")) == bits(2688.0f / qkv));
  json q = json::parse(fp4lab::files::readFile(out + "/config.json"))["quantization_config"];
  CHECK(q["quant_method"] == "compressed-tensors");
  CHECK(q["format"] == "nvfp4-pack-quantized");
  CHECK(q["ignore"] == json::array({"lm_head"}));
  const json& g = q["config_groups"]["group_0"];
  CHECK(g["targets"] == json::array({"Linear"}));
  CHECK(g["weights"]["strategy"] == "tensor_group");
  CHECK(g["weights"]["group_size"] == 16);
  CHECK(g["weights"]["num_bits"] == 4);
  CHECK(g["weights"]["type"] == "float");
  CHECK(g["input_activations"].is_null());
  CHECK_FALSE(fs::exists(out + "/hf_quant_config.json"));
}

TEST_CASE("compressed-tensors-mxfp4: E8M0 scales, block 32, both scale rules", "[export]") {
  fp4lab::testing::TempDir tmp;
  const std::string model = tmp.file("model");
  makeModel(model);
  for (const char* rule : {"ceil", "floor"}) {
    const std::string out = tmp.file(std::string("out-") + rule);
    ex::Options opt = options(model, out, ex::Format::CompressedTensorsMxfp4);
    opt.scaleRule = rule;
    const ex::Summary s = ex::exportModel(opt);
    CHECK(s.quantAlgo == "MXFP4A16");
    CHECK_FALSE(s.sharedTensorScales);
    Output o(out);
    const std::string p = "model.layers.0.mlp.down_proj";
    CHECK(o.info(p + ".weight_packed").shape == std::vector<int64_t>{kHidden, kInter / 2});
    CHECK(o.info(p + ".weight_scale").dtype == DType::U8);
    CHECK(o.info(p + ".weight_scale").shape == std::vector<int64_t>{kHidden, kInter / 32});
    CHECK_FALSE(o.has(p + ".weight_global_scale"));
    const std::vector<float> w = inputWeight(model, p + ".weight");
    fp4_config cfg = fp4_default_config(FP4_FORMAT_MXFP4);
    cfg.scale_rule = std::string(rule) == "floor" ? FP4_SCALE_RULE_FLOOR : FP4_SCALE_RULE_CEIL;
    std::vector<uint8_t> codes(w.size() / 2), scales(w.size() / 32);
    REQUIRE(fp4_set_backend(FP4_BACKEND_REFERENCE) == FP4_OK);
    REQUIRE(fp4_quantize(&cfg, w.data(), kHidden, kInter, -1, codes.data(), scales.data(),
                         nullptr) == FP4_OK);
    std::vector<float> fake(w.size());
    REQUIRE(fp4_fake_quantize(&cfg, w.data(), kHidden, kInter, -1, fake.data(), nullptr, nullptr,
                              nullptr) == FP4_OK);
    fp4_set_backend(FP4_BACKEND_AUTO);
    CHECK(o.bytes(p + ".weight_packed") == codes);
    CHECK(o.bytes(p + ".weight_scale") == scales);
    const std::vector<float> decoded = decodeByHand(
        o.data(p + ".weight_packed"), o.data(p + ".weight_scale"), kHidden, kInter, 32, false, 1);
    CHECK(std::memcmp(decoded.data(), fake.data(), fake.size() * 4) == 0);
    json q = json::parse(fp4lab::files::readFile(out + "/config.json"))["quantization_config"];
    CHECK(q["format"] == "mxfp4-pack-quantized");
    CHECK(q["config_groups"]["group_0"]["weights"]["strategy"] == "group");
    CHECK(q["config_groups"]["group_0"]["weights"]["group_size"] == 32);
    CHECK(q["config_groups"]["group_0"]["weights"]["scale_dtype"] == "torch.uint8");
  }
  // The two rules differ somewhere on random data.
  Output ceil(tmp.file("out-ceil")), floor(tmp.file("out-floor"));
  CHECK(ceil.bytes("model.layers.0.mlp.down_proj.weight_scale") !=
        floor.bytes("model.layers.0.mlp.down_proj.weight_scale"));
}

TEST_CASE("bf16: a plain folder with the input's names", "[export]") {
  fp4lab::testing::TempDir tmp;
  const std::string model = tmp.file("model"), out = tmp.file("out");
  makeModel(model);
  const ex::Summary s = ex::exportModel(options(model, out, ex::Format::Bf16));
  CHECK(s.quantizedLayers == 0);
  CHECK(s.verifiedTensors == s.tensors);
  Output o(out);
  SafetensorsFile in(model + "/model.safetensors");
  CHECK(o.tensors.size() == in.tensors().size());
  for (const auto& t : in.tensors()) {
    CHECK(o.info(t.name).dtype == DType::BF16);
    CHECK(o.info(t.name).shape == t.shape);
    CHECK(std::memcmp(o.data(t.name), in.data(t), t.bytes()) == 0);
  }
  json config = json::parse(fp4lab::files::readFile(out + "/config.json"));
  CHECK_FALSE(config.contains("quantization_config"));
}

TEST_CASE("--exclude keeps matching layers in BF16 and lists them", "[export]") {
  fp4lab::testing::TempDir tmp;
  const std::string model = tmp.file("model"), out = tmp.file("out"), ct = tmp.file("ct");
  makeModel(model);
  ex::Options opt = options(model, out, ex::Format::ModelOptNvfp4);
  opt.exclude = {"*.1.mlp.*"};
  const ex::Summary s = ex::exportModel(opt);
  CHECK(s.quantizedLayers == kLayers * 7 - 3);
  Output o(out);
  CHECK(o.info("model.layers.1.mlp.up_proj.weight").dtype == DType::BF16);
  CHECK_FALSE(o.has("model.layers.1.mlp.up_proj.weight_scale"));
  CHECK(o.info("model.layers.0.mlp.up_proj.weight").dtype == DType::U8);
  json hf = json::parse(fp4lab::files::readFile(out + "/hf_quant_config.json"));
  const json& excluded = hf["quantization"]["exclude_modules"];
  CHECK(excluded[0] == "lm_head");
  auto listed = [&](const json& list, const std::string& name) {
    return std::find(list.begin(), list.end(), name) != list.end();
  };
  CHECK(listed(excluded, "*.1.mlp.*"));
  CHECK(listed(excluded, "model.layers.1.mlp.down_proj"));
  opt = options(model, ct, ex::Format::CompressedTensorsNvfp4);
  opt.exclude = {"model.layers.0.self_attn.[qk]_proj"};
  ex::exportModel(opt);
  json ignore =
      json::parse(fp4lab::files::readFile(ct + "/config.json"))["quantization_config"]["ignore"];
  CHECK(ignore == json::array({"lm_head", "model.layers.0.self_attn.q_proj",
                               "model.layers.0.self_attn.k_proj"}));
  // k/v lost q: v's tensor scale is the group's largest among the quantized members.
  Output c(ct);
  CHECK(c.info("model.layers.0.self_attn.q_proj.weight").dtype == DType::BF16);
  CHECK(c.has("model.layers.0.self_attn.v_proj.weight_packed"));
  opt.exclude = {"*"};
  opt.outputDir = tmp.file("none");
  CHECK_THROWS_WITH(ex::exportModel(opt), Contains("no linear layer to quantize"));
}

TEST_CASE("a run's quant_state.json: its layers, calibrated amaxes and input scales", "[export]") {
  fp4lab::testing::TempDir tmp;
  const std::string model = tmp.file("model");
  makeModel(model);
  json state;
  state["format"] = "NVFP4 W4A4, 1-D blocks, clipped STE, calibrated amax";
  state["options"] = {{"format", "nvfp4"},   {"scale_rule", "ceil"},      {"blocks_2d", false},
                      {"activations", true}, {"backward", "clipped_ste"}, {"amax", "frozen"}};
  // Layer 0's projections only, with amaxes below the weights' (training clips against them).
  int i = 0;
  for (const char* proj : kProj)
    state["layers"][layerName(0, proj)] = {{"weight_amax", 0.01 * ++i}, {"input_amax", 3.0 + i}};
  fp4lab::files::writeFileAtomically(model + "/quant_state.json", state.dump());
  for (auto format : {ex::Format::ModelOptNvfp4, ex::Format::CompressedTensorsNvfp4}) {
    const std::string out = tmp.file(std::string("out-") + ex::formatName(format));
    const ex::Summary s = ex::exportModel(options(model, out, format));
    CHECK(s.quantAlgo == "NVFP4");
    CHECK(s.quantizedLayers == 7);
    CHECK_THAT(s.source, Contains("quant_state.json"));
    Output o(out);
    const bool mo = format == ex::Format::ModelOptNvfp4;
    const std::string q = layerName(0, "self_attn.q_proj");
    // q/k/v: the largest calibrated amax of the group (v: 0.03).
    const float s2 = o.scalar(q + (mo ? ".weight_scale_2" : ".weight_global_scale"));
    CHECK(bits(s2) == bits(mo ? 0.03f / 2688.0f : 2688.0f / 0.03f));
    const float in = o.scalar(q + (mo ? ".input_scale" : ".input_global_scale"));
    CHECK(bits(in) == bits(mo ? 4.0f / 2688.0f : 2688.0f / 4.0f));
    CHECK(o.info(layerName(1, "self_attn.q_proj") + ".weight").dtype == DType::BF16);
    CHECK_FALSE(o.has(layerName(1, "self_attn.q_proj") + ".weight_scale"));
    if (mo) {
      json hf = json::parse(fp4lab::files::readFile(out + "/hf_quant_config.json"));
      CHECK(hf["quantization"]["quant_algo"] == "NVFP4");
      CHECK(hf["quantization"]["exclude_modules"].size() == 8);  // lm_head + layer 1's seven
    } else {
      json g = json::parse(fp4lab::files::readFile(
          out + "/config.json"))["quantization_config"]["config_groups"]["group_0"];
      CHECK(g["input_activations"]["strategy"] == "tensor_group");
      CHECK(g["input_activations"]["dynamic"] == "local");
    }
  }
  // An NVFP4 run does not export as MXFP4, and a layer without input amax stops a W4A4 export.
  CHECK_THROWS_WITH(
      ex::exportModel(options(model, tmp.file("mx"), ex::Format::CompressedTensorsMxfp4)),
      Contains("fake-quantized in NVFP4"));
  state["layers"][layerName(0, "mlp.up_proj")]["input_amax"] = nullptr;
  fp4lab::files::writeFileAtomically(model + "/quant_state.json", state.dump());
  CHECK_THROWS_WITH(ex::exportModel(options(model, tmp.file("x"), ex::Format::ModelOptNvfp4)),
                    Contains("no calibrated input amax"));
  CHECK_FALSE(fs::exists(tmp.file("x")));
  // BF16 of a quantized run: its masters.
  CHECK(ex::exportModel(options(model, tmp.file("b"), ex::Format::Bf16)).quantizedLayers == 0);
}

TEST_CASE("sharding: shards under the limit and an index naming every tensor", "[export]") {
  fp4lab::testing::TempDir tmp;
  const std::string model = tmp.file("model"), out = tmp.file("out");
  makeModel(model, /*shards=*/3);  // a sharded input too
  ex::Options opt = options(model, out, ex::Format::ModelOptNvfp4);
  opt.maxShardBytes = 8000;
  const ex::Summary s = ex::exportModel(opt);
  CHECK(s.shards > 3);
  json index = json::parse(fp4lab::files::readFile(out + "/model.safetensors.index.json"));
  CHECK(index["metadata"]["total_size"] == s.outputBytes);
  CHECK(int64_t(index["weight_map"].size()) == s.tensors);
  std::set<std::string> shardFiles;
  for (auto& item : index["weight_map"].items()) shardFiles.insert(item.value());
  CHECK(int64_t(shardFiles.size()) == s.shards);
  char first[64];
  std::snprintf(first, sizeof first, "model-00001-of-%05lld.safetensors", (long long)s.shards);
  CHECK(shardFiles.count(first) == 1);
  CHECK_FALSE(fs::exists(out + "/model.safetensors"));
  uint64_t total = 0;
  for (const std::string& f : shardFiles) {
    SafetensorsFile shard(out + "/" + f);
    uint64_t bytes = 0;
    for (const auto& t : shard.tensors()) {
      bytes += t.bytes();
      CHECK(index["weight_map"][t.name] == f);
    }
    CHECK((bytes <= opt.maxShardBytes || shard.tensors().size() == 1));
    total += bytes;
  }
  CHECK(total == s.outputBytes);
  Output o(out);
  CHECK(int64_t(o.tensors.size()) == s.tensors);
  CHECK(ex::parseByteSize("5GB") == 5000000000ull);
  CHECK(ex::parseByteSize("500MB") == 500000000ull);
  CHECK(ex::parseByteSize("2GiB") == 2147483648ull);
  CHECK(ex::parseByteSize("100kb") == 100000ull);
  CHECK(ex::parseByteSize("1234") == 1234ull);
  CHECK_THROWS_AS(ex::parseByteSize("5XB"), fp4lab::Error);
  CHECK_THROWS_AS(ex::parseByteSize("-1GB"), fp4lab::Error);
  CHECK_THROWS_AS(ex::parseByteSize(""), fp4lab::Error);
}

TEST_CASE("refusal, --force and atomicity", "[export]") {
  fp4lab::testing::TempDir tmp;
  const std::string model = tmp.file("model"), out = tmp.file("out");
  makeModel(model);
  fs::create_directories(out);
  fp4lab::files::writeFileAtomically(out + "/keep.txt", "mine");
  auto leftovers = [&] {
    int n = 0;
    for (const auto& e : fs::directory_iterator(tmp.path))
      if (e.path().filename().string().find(".tmp-") != std::string::npos) ++n;
    return n;
  };
  // A non-empty OUT without force: refused, untouched.
  CHECK_THROWS_WITH(ex::exportModel(options(model, out, ex::Format::ModelOptNvfp4)),
                    Contains("not empty") && Contains("--force"));
  CHECK(fp4lab::files::readFile(out + "/keep.txt") == "mine");
  CHECK(fp4lab::files::listDirectory(out).size() == 1);
  // A failure mid-way (cancelled after a few tensors are written, with --force): OUT keeps its
  // old contents and no temporary folder is left.
  ex::Options opt = options(model, out, ex::Format::CompressedTensorsNvfp4);
  opt.force = true;
  std::atomic<bool> cancel{false};
  int written = 0;
  auto stopAfterFive = [&](const ex::Progress& p) {
    if (p.stage == "write" && ++written == 5) cancel = true;
  };
  CHECK_THROWS_WITH(ex::exportModel(opt, stopAfterFive, &cancel), Contains("cancelled"));
  CHECK(fp4lab::files::listDirectory(out) == std::vector<std::string>{"keep.txt"});
  CHECK(leftovers() == 0);
  // The same mid-way failure into a new folder: it never appears.
  written = 0;
  cancel = false;
  opt.outputDir = tmp.file("fresh");
  CHECK_THROWS(ex::exportModel(opt, stopAfterFive, &cancel));
  CHECK_FALSE(fs::exists(tmp.file("fresh")));
  CHECK(leftovers() == 0);
  // A cancel during verification (everything written) leaves nothing either.
  cancel = false;
  auto stopInVerify = [&](const ex::Progress& p) {
    if (p.stage == "verify") cancel = true;
  };
  CHECK_THROWS(ex::exportModel(opt, stopInVerify, &cancel));
  CHECK_FALSE(fs::exists(tmp.file("fresh")));
  // With --force the old contents are replaced.
  opt.outputDir = out;
  ex::exportModel(opt);
  CHECK_FALSE(fs::exists(out + "/keep.txt"));
  CHECK(fs::exists(out + "/model.safetensors"));
  CHECK(leftovers() == 0);
  // An empty OUT is fine without --force; a file or the model folder itself never is.
  fs::create_directories(tmp.file("empty"));
  CHECK_NOTHROW(ex::exportModel(options(model, tmp.file("empty"), ex::Format::Bf16)));
  fp4lab::files::writeFileAtomically(tmp.file("file"), "x");
  CHECK_THROWS_WITH(ex::exportModel(options(model, tmp.file("file"), ex::Format::Bf16)),
                    Contains("not a folder"));
  opt = options(model, model, ex::Format::Bf16);
  opt.force = true;
  CHECK_THROWS_WITH(ex::exportModel(opt), Contains("is the model folder"));
  // Bad inputs: named, nothing written.
  CHECK_THROWS_WITH(ex::exportModel(options(tmp.file("nope"), tmp.file("o2"), ex::Format::Bf16)),
                    Contains("does not exist"));
  CHECK_FALSE(fs::exists(tmp.file("o2")));
}

TEST_CASE("gpt-oss-mxfp4: the experts' blocks and scales, and what it refuses", "[export]") {
  fp4lab::testing::TempDir tmp;
  const std::string model = tmp.file("model"), gptOss = tmp.file("gpt-oss");
  makeModel(model);
  makeModel(gptOss, 1, 11, /*gptOss=*/true);
  CHECK_THROWS_WITH(ex::exportModel(options(model, tmp.file("o"), ex::Format::GptOssMxfp4)),
                    Contains("gpt-oss") && Contains("LlamaForCausalLM"));
  for (ex::Format f : {ex::Format::ModelOptNvfp4, ex::Format::CompressedTensorsNvfp4,
                       ex::Format::CompressedTensorsMxfp4})
    CHECK_THROWS_WITH(ex::exportModel(options(gptOss, tmp.file("o"), f)),
                      Contains("no place for gpt-oss's experts"));
  ex::Options one = options(gptOss, tmp.file("o"), ex::Format::GptOssMxfp4);
  one.exclude = {"model.layers.1.mlp.experts.down_proj"};
  CHECK_THROWS_WITH(ex::exportModel(one), Contains("together") && Contains("model.layers.1"));
  CHECK_FALSE(fs::exists(tmp.file("o")));

  // The layout: per experts tensor [E, rows, in / 32, 16] codes and [E, rows, in / 32] scales
  // that decode (by hand) to the kernels' MXFP4 fake quantization of each expert's [out, in].
  const std::string out = tmp.file("out");
  ex::Options both = options(gptOss, out, ex::Format::GptOssMxfp4);
  both.exclude = {"model.layers.1.mlp.experts.*"};
  const ex::Summary summary = ex::exportModel(both);
  CHECK(summary.quantAlgo == "MXFP4A16");
  CHECK(summary.quantizedLayers == 2);
  const Output o(out);
  const fp4_config mx = fp4_default_config(FP4_FORMAT_MXFP4);
  for (const auto& [proj, in, rows] : {std::tuple{"gate_up_proj", kHidden, 2 * kInter},
                                       std::tuple{"down_proj", kInter, kHidden}}) {
    const std::string name = std::string("model.layers.0.mlp.experts.") + proj;
    INFO(name);
    CHECK_FALSE(o.has(name));
    CHECK(o.info(name + "_blocks").dtype == DType::U8);
    CHECK(o.info(name + "_blocks").shape == std::vector<int64_t>{kExperts, rows, in / 32, 16});
    CHECK(o.info(name + "_scales").shape == std::vector<int64_t>{kExperts, rows, in / 32});
    CHECK(o.bytes(name + "_bias") == [&] {
      SafetensorsFile f(gptOss + "/model.safetensors");
      const uint8_t* d = f.data(f.at(name + "_bias"));
      return std::vector<uint8_t>(d, d + f.at(name + "_bias").bytes());
    }());
    const std::vector<float> w = inputWeight(gptOss, name);  // [E, in, rows]
    std::vector<float> t(w.size());
    for (int64_t e = 0; e < kExperts; ++e)
      for (int64_t i = 0; i < in; ++i)
        for (int64_t r = 0; r < rows; ++r)
          t[size_t((e * rows + r) * in + i)] = w[size_t((e * in + i) * rows + r)];
    std::vector<float> fake(t.size());
    REQUIRE(fp4_fake_quantize(&mx, t.data(), kExperts * rows, in, -1.0f, fake.data(), nullptr,
                              nullptr, nullptr) == FP4_OK);
    const std::vector<float> decoded = decodeByHand(
        o.data(name + "_blocks"), o.data(name + "_scales"), kExperts * rows, in, 32, false, 1.0f);
    CHECK(std::memcmp(decoded.data(), fake.data(), fake.size() * 4) == 0);
    // Layer 1's experts were excluded together: kept as they were.
    const std::string kept = std::string("model.layers.1.mlp.experts.") + proj;
    CHECK(o.info(kept).dtype == DType::BF16);
  }
  CHECK(o.info("model.layers.0.self_attn.q_proj.weight").dtype == DType::BF16);
  CHECK(o.info("model.layers.0.mlp.router.weight").dtype == DType::BF16);
  const json q = json::parse(fp4lab::files::readFile(out + "/config.json"))["quantization_config"];
  CHECK(q["quant_method"] == "mxfp4");
  const std::vector<std::string> kept = q["modules_to_not_convert"];
  CHECK(kept == std::vector<std::string>{"model.layers.*.self_attn", "model.layers.*.mlp.router",
                                         "model.embed_tokens", "lm_head",
                                         "model.layers.1.mlp.experts"});
}

TEST_CASE("export formats and globs", "[export]") {
  fp4lab::testing::TempDir tmp;
  for (const std::string& name : ex::formatNames()) {
    REQUIRE(ex::parseFormat(name));
    CHECK(ex::formatName(*ex::parseFormat(name)) == name);
    CHECK(std::strlen(ex::formatDescription(*ex::parseFormat(name))) > 0);
  }
  CHECK_FALSE(ex::parseFormat("nvfp4"));
  CHECK(ex::globMatch("*.mlp.*", "model.layers.3.mlp.up_proj"));
  CHECK(ex::globMatch("model.layers.?.self_attn.[qk]_proj", "model.layers.1.self_attn.k_proj"));
  CHECK_FALSE(
      ex::globMatch("model.layers.?.self_attn.[qk]_proj", "model.layers.1.self_attn.v_proj"));
  CHECK(ex::globMatch("model.layers.[!0].*", "model.layers.1.mlp"));
  CHECK_FALSE(ex::globMatch("model.layers.[!0].*", "model.layers.0.mlp"));
  CHECK_FALSE(ex::globMatch("lm_head", "model.lm_head"));
}
